"""POST /v1/audio/transcriptions and /v1/audio/translations on a live server (loopback, a free
port) with the packaged whisper-tiny.en, through the openai client and raw httpx, on the
fixture clips of tests/fixtures/asr.

Expected results come from dasllama.ASR.transcribe on the same file in this process (the
server's text is the segments' texts joined and stripped, its subtitles the transcribe CLI's
writer over those segments); the clips' transcripts differ from one another, so a response for
the wrong file or a cached one fails (the negative control). Bad requests (malformed
multipart, a corrupt, empty or oversized file, options the model cannot run) get a 4xx in the
OpenAI error shape, and the server answers a good request after each.
"""

from __future__ import annotations

import collections
import io
import json
import threading
import warnings
from pathlib import Path

import pytest
from requires import require

from dasllama.whisper_languages import language_name

pytestmark = pytest.mark.timeout(300)

FIXTURES = Path(__file__).parent / "fixtures" / "asr"
CLIPS = ("us_plain", "gb_fast", "long_silences")
MODEL = "whisper-tiny.en"
THREADS = 2
# The server's upload limit: every clip but over_30s.flac (619 KB) fits under it.
MAX_UPLOAD = 400_000
UPLOADS = ("/v1/audio/transcriptions", "/v1/audio/translations")


def _clip(name: str) -> Path:
    return FIXTURES / f"{name}.flac"


# =============================================================================================
# Fixtures
# =============================================================================================

@pytest.fixture(scope="module")
def model_dir(real_model):
    require("soundfile")
    require("soxr")
    return str(real_model(MODEL))


@pytest.fixture(scope="module")
def local_asr(model_dir):
    """The same model in this process, for the expected results."""
    from dasllama.asr import ASR

    with ASR(model_dir, n_threads=THREADS) as asr:
        yield asr


@pytest.fixture(scope="module")
def expected(local_asr):
    """expected(clip) -> (segments, info) of ASR.transcribe on the clip's file (cached)."""
    cache = {}

    def get(name):
        if name not in cache:
            segments, info = local_asr.transcribe(str(_clip(name)))
            cache[name] = (list(segments), info)
        return cache[name]
    return get


@pytest.fixture(scope="module")
def server(model_dir):
    from test_server_support import serve, spec

    # max_queue 0: a request that finds the model busy is a 503 (test_a_busy_model_is_503).
    with serve([spec(MODEL, model_dir, kind="asr")], threads=THREADS, max_queue=0,
               max_upload_bytes=MAX_UPLOAD, request_timeout=120) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    from test_server_support import client as openai_client

    with openai_client(server) as c:
        yield c


def _text(segments) -> str:
    return "".join(s.text for s in segments).strip()


def _post(server, path="/v1/audio/transcriptions", clip="gb_fast", data=None, files=None,
          **kwargs):
    import httpx

    if files is None:
        files = {"file": (f"{clip}.flac", _clip(clip).read_bytes(), "audio/flac")}
    return httpx.post(server.url + path, data=data or {}, files=files, timeout=120, **kwargs)


def _still_serves(server, expected):
    """A good request after a bad one is answered as before."""
    r = _post(server, clip="gb_fast")
    assert r.status_code == 200, r.text
    assert r.json()["text"] == _text(expected("gb_fast")[0])


# =============================================================================================
# Results equal ASR.transcribe
# =============================================================================================

def test_the_clips_transcripts_differ(expected):
    """The control the equality tests rest on: each clip has its own, non-empty text."""
    texts = [_text(expected(c)[0]) for c in CLIPS]
    assert all(texts) and len(set(texts)) == len(texts), texts


@pytest.mark.parametrize("clip", CLIPS)
def test_json_text_equals_asr_transcribe(client, expected, clip):
    with open(_clip(clip), "rb") as f:
        r = client.audio.transcriptions.create(model=MODEL, file=f)
    segments, info = expected(clip)
    assert r.text == _text(segments)
    others = [_text(expected(c)[0]) for c in CLIPS if c != clip]
    assert r.text not in others
    assert r.usage is not None and r.usage.type == "duration"
    assert r.usage.seconds == pytest.approx(info.duration)


def test_raw_httpx_json_and_default_model(server, expected):
    """No model field: the server's only ASR model serves."""
    r = _post(server, clip="us_plain")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert r.json()["text"] == _text(expected("us_plain")[0])


