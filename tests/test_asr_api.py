"""dasllama.ASR on a random-weight model: model resolution (a CTranslate2 directory converts
once into the cache, a .gguf loads as it is), empty and bad input, unsupported options named,
segments as faster-whisper shapes them; and the packaged whisper-tiny.en folder model pulled
from a stand-in wheel and checked file by file."""

from __future__ import annotations

import hashlib
import zipfile

import numpy as np
import pytest

import dasllama
from dasllama import models
from dasllama.asr import ASR, ASRError
from dasllama.audio import AudioError
from dasllama.errors import DasllamaError
from dasllama.testing.whisper import write_random_whisper_dir


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory):
    return write_random_whisper_dir(tmp_path_factory.mktemp("api") / "rw", seed=5)


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("DASLLAMA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DASLLAMA_MODELS", raising=False)
    return tmp_path / "cache"


def test_a_directory_converts_once_into_the_cache(random_dir, cache):
    a = ASR(random_dir, n_threads=1)
    assert a.path.parent == cache / "converted" and a.path.suffix == ".gguf"
    stamp = a.path.stat().st_mtime_ns
    b = ASR(str(random_dir), n_threads=1)
    assert b.path == a.path and b.path.stat().st_mtime_ns == stamp
    c = ASR(a.path, n_threads=1)   # the GGUF itself
    assert c.path == a.path and c.config == a.config
    assert dasllama.ASR is ASR


def test_empty_and_tiny_audio_give_no_segments(random_dir, cache):
    asr = ASR(random_dir, n_threads=1)
    for samples in (np.zeros(0, np.float32), np.zeros(100, np.float32)):
        segments, info = asr.transcribe(samples)
        assert list(segments) == [] and info.duration == samples.size / 16000


def test_segments_have_faster_whisper_fields(random_dir, cache):
    asr = ASR(random_dir, n_threads=1)
    rng = np.random.default_rng(0)
    samples = (0.05 * rng.standard_normal(16000 * 3)).astype(np.float32)
    segments, info = asr.transcribe(samples, no_speech_threshold=None)
    assert info.language == "en" and info.duration == 3.0
    segments = list(segments)
    assert segments   # random weights still write text
    for s in segments:
        assert 0 <= s.start <= s.end <= 30.0 and s.text.strip()
        assert all(t < asr.tokens["eot"] or t >= asr.tokens["timestamp_begin"] for t in s.tokens)
        assert s.avg_logprob <= 0 and 0 <= s.no_speech_prob <= 1
    assert [s.id for s in segments] == list(range(1, len(segments) + 1))
    st = asr.stats
    assert st["windows"] == 1 and st["audio_seconds"] == 3.0 and st["tokens"] >= 2
    assert 0 < st["encode_seconds"] + st["decode_seconds"] <= st["wall_seconds"]


