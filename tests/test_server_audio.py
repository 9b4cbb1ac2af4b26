"""POST /v1/audio/speech on a live server (loopback, a free port) with a random-weight Pocket
TTS model (dasllama.testing.pocket), through the openai client.

The audio is checked against dasllama.TTS.speak on the same file with the same seed, decoded
with soundfile: 16-bit samples are within one step of speak's float samples (the rounding of
the 16-bit encoding), and a different input, seed or voice is shown to give different audio
(the negative controls). Streams are checked against the unstreamed response.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import threading

import numpy as np
import pytest
from requires import require

TEXT = "Hello world."
OTHER = "This is a short test, read aloud."
SEED = 5
# One step of 16-bit audio, plus float32's rounding of the product: the most a 16-bit sample
# may differ from the float it encodes.
PCM_STEP = 1.0 / 32767 + 1e-6
# How long the tests wait for the server to free the model after a client leaves.
FREE_WAIT_S = 30.0


# =============================================================================================
# Fixtures
# =============================================================================================

@pytest.fixture(scope="module")
def sf():
    return require("soundfile")


@pytest.fixture(scope="module")
def model_path():
    require("torch")
    require("pocket_tts")
    require("tokenizers")
    from dasllama.testing.pocket import shared_fixture
    return str(shared_fixture(("f32",)).gguf_path("f32"))


@pytest.fixture(scope="module")
def voice_file(sf, tmp_path_factory):
    from dasllama.testing.pocket import voice_wav
    path = tmp_path_factory.mktemp("voices") / "tone.wav"
    sf.write(str(path), voice_wav(), 24000, subtype="PCM_16")
    return str(path)


@pytest.fixture(scope="module")
def tts(model_path, voice_file):
    """The same model in this process, with the same voice, for the expected audio."""
    from dasllama.tts import TTS
    with TTS(model_path, n_threads=2) as t:
        t.register_voice("tone", voice_file)
        yield t


@pytest.fixture(scope="module")
def server(model_path, voice_file):
    from test_server_support import serve, spec

    # max_queue 0: a request that finds the model busy is a 503 (test_busy_model_is_503).
    with serve([spec("pocket", model_path, kind="tts", voices={"tone": voice_file})],
               threads=2, max_queue=0, request_timeout=120) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    from test_server_support import client as openai_client

    with openai_client(server) as c:
        yield c


@pytest.fixture(scope="module")
def spoken(tts):
    """spoken(text, seed=SEED, voice=None) -> TTS.speak's float32 audio (cached)."""
    cache = {}

    def get(text, seed=SEED, voice=None):
        key = (text, seed, voice)
        if key not in cache:
            cache[key] = tts.speak(text, voice=voice, seed=seed)[0]
        return cache[key]
    return get


def _post(server, body, **kwargs):
    import httpx
    return httpx.post(server.url + "/v1/audio/speech", json=body, timeout=120, **kwargs)


def _speech(client, fmt, text=TEXT, seed=SEED, voice="default", **kwargs) -> bytes:
    r = client.audio.speech.create(model="pocket", input=text, voice=voice,
                                   response_format=fmt, extra_body={"seed": seed}, **kwargs)
    return r.content


def _stream(client, fmt, text=TEXT, seed=SEED) -> list:
    with client.audio.speech.with_streaming_response.create(
            model="pocket", input=text, voice="default", response_format=fmt,
            stream_format="audio", extra_body={"seed": seed}) as r:
        assert r.status_code == 200
        return [chunk for chunk in r.iter_bytes() if chunk]