def test_text_srt_and_vtt(client, expected):
    from dasllama.transcribe_cli import write_transcript

    segments, info = expected("gb_fast")
    assert len(segments) >= 2    # cues to number and time
    for fmt in ("text", "srt", "vtt"):
        with open(_clip("gb_fast"), "rb") as f:
            got = client.audio.transcriptions.create(model=MODEL, file=f, response_format=fmt)
        if fmt == "text":
            assert got == _text(segments) + "\n"
            continue
        out = io.StringIO()
        write_transcript(segments, info, fmt, out)
        assert got == out.getvalue()
        assert got.count(" --> ") == len(segments)


def test_verbose_json_has_the_segments(client, expected):
    segments, info = expected("long_silences")
    with open(_clip("long_silences"), "rb") as f:
        r = client.audio.transcriptions.create(model=MODEL, file=f,
                                               response_format="verbose_json",
                                               timestamp_granularities=["segment"])
    assert r.text == _text(segments) and r.language == language_name(info.language) == "english"
    assert r.duration == pytest.approx(info.duration)
    assert [s.id for s in r.segments] == list(range(len(segments)))
    for got, want in zip(r.segments, segments):
        assert (got.start, got.end, got.text, got.tokens, got.seek) == \
            (want.start, want.end, want.text, want.tokens, want.seek)
        assert got.avg_logprob == pytest.approx(want.avg_logprob)
        assert got.no_speech_prob == pytest.approx(want.no_speech_prob)
    assert len(r.segments) == len(segments) >= 2


def test_prompt_reaches_the_model(server, local_asr, expected):
    """prompt is ASR.transcribe's initial_prompt: the response equals transcribe with it, and
    differs from the response without it (on this clip, this prompt changes the words)."""
    prompt = "QUICK BROWN FOX"
    segments, _ = local_asr.transcribe(str(_clip("us_plain")), initial_prompt=prompt)
    want = _text(segments)
    assert want != _text(expected("us_plain")[0])     # the control: the prompt matters here
    r = _post(server, clip="us_plain", data={"prompt": prompt})
    assert r.status_code == 200, r.text
    assert r.json()["text"] == want


def test_stream_deltas_join_to_the_text(client, expected):
    with open(_clip("gb_fast"), "rb") as f:
        stream = client.audio.transcriptions.create(model=MODEL, file=f, stream=True)
        events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[-1] == "transcript.text.done" and set(kinds[:-1]) == {"transcript.text.delta"}
    assert len(kinds) - 1 == len(expected("gb_fast")[0])    # a delta per segment
    joined = "".join(e.delta for e in events[:-1])
    assert joined == events[-1].text == _text(expected("gb_fast")[0])


# =============================================================================================
# Options the model cannot run, and bad fields
# =============================================================================================

@pytest.mark.parametrize("data, param", [
    ({"language": "fr"}, "language"),          # English-only model
    ({"timestamp_granularities[]": "segment"}, "timestamp_granularities[]"),   # json format
    ({"stream": "true", "response_format": "srt"}, "stream"),
    ({"include[]": "logprobs"}, "include[]"),
    ({"temperature": "1.5"}, "temperature"),
    ({"temperature": "warm"}, "temperature"),
    ({"response_format": "xml"}, "response_format"),
    ({"stream": "maybe"}, "stream"),
])
def test_unsupported_options_are_400s(server, expected, data, param):
    from test_server_support import assert_error_shape

    err = assert_error_shape(_post(server, data=data), 400, param_contains=param)
    assert err["type"] == "invalid_request_error"
    _still_serves(server, expected)


def _accepts(local_asr, **options):
    """(segments, None) when this ASR runs the options on gb_fast, else (None, its ASRError):
    what the server must answer follows from what the library does."""
    from dasllama.asr import ASRError

    try:
        segments, _ = local_asr.transcribe(str(_clip("gb_fast")), **options)
        return list(segments), None
    except ASRError as e:
        return None, e


