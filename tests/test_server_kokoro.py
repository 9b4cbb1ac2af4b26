"""POST /v1/audio/speech with the real Kokoro model (dasllama pull kokoro) on a live server
(loopback, a free port): the audio equals dasllama.TTS's on the same text, voice and speed;
packs, blends and speed reach the chain; what Kokoro cannot honour is a 400 that says so."""

from __future__ import annotations

import io

import numpy as np
import pytest
from requires import require

TEXT = "Hello world."
PCM_STEP = 1.0 / 32767 + 1e-6     # one 16-bit step plus float32's rounding of the product


@pytest.fixture(scope="module")
def kokoro(real_model):
    require("phonemizer")
    real_model("kokoro")
    from dasllama.kokoro import resolve_model

    return resolve_model("kokoro")


@pytest.fixture(scope="module")
def tts(kokoro):
    from dasllama import TTS

    with TTS(kokoro, n_threads=2) as t:
        yield t


@pytest.fixture(scope="module")
def server(kokoro):
    from test_server_support import serve, spec

    with serve([spec("kokoro", kokoro, kind="tts", voices={"mix": "jf_alpha(3)+jm_kumo(1)"})],
               threads=2, request_timeout=300) as srv:
        yield srv


def _post(server, body):
    import httpx

    return httpx.post(server.url + "/v1/audio/speech", json=body, timeout=300)


def _wav(sf, data: bytes) -> np.ndarray:
    audio, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert rate == 24000
    return audio.astype(np.float64) / 32767


def test_tts_opens_kokoro(tts):
    from dasllama.kokoro import KokoroTTS

    assert isinstance(tts, KokoroTTS) and tts.sample_rate == 24000
    assert "jf_alpha" in tts.voices


def test_speech_equals_tts(server, tts):
    sf = require("soundfile")
    cases = [("jf_alpha", 1.0), ("jf_alpha(2)+jf_nezumi(1)", 1.0), ("jf_alpha", 1.5)]
    heard = []
    for voice, speed in cases:
        r = _post(server, {"model": "kokoro", "input": TEXT, "voice": voice,
                           "response_format": "wav", "speed": speed})
        assert r.status_code == 200, r.text
        got = _wav(sf, r.content)
        want = tts.speak(TEXT, voice=voice, speed=speed)[0]
        assert len(got) == len(want)
        assert float(np.abs(got - want).max()) <= PCM_STEP
        heard.append(got)
    # controls: the blend and the speed change the audio (a faster speech is shorter)
    assert len(heard[0]) != len(heard[1]) or np.abs(heard[0] - heard[1]).max() > 0.01
    assert len(heard[2]) < len(heard[0])


def test_default_and_registered_voices(server, tts):
    sf = require("soundfile")
    r = _post(server, {"model": "kokoro", "input": TEXT, "voice": "default",
                       "response_format": "wav"})
    assert r.status_code == 200
    np.testing.assert_allclose(_wav(sf, r.content), tts.speak(TEXT, voice=tts.voices[0])[0],
                               atol=PCM_STEP)
    r = _post(server, {"model": "kokoro", "input": TEXT, "voice": "mix",
                       "response_format": "wav"})
    assert r.status_code == 200
    np.testing.assert_allclose(_wav(sf, r.content),
                               tts.speak(TEXT, voice="jf_alpha(3)+jm_kumo(1)")[0], atol=PCM_STEP)


@pytest.mark.parametrize("extra, param, says", [
    ({"voice": "nobody"}, "voice", "unknown voice 'nobody'"),
    ({"voice": "jf_alpha(0)"}, "voice", "weights must be positive"),
    ({"temperature": 0.5}, "temperature", "temperature is not supported by Kokoro"),
    ({"seed": 3}, "seed", "seed is not supported by Kokoro"),
    ({"instructions": "cheerful"}, "instructions", "instructions are not supported"),
    ({"input": "\u2014 \u2026"}, "input", "no characters the model can speak"),
])
def test_what_kokoro_cannot_honour_is_a_400(server, extra, param, says):
    body = {"model": "kokoro", "input": TEXT, "voice": "jf_alpha", **extra}
    r = _post(server, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and says in err["message"], err
    # and the server keeps serving
    assert _post(server, {"model": "kokoro", "input": "Hi.", "voice": "jf_alpha",
                          "response_format": "pcm"}).status_code == 200