def _max_diff(a, b) -> float:
    """Largest sample difference; inf when the lengths differ."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")


def _decode(sf, data: bytes):
    audio, rate = sf.read(io.BytesIO(data), dtype="int16")
    return audio.astype(np.float64) / 32767, rate


# =============================================================================================
# Whole files
# =============================================================================================

def test_wav_equals_speak(sf, client, tts, spoken):
    audio, rate = _decode(sf, _speech(client, "wav"))
    want = spoken(TEXT)
    assert rate == tts.sample_rate == 24000
    assert len(audio) == len(want) > 0
    err = _max_diff(audio, want)
    print(f"wav against TTS.speak: max |diff| {err:.2e} (bar {PCM_STEP:.2e})")
    assert err <= PCM_STEP
    # negative controls: another text, another seed
    other, _ = _decode(sf, _speech(client, "wav", text=OTHER))
    n = min(len(other), len(want))
    assert len(other) != len(want) or _max_diff(other[:n], want[:n]) > 100 * PCM_STEP
    reseeded, _ = _decode(sf, _speech(client, "wav", seed=SEED + 1))
    n = min(len(reseeded), len(want))
    assert _max_diff(reseeded[:n], want[:n]) > 100 * PCM_STEP


def test_pcm_is_raw_16_bit_little_endian(sf, client, spoken):
    raw = _speech(client, "pcm")
    want = spoken(TEXT)
    assert len(raw) == 2 * len(want)
    samples = np.frombuffer(raw, "<i2").astype(np.float64) / 32767
    assert _max_diff(samples, want) <= PCM_STEP
    assert _max_diff(np.frombuffer(raw, ">i2") / 32767, want) > 100 * PCM_STEP


def test_registered_voice(sf, client, spoken):
    want = spoken(TEXT, voice="tone")
    for voice in ("tone", {"id": "tone"}):
        audio, _ = _decode(sf, _speech(client, "wav", voice=voice))
        assert _max_diff(audio, want) <= PCM_STEP
    # The random model's voice prompt moves its audio less than a new text does (measured
    # about 47 steps of 16-bit audio): the control asks for 10 steps.
    plain = spoken(TEXT)
    n = min(len(plain), len(want))
    assert len(plain) != len(want) or _max_diff(plain[:n], want[:n]) > 10 * PCM_STEP


def test_flac_is_lossless(sf, client, spoken):
    audio, rate = _decode(sf, _speech(client, "flac"))
    assert rate == 24000 and _max_diff(audio, spoken(TEXT)) <= PCM_STEP


@pytest.mark.parametrize("fmt", ["mp3", "opus"])
def test_lossy_formats_decode_at_the_model_rate(sf, client, spoken, fmt):
    from dasllama.server.routers.audio import supported_formats
    if fmt not in supported_formats():
        pytest.skip(f"the installed libsndfile has no {fmt} encoder (the 400 for it is "
                    f"tested in test_unsupported_format_is_400)")
    # The random model's audio is mostly a constant offset (which Opus filters out), so a
    # lossy decode is checked for its rate and length, not its samples.
    audio, rate = _decode(sf, _speech(client, fmt))
    assert rate == 24000 and len(audio) == len(spoken(TEXT))
    assert np.std(audio) > 0


def test_openai_default_model_name_is_the_only_tts_model(server):
    body = {"input": TEXT, "voice": "default", "response_format": "pcm", "seed": SEED}
    ours = _post(server, dict(body, model="pocket"))
    theirs = _post(server, dict(body, model="tts-1"))
    assert ours.status_code == theirs.status_code == 200, theirs.text
    assert theirs.content == ours.content and len(ours.content) > 0


def test_default_format_is_mp3_as_openai(sf, server):
    r = _post(server, {"model": "pocket", "input": TEXT, "voice": "default", "seed": SEED})
    assert r.status_code == 200
    from dasllama.server.routers.audio import supported_formats
    want = "audio/mpeg" if "mp3" in supported_formats() else "audio/wav"
    assert r.headers["content-type"] == want
    assert r.headers["x-audio-sample-rate"] == "24000"


# =============================================================================================
# Streams
# =============================================================================================

def test_pcm_stream_concatenates_to_the_file(client):
    chunks = _stream(client, "pcm")
    whole = _speech(client, "pcm")
    assert len(chunks) >= 2, [len(c) for c in chunks]
    assert b"".join(chunks) == whole
    assert not np.array_equal(b"".join(_stream(client, "pcm", text=OTHER))[:len(whole)],
                              whole)


def test_wav_stream_decodes_to_the_same_audio(sf, client):
    streamed = b"".join(_stream(client, "wav"))
    whole = _speech(client, "wav")
    assert struct.unpack("<I", streamed[4:8])[0] == 0xFFFFFFFF       # length unknown
    assert struct.unpack("<I", streamed[40:44])[0] == 0xFFFFFFFF
    assert streamed[44:] == whole[44:]
    a, ra = _decode(sf, streamed)
    b, rb = _decode(sf, whole)
    assert ra == rb and np.array_equal(a, b)


def test_compressed_streams(sf, client):
    """Opus in Ogg streams the same packets (each Ogg stream has a serial number of its own,
    so the bytes differ; the decoded audio does not); flac differs only in STREAMINFO (its
    totals are unknown while streaming); mp3 only in its first frame (the gapless header's
    place)."""
    from dasllama.server.routers.audio import supported_formats
    formats = supported_formats()
    flac = b"".join(_stream(client, "flac"))
    whole = _speech(client, "flac")
    assert flac[:8] == whole[:8] and flac[42:] == whole[42:] and flac != whole
    if "opus" in formats:
        streamed, whole = b"".join(_stream(client, "opus")), _speech(client, "opus")
        assert len(streamed) == len(whole)
        a, b = _decode(sf, streamed)[0], _decode(sf, whole)[0]
        assert len(a) > 0 and np.array_equal(a, b)
    if "mp3" in formats:
        mp3, whole = b"".join(_stream(client, "mp3")), _speech(client, "mp3")
        assert len(mp3) == len(whole)
        differ = np.nonzero(np.frombuffer(mp3, np.uint8) != np.frombuffer(whole, np.uint8))[0]
        assert differ.size and differ.max() < 1024
        _, rate = sf.read(io.BytesIO(mp3), dtype="int16")
        assert rate == 24000


def test_sse_events(server, client, tts):
    import httpx
    body = {"model": "pocket", "input": TEXT, "voice": "default", "response_format": "pcm",
            "stream_format": "sse", "seed": SEED}
    events = []
    with httpx.stream("POST", server.url + "/v1/audio/speech", json=body, timeout=120) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2 and events[-1]["type"] == "speech.audio.done"
    assert len(deltas) == len(events) - 1
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert audio == _speech(client, "pcm")
    usage = events[-1]["usage"]
    n_tokens = sum(len(ids) for _, ids, _ in tts.plan(TEXT))
    assert usage["input_tokens"] == n_tokens
    assert usage["output_tokens"] == len(audio) // 2 // tts.config["frame_size"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


# =============================================================================================
# Bad requests, a busy model, a client that leaves
# =============================================================================================

@pytest.mark.parametrize("change, status, field, words", [
    ({"voice": "alloy"}, 400, "voice", ["'alloy'", "default", "tone"]),
    ({"voice": "/etc/hostname"}, 400, "voice", ["/etc/hostname"]),
    ({"voice": {"id": "nobody"}}, 400, "voice", ["'nobody'"]),
    ({"voice": 3}, 400, "voice", []),
    ({"speed": 2.0}, 400, "speed", ["speed"]),
    ({"speed": 9.0}, 400, "speed", []),
    ({"response_format": "aac"}, 400, "response_format", ["aac"]),
    ({"response_format": "ogg"}, 400, "response_format", []),
    ({"stream_format": "chunks"}, 400, "stream_format", []),
    ({"instructions": "whisper"}, 400, "instructions", []),
    ({"input": ""}, 400, "input", []),
    ({"input": "caf\u00e9"}, 400, "input", ["cannot encode"]),
    ({"input": "a" * 5000}, 400, "input", []),
    ({"temperature": -1.0}, 400, "temperature", []),
    ({"model": "tts-9"}, 404, "model", ["tts-9"]),
])
def test_bad_requests_are_named(server, change, status, field, words):
    body = {"model": "pocket", "input": TEXT, "voice": "default", "response_format": "pcm",
            "seed": SEED}
    body.update(change)
    r = _post(server, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == field, err
    for w in words:
        assert w in err["message"], err
    body = {"model": "pocket", "input": TEXT, "voice": "default", "response_format": "pcm"}
    assert _post(server, body).status_code == 200      # and the server keeps serving


def test_unsupported_format_is_400(server, monkeypatch):
    """A libsndfile without the MP3 encoder: mp3 is a 400 naming it, the default is wav."""
    from dasllama.server.routers import audio
    monkeypatch.setattr(audio, "supported_formats", lambda: ["wav", "pcm", "flac"])
    r = _post(server, {"model": "pocket", "input": TEXT, "voice": "default",
                       "response_format": "mp3"})
    assert r.status_code == 400 and "'mp3'" in r.json()["error"]["message"]
    r = _post(server, {"model": "pocket", "input": TEXT, "voice": "default"})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"


def _wait(condition, what: str) -> None:
    from test_server_support import wait_for
    wait_for(condition, what, timeout=FREE_WAIT_S, period=0.02)


def test_busy_model_is_503(server):
    """With the model busy (its lock held here) one request waits; with --max-queue 0 the
    next is a 503 with Retry-After; the waiting one is served once the model is free."""
    loaded = server.registry.get("pocket").loaded
    body = {"model": "pocket", "input": TEXT, "voice": "default", "response_format": "pcm",
            "seed": SEED}
    waiting = {}
    assert loaded.lock.acquire(timeout=FREE_WAIT_S)
    try:
        first = threading.Thread(target=lambda: waiting.update(r=_post(server, body)))
        first.start()
        _wait(lambda: loaded.waiting == 1, "the first request to wait for the model")
        busy = _post(server, body)
        assert busy.status_code == 503, busy.text
        assert busy.headers["retry-after"] == "1"
        assert busy.json()["error"]["code"] == "queue_full"
    finally:
        loaded.lock.release()
    first.join(120)
    assert waiting["r"].status_code == 200 and len(waiting["r"].content) > 0
    _wait(lambda: loaded.waiting == 0, "the model to be free")


def test_a_client_that_leaves_stops_the_synthesis(server, tts):
    import httpx
    text = " ".join([OTHER] * 40)
    n_chunks = len(tts.plan(text))
    loaded = server.registry.get("pocket").loaded
    body = {"model": "pocket", "input": text, "voice": "default", "response_format": "pcm",
            "stream_format": "audio", "seed": SEED}
    with httpx.Client(timeout=120) as c:
        with c.stream("POST", server.url + "/v1/audio/speech", json=body) as r:
            assert r.status_code == 200
            next(r.iter_bytes())            # the model is speaking; now leave
    _wait(lambda: loaded.waiting == 0 and not loaded.lock.locked(), "the model to be free")
    done = len(loaded.tts.stats["chunk_frames"])
    print(f"chunks spoken before the synthesis stopped: {done} of {n_chunks}")
    assert n_chunks >= 8 and done < n_chunks // 2
    r = _post(server, {"model": "pocket", "input": TEXT, "voice": "default",
                       "response_format": "pcm"})
    assert r.status_code == 200


def test_concurrent_requests_take_turns(client, spoken):
    """Requests that arrive together are spoken one after another, each right (with a queue
    of 0 some get 503; the others must be exact)."""
    results, errors = [], []

    def one(text):
        try:
            results.append((text, _speech(client, "pcm", text=text)))
        except Exception as e:
            errors.append(e)

    workers = [threading.Thread(target=one, args=(t,)) for t in (TEXT, OTHER, TEXT)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not any(w.is_alive() for w in workers)
    assert results, errors
    assert all(getattr(e, "status_code", None) == 503 for e in errors), errors
    for text, raw in results:
        assert _max_diff(np.frombuffer(raw, "<i2") / 32767, spoken(text)) <= PCM_STEP