def test_word_granularity_follows_the_asr(server, local_asr, expected):
    """Words when ASR.transcribe gives word timestamps (equal to its words), else the ASR's
    refusal as a 400 on timestamp_granularities[]."""
    from test_server_support import assert_error_shape

    segments, refused = _accepts(local_asr, word_timestamps=True)
    r = _post(server, data={"response_format": "verbose_json",
                            "timestamp_granularities[]": ["word", "segment"]})
    if refused is not None:
        err = assert_error_shape(r, 400, param_contains="timestamp_granularities[]")
        assert err["message"] == str(refused)
        _still_serves(server, expected)
        return
    assert r.status_code == 200, r.text
    want = [(w.word, w.start, w.end) for s in segments for w in (s.words or [])]
    assert want, "word timestamps on speech gave no words"
    assert [(w["word"], w["start"], w["end"]) for w in r.json()["words"]] == want


def test_a_sampling_temperature_follows_the_asr(server, local_asr, expected):
    """temperature 0.4: a transcript when the ASR samples, else its refusal as a 400 naming
    temperature."""
    from test_server_support import assert_error_shape

    _, refused = _accepts(local_asr, temperature=0.4)
    r = _post(server, data={"temperature": "0.4"})
    if refused is not None:
        err = assert_error_shape(r, 400, param_contains="temperature")
        assert err["message"] == str(refused)
    else:
        assert r.status_code == 200 and r.json()["text"], r.text
    _still_serves(server, expected)


def test_chunking_strategy_is_the_vad_filter(server, local_asr, expected):
    """chunking_strategy (any value: "auto" or OpenAI's server_vad object) is
    ASR.transcribe's vad_filter: the text equals transcribe with it, or the ASR's refusal is
    the 400 naming chunking_strategy."""
    from test_server_support import assert_error_shape

    segments, refused = _accepts(local_asr, vad_filter=True)
    r = _post(server, data={"chunking_strategy": "auto"})
    if refused is not None:
        err = assert_error_shape(r, 400, param_contains="chunking_strategy")
        assert err["message"] == str(refused)
    else:
        assert r.status_code == 200, r.text
        assert r.json()["text"] == _text(segments)
    _still_serves(server, expected)


def test_translation_on_an_english_only_model_is_400(client, server, expected):
    openai = require("openai")
    with open(_clip("gb_fast"), "rb") as f, pytest.raises(openai.BadRequestError) as e, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # the client marks the route so
        client.audio.translations.create(model=MODEL, file=f)
    assert e.value.body["param"] == "model" and "translate" in e.value.body["message"]
    from test_server_support import assert_error_shape
    assert_error_shape(_post(server, path="/v1/audio/translations", data={"language": "en"}),
                       400, param_contains="language")
    _still_serves(server, expected)


def test_unknown_or_wrong_model(server, expected):
    from test_server_support import assert_error_shape

    err = assert_error_shape(_post(server, data={"model": "whisper-9"}), 404,
                             param_contains="model")
    assert MODEL in err["message"]
    _still_serves(server, expected)


# =============================================================================================
# Malformed bodies and bad files
# =============================================================================================

def _raw(server, body: bytes, content_type: str):
    import httpx
    return httpx.post(server.url + "/v1/audio/transcriptions", content=body,
                      headers={"content-type": content_type}, timeout=60)