def test_transcriptions_iterated_in_turns_equal_one_at_a_time(random_dir, cache):
    """Two segment iterators of one ASR consumed alternately (and from two threads) give
    what each gives alone: no window state leaks between them, and nothing waits forever."""
    import threading

    asr = ASR(random_dir, n_threads=1)
    rng = np.random.default_rng(1)
    a = (0.05 * rng.standard_normal(16000 * 40)).astype(np.float32)   # two windows
    b = (0.05 * rng.standard_normal(16000 * 3)).astype(np.float32)
    kw = dict(no_speech_threshold=None)
    alone_a = [s.tokens for s in asr.transcribe(a, **kw)[0]]
    alone_b = [s.tokens for s in asr.transcribe(b, **kw)[0]]
    it_a, it_b = asr.transcribe(a, **kw)[0], asr.transcribe(b, **kw)[0]
    first = next(it_a)
    both_b = [s.tokens for s in it_b]
    assert [first.tokens] + [s.tokens for s in it_a] == alone_a and both_b == alone_b
    results = {}
    threads = [threading.Thread(target=lambda k=k, x=x: results.__setitem__(
        k, [s.tokens for s in asr.transcribe(x, **kw)[0]])) for k, x in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == {"a": alone_a, "b": alone_b}


def test_bad_input_and_unsupported_options_are_named(random_dir, cache, tmp_path):
    asr = ASR(random_dir, n_threads=1)
    samples = np.zeros(16000, np.float32)
    for kwargs, message in [
        (dict(beam_size=5, prefix="x"), "prefix with beam_size=5"),
        (dict(temperature=-1.0), "temperature -1.0"),
        (dict(task="translate"), "task='translate'"), (dict(language="de"), "language='de'"),
        (dict(vad_filter=True, vad_parameters={"min_silence_ms": 1}), "min_silence_ms"),
    ]:
        with pytest.raises(ASRError, match=message):
            asr.transcribe(samples, **kwargs)
    with pytest.raises(ASRError, match="beam_size 0 is not a positive integer"):
        asr.transcribe(samples, beam_size=0)
    bad = samples.copy()
    bad[3] = np.inf
    with pytest.raises(AudioError, match="sample 3 is inf"):
        asr.transcribe(bad)
    with pytest.raises(DasllamaError, match="device='cuda' is not a device"):
        ASR(random_dir, device="cuda")
    with pytest.raises(ASRError, match="compute_type 'int4' is not one of"):
        ASR(random_dir, compute_type="int4")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ASRError, match="without model.bin"):
        ASR(tmp_path / "empty")
    with pytest.raises(DasllamaError, match="neither a file nor a known model"):
        ASR("no-such-model")
    asr.close()
    with pytest.raises(ASRError, match="closed"):
        asr.transcribe(samples)


# ----------------------------------------------------------------------------- pulling

def test_folder_model_pull_checks_every_file(cache, monkeypatch, tmp_path):
    model = models.PACKAGED["whisper-tiny.en"]
    files = {"model.bin": b"weights" * 100, "config.json": b"{}", "vocabulary.txt": b"a\n",
             "tokenizer.json": b"{}"}
    monkeypatch.setitem(models.PACKAGED, "whisper-tiny.en", models.PackagedModel(**{
        **model.__dict__,
        "files": tuple((n, hashlib.sha256(files[n]).hexdigest()) for n, _ in model.files)}))
    monkeypatch.setattr(models, "_installed_file", lambda m: None)
    (spec, member), = model.wheels
    wheel = tmp_path / "fake.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(f"{member}/{name}", data)
    fetched = []
    monkeypatch.setattr(models, "_download_wheel",
                        lambda s, folder, **kw: fetched.append(s) or wheel)
    logs = []
    path = models.pull("whisper-tiny.en", log=logs.append)
    assert path == cache / "whisper-tiny.en" and path.is_dir()
    assert {p.name: p.read_bytes() for p in path.iterdir()} == files
    assert fetched == [spec] and any("MIT" in line for line in logs)
    assert models.find("tiny.en") == path
    fetched.clear()
    assert models.pull("whisper-tiny.en", log=logs.append) == path and fetched == []
    # a file that changed is fetched again; a wrong sum in the wheel writes nothing
    (path / "config.json").write_bytes(b"{\"x\": 1}")
    models.pull("whisper-tiny.en", log=logs.append)
    assert (path / "config.json").read_bytes() == b"{}" and fetched == [spec]
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(f"{member}/{name}", data + b"!")
    with pytest.raises(models.PullError, match="model.bin has sha256 .* does not match"):
        models.pull("whisper-tiny.en", force=True, log=logs.append)
    assert (path / "config.json").read_bytes() == b"{}"


def test_real_folder_model_has_its_checksums(real_model):
    folder = real_model("whisper-tiny.en")
    for name, digest in models.PACKAGED["whisper-tiny.en"].files:
        assert models._sha256(folder / name) == digest