@pytest.mark.parametrize("body, content_type, status, code", [
    (b'{"file": "x"}', "application/json", 415, "unsupported_media_type"),
    (b"file=abc", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    (b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.flac\"\r\n\r\nab",
     "multipart/form-data", 400, "invalid_multipart"),           # no boundary parameter
    (b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.flac\"\r\n\r\nab",
     "multipart/form-data; boundary=b", 400, "missing_file"),   # never closed: no whole part
    (b"\x00\x01garbage without any boundary", "multipart/form-data; boundary=b", 400, None),
    (b"--b--\r\n", "multipart/form-data; boundary=b", 400, "missing_file"),
    (b"--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nnot a file\r\n--b--\r\n",
     "multipart/form-data; boundary=b", 400, "invalid_value"),   # file as a text field
])
def test_malformed_multipart(server, expected, body, content_type, status, code):
    from test_server_support import assert_error_shape

    err = assert_error_shape(_raw(server, body, content_type), status)
    if code is not None:
        assert err["code"] == code, err
    _still_serves(server, expected)


@pytest.mark.parametrize("content", [
    b"this is not audio at all, just some text" * 20,
    bytes(range(256)) * 40,
    b"fLaC" + b"\x00" * 2000,                     # a FLAC signature and nothing valid after it
    b"RIFF\xff\xff\xff\xffWAVEfmt " + b"\x01" * 64,   # a broken wav header
])
def test_a_corrupt_file_is_400_on_file(server, expected, content):
    from test_server_support import assert_error_shape

    err = assert_error_shape(_post(server, files={"file": ("talk.flac", content)}), 400,
                             param_contains="file")
    assert err["code"] == "invalid_audio" and "talk.flac" in err["message"]
    _still_serves(server, expected)


def test_an_empty_file_is_400(server, expected):
    from test_server_support import assert_error_shape

    err = assert_error_shape(_post(server, files={"file": ("empty.wav", b"")}), 400,
                             param_contains="file")
    assert "empty" in err["message"]
    _still_serves(server, expected)


def test_silence_gives_an_empty_transcript(server):
    sf = require("soundfile")
    import numpy as np

    buf = io.BytesIO()
    sf.write(buf, np.zeros(16000 * 2, np.float32), 16000, format="WAV", subtype="PCM_16")
    r = _post(server, files={"file": ("silence.wav", buf.getvalue())},
              data={"response_format": "verbose_json"})
    assert r.status_code == 200, r.text
    assert r.json()["text"] == "" and r.json()["segments"] == []
    assert r.json()["duration"] == pytest.approx(2.0)


def test_an_upload_over_the_limit_is_413(server, expected):
    from test_server_support import assert_error_shape

    assert _clip("over_30s").stat().st_size > MAX_UPLOAD
    err = assert_error_shape(_post(server, clip="over_30s"), 413)
    assert str(MAX_UPLOAD) in err["message"]
    _still_serves(server, expected)


# =============================================================================================
# One at a time; metrics
# =============================================================================================

def test_a_busy_model_is_503_and_metrics_count(server, expected):
    from test_server_support import metric, wait_for

    before = _transcriptions(server, "ok")
    first = {}

    def long_request():
        first["response"] = _post(server, clip="long_silences")

    thread = threading.Thread(target=long_request)
    thread.start()
    try:
        wait_for(lambda: metric(server.url, "serial_requests_active", MODEL) >= 1,
                 "the first request to hold the model")
        busy = _post(server, clip="gb_fast")
    finally:
        thread.join(120)
    assert busy.status_code == 503, busy.text
    assert busy.headers.get("retry-after") == "1" and busy.json()["error"]["code"] == "queue_full"
    assert first["response"].status_code == 200
    assert first["response"].json()["text"] == _text(expected("long_silences")[0])
    assert _transcriptions(server, "ok") == before + 1
    wait_for(lambda: metric(server.url, "serial_requests_active", MODEL) == 0,
             "the model to be free")
    _still_serves(server, expected)


def _transcriptions(server, outcome: str) -> float:
    """dasllama_transcription_requests_total for the model and outcome, over both tasks."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(httpx.get(server.url + "/metrics").text):
        for s in family.samples:
            if s.name == "dasllama_transcription_requests_total" and \
                    s.labels.get("model") == MODEL and s.labels.get("outcome") == outcome:
                total += s.value
    return total


def test_a_client_that_leaves_frees_the_model(server, expected):
    """A client that goes away mid-transcription: its work stops (the model is free long
    before the clip would have been decoded again), it counts as cancelled, and the next
    request is served."""
    import socket

    from test_server_support import metric, wait_for

    cancelled = _transcriptions(server, "cancelled")
    sf = require("soundfile")
    from dasllama import audio
    samples = audio.load(str(_clip("over_30s")), 8000)     # 35 s at 8 kHz: two windows
    buf = io.BytesIO()
    sf.write(buf, samples, 8000, format="FLAC", subtype="PCM_16")
    data = buf.getvalue()
    assert len(data) < MAX_UPLOAD - 4096
    boundary = "leaves"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"long.flac\"\r\nContent-Type: audio/flac\r\n\r\n").encode() + data + \
        f"\r\n--{boundary}--\r\n".encode()
    head = (f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {server.host}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection((server.host, server.port), timeout=30) as sock:
        sock.sendall(head + body)
        wait_for(lambda: metric(server.url, "serial_requests_active", MODEL) >= 1,
                 "the request to hold the model")
    wait_for(lambda: metric(server.url, "serial_requests_active", MODEL) == 0,
             "the model to be freed after the client left")
    wait_for(lambda: _transcriptions(server, "cancelled") == cancelled + 1,
             "the request to count as cancelled")
    _still_serves(server, expected)


def test_metrics_count_audio_seconds_and_rejections(server, expected):
    from test_server_support import metrics

    def audio_seconds():
        return metrics(server.url).get(("dasllama_transcription_audio_seconds_total", MODEL), 0)

    seconds, rejected = audio_seconds(), _transcriptions(server, "rejected")
    assert _post(server, clip="us_plain").status_code == 200
    assert audio_seconds() == pytest.approx(seconds + expected("us_plain")[1].duration)
    assert _post(server, data={"language": "fr"}).status_code == 400   # English-only
    assert _transcriptions(server, "rejected") == rejected + 1


# =============================================================================================
# The command line
# =============================================================================================

def test_serve_asr_flag(model_dir, tmp_path):
    import argparse

    from dasllama.server.cli import DEFAULT_ASR_MODEL, add_serve_parser, config_from_args

    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers(dest="command"))

    def config(*argv):
        return config_from_args(parser.parse_args(["serve", *argv]))

    alone = config("--asr")
    assert [(m.name, m.source, m.kind) for m in alone.models] == \
        [(DEFAULT_ASR_MODEL, DEFAULT_ASR_MODEL, "asr")]      # no language model with --asr only
    named = config("--asr", f"en={model_dir}", "--asr", "--max-upload", "1000")
    assert [(m.name, m.kind) for m in named.models] == [("en", "asr"), (DEFAULT_ASR_MODEL, "asr")]
    assert named.max_upload_bytes == 1000
    folder = config("--asr", model_dir).models[0]
    assert folder.name == Path(model_dir).name and folder.source == model_dir
    with pytest.raises(ValueError, match="no-such-model"):
        config("--asr", str(tmp_path / "no-such-model"))


def test_the_routes_need_an_asr_model(tmp_path):
    """A server without ASR models answers the routes with a 404 naming the kind."""
    from test_server_support import assert_error_shape, random_model, serve, spec

    with serve([spec("llm", random_model(tmp_path))]) as srv:
        for path in ("/v1/audio/transcriptions", "/v1/audio/translations"):
            err = assert_error_shape(_post(srv, path=path), 404, param_contains="model")
            assert "asr" in err["message"]
        assert _post(srv, data={"model": "llm"}).status_code == 400    # an llm, not an asr


def test_json_bodies_are_not_parsed_as_forms(server):
    """A JSON body naming a file path is refused: no route reads files a request names."""
    r = _raw(server, json.dumps({"file": str(_clip("gb_fast"))}).encode(), "application/json")
    assert r.status_code == 415


# =============================================================================================
# Fuzz: generated forms and bodies never get a 5xx
# =============================================================================================

FUZZ_EXAMPLES = 300
_FIELDS = ("model", "language", "prompt", "temperature", "response_format",
           "timestamp_granularities[]", "stream", "include[]", "chunking_strategy", "file",
           "unknown")


def test_generated_forms_get_4xx_not_5xx(server, expected):
    """Forms of arbitrary fields and values, with or without a file of arbitrary bytes (now and
    then a real clip's head or a valid clip), and raw bodies under a multipart content type:
    every answer is below 500 in the OpenAI shape, and the server serves afterwards."""
    require("hypothesis")
    import httpx
    from hypothesis import HealthCheck, given, settings, strategies as st

    clip = _clip("gb_fast").read_bytes()
    text = st.one_of(st.sampled_from(["", "json", "text", "srt", "vtt", "verbose_json", "en",
                                      "fr", "0", "0.0", "1", "-1", "true", "false", "word",
                                      "segment", MODEL, "whisper-1", "auto", "logprobs"]),
                     st.text(max_size=40))
    files = st.one_of(st.none(), st.binary(max_size=2048), st.just(clip[:300]),
                      st.just(clip), st.just(clip[:len(clip) // 2]))
    form = st.lists(st.tuples(st.sampled_from(_FIELDS), text), max_size=8)
    raw = st.binary(max_size=512)
    statuses = collections.Counter()

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(fields=form, upload=files, body=raw, use_raw=st.booleans(),
           path=st.sampled_from(UPLOADS))
    def one(fields, upload, body, use_raw, path):
        url = server.url + path
        if use_raw:
            r = httpx.post(url, content=body, timeout=120, headers={
                "content-type": "multipart/form-data; boundary=fuzz"})
        else:
            data = {}
            for key, value in fields:
                data.setdefault(key, []).append(value)
            r = httpx.post(url, data=data, timeout=120,
                           files=None if upload is None else {"file": ("f.bin", upload)})
        statuses[r.status_code] += 1
        assert r.status_code < 500 or (r.status_code == 503 and r.headers.get("retry-after")), \
            (r.status_code, r.text[:300])
        if r.status_code >= 400:
            err = r.json()["error"]
            assert set(err) == {"message", "type", "param", "code"} and err["message"]

    one()
    print(f"statuses of {FUZZ_EXAMPLES} generated requests: {dict(statuses)}")
    assert sum(statuses.values()) >= FUZZ_EXAMPLES
    _still_serves(server, expected)


def test_without_python_multipart_the_routes_say_so(server, monkeypatch):
    """Where python-multipart is missing, the routes answer 501 naming it (not a 400 that
    blames the body), and `dasllama serve --asr` refuses to start."""
    import importlib.util

    from dasllama import cli
    from test_server_support import assert_error_shape

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("python_multipart", "multipart")
                        else real(name, *a))
    err = assert_error_shape(_post(server), 501)
    assert "python-multipart" in err["message"]
    # (were the check missing, this would serve until the test's timeout)
    assert cli.main(["serve", "--asr", "--port", "0"]) == 1
    monkeypatch.undo()
    assert _post(server).status_code == 200     # the control: with the package, it serves


# =============================================================================================
# A multilingual model: languages and translation
# =============================================================================================

MULTILINGUAL = "whisper-base"


@pytest.fixture(scope="module")
def multilingual(real_model):
    """(server, in-process ASR) of the packaged multilingual whisper-base, next to tiny.en:
    two ASR models in one server, routed by the model field."""
    from dasllama.asr import ASR
    from test_server_support import serve, spec

    folder = str(real_model(MULTILINGUAL))
    tiny = str(real_model(MODEL))
    with ASR(folder, n_threads=THREADS) as asr, \
            serve([spec(MULTILINGUAL, folder, kind="asr"), spec(MODEL, tiny, kind="asr")],
                  threads=THREADS, request_timeout=120) as srv:
        yield srv, asr


def test_translation_and_language_on_a_multilingual_model(multilingual):
    openai = require("openai")
    from test_server_support import client as openai_client

    srv, asr = multilingual
    segments, _ = asr.transcribe(str(_clip("de_plain")), task="translate")
    translated = _text(segments)
    segments, info = asr.transcribe(str(_clip("de_plain")), language="de")
    german = _text(segments)
    assert translated and german and translated != german    # the control: two tasks differ
    with openai_client(srv) as c:
        with open(_clip("de_plain"), "rb") as f:
            r = c.audio.transcriptions.create(model=MULTILINGUAL, file=f, language="de",
                                              response_format="verbose_json")
        assert r.text == german and info.language == "de" and r.language == "german"
        with open(_clip("de_plain"), "rb") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            t = c.audio.translations.create(model=MULTILINGUAL, file=f)
        assert t.text == translated
        with open(_clip("de_plain"), "rb") as f, pytest.raises(openai.BadRequestError), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            c.audio.translations.create(model=MODEL, file=f)   # the English-only one refuses
    # With two ASR models, OpenAI's default name picks neither: the request must name one.
    r = _post(srv, data={"model": "whisper-1"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "model_required", r.text
    r = _post(srv, data={})        # two ASR models: the model field is required
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"


def test_openai_default_model_name_is_the_only_asr_model(server, expected):
    """Clients that send OpenAI's whisper-1 (its SDK's examples, Open WebUI) reach this server's
    one ASR model; a name that is neither is still a 404."""
    r = _post(server, data={"model": "whisper-1"})
    assert r.status_code == 200, r.text
    assert r.json()["text"] == _text(expected("gb_fast")[0])
    r = _post(server, data={"model": "whisper-2"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"
