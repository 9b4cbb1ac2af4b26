"""POST /v1/audio/speech: text to speech with the server's speech models (Pocket TTS, Kokoro).

The body is OpenAI's: model, input, voice, response_format (wav, pcm, flac, mp3, opus),
speed, stream_format. Two fields are this server's own: temperature (the noise scale, 0 is
deterministic; default 0.3) and seed (the noise generator's seed; default: a fresh one), so a
client can ask for reproducible audio.

- voice: "default" (the model's own voice: Pocket's without a voice prompt, Kokoro's first
  pack) or a voice registered when the model loaded (ModelSpec.voices, ``dasllama serve
  --voice NAME=FILE``); for Kokoro also any of its packs and blends such as "a(2)+b(1)". A
  voice object ``{"id": NAME}`` names one the same way. Anything else is a 400 listing the
  voices. A voice is never read from a path the request names. What each model honours is in
  server/speech_engines.py.
- response_format: pcm is raw 16-bit little-endian mono at the model's rate (24 kHz for
  Pocket; also in the ``x-audio-sample-rate`` header); wav is that in a RIFF header; flac,
  mp3 and opus (in Ogg) are encoded by libsndfile through soundfile when the installed
  libsndfile has the encoder, else a 400 naming the format. Unset: mp3 as OpenAI does, wav
  where libsndfile has no MP3 encoder. aac is a 400 (libsndfile has no AAC encoder).
- speed: Kokoro's speed in [0.25, 4]; Pocket TTS has no speed control (1.0 only; other values
  are a 400). temperature and seed are Pocket's; Kokoro answers a request that sets them with
  a 400.
- stream_format unset: the whole file in one response (exact sizes in its header). "audio":
  the file's bytes as the audio is synthesized (the first 80 ms come after one frame).
  A container whose totals are only known at the end carries "unknown" there: wav sizes are
  0xFFFFFFFF, flac's total sample count is 0, mp3 starts with a blank frame where the
  gapless-playback header would go; the audio bytes are the same as unstreamed, and pcm and
  opus streams are byte for byte the unstreamed file. "sse": server-sent events
  ``{"type": "speech.audio.delta", "audio": BASE64}`` carrying the same bytes, then
  ``{"type": "speech.audio.done", "usage": {"input_tokens", "output_tokens",
  "total_tokens"}}`` (text tokens in, audio frames out), as OpenAI's API sends them.

A TTS object runs one synthesis at a time: each request's synthesis runs on a thread of its
own that holds the model's lock (LoadedTTS.lock) while it works, so the event loop is never
blocked; requests waiting for the model count against --max-queue (over it: 503 with
Retry-After). A client that goes away stops its synthesis at the next piece.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import json
import logging
import struct
from typing import AsyncIterator, List, Literal, Optional, Tuple

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from ..bridge import WatchedStreamingResponse, sse, watch_disconnect
from ..errors import APIError
from ..generation import SSE_HEADERS, EventStreamResponse
from ..schemas import _Strict, one_of
from ..serial_job import SerialJob
from ..speech_engines import DEFAULT_VOICE
from .common import config_of, registry_of

__all__ = ["router", "SpeechRequest", "AudioEncoder", "DEFAULT_VOICE", "supported_formats"]

log = logging.getLogger("dasllama.server")

router = APIRouter()

MAX_INPUT_CHARS = 4096           # OpenAI's limit on one request's text
DEFAULT_TEMPERATURE = 0.3        # dasllama.TTS's default noise scale
MAX_TEMPERATURE = 2.0            # past this the noise swamps the flow head's output
RESPONSE_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac",
               "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm"}
# response_format -> (libsndfile major format, subtype) for the formats soundfile encodes.
SOUNDFILE_FORMATS = {"flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III"),
                     "opus": ("OGG", "OPUS")}
# Sample rates the Opus encoder takes (libsndfile does not resample).
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
# The RIFF and data sizes of a streamed wav, whose length is unknown when its header is sent.
WAV_UNKNOWN_SIZE = 0xFFFFFFFF


# --------------------------------------------------------------------------------------------
# The request
# --------------------------------------------------------------------------------------------
class VoiceRef(_Strict):
    id: str


class SpeechRequest(_Strict):
    """POST /v1/audio/speech (see the module docstring)."""
    model: Optional[str] = None
    input: str = Field(min_length=1, max_length=MAX_INPUT_CHARS)
    voice: one_of("voice must be a voice name or {'id': name}",
                  lambda v: "name" if isinstance(v, str) else
                  "ref" if isinstance(v, dict) else None, name=str, ref=VoiceRef)
    instructions: Optional[str] = None
    response_format: Optional[Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]] = None
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Optional[Literal["audio", "sse"]] = None
    temperature: float = Field(DEFAULT_TEMPERATURE, ge=0.0, le=MAX_TEMPERATURE)
    seed: Optional[int] = Field(None, ge=0, le=2 ** 63 - 1)

    def voice_name(self) -> str:
        return self.voice if isinstance(self.voice, str) else self.voice.id


def _soundfile():
    try:
        import soundfile
    except (ImportError, OSError):    # OSError: the package is there, libsndfile is not
        return None
    return soundfile


@functools.lru_cache(maxsize=None)
def supported_formats() -> Tuple[str, ...]:
    """The response formats this install can encode: wav and pcm always; flac, mp3 and opus
    when soundfile's libsndfile has their encoders. Found once: the library does not change
    while the server runs, and every request asks."""
    out = ["wav", "pcm"]
    sf = _soundfile()
    if sf is not None:
        majors = sf.available_formats()
        for name, (major, subtype) in SOUNDFILE_FORMATS.items():
            if major in majors and subtype in sf.available_subtypes(major):
                out.append(name)
    return tuple(out)


def _response_format(body: SpeechRequest) -> str:
    formats = supported_formats()
    fmt = body.response_format or ("mp3" if "mp3" in formats else "wav")
    if fmt not in formats:
        sf = _soundfile()
        why = ("libsndfile has no AAC encoder" if fmt == "aac" else
               "the soundfile package (libsndfile) is not installed" if sf is None else
               f"the installed libsndfile ({sf.__libsndfile_version__}) has no "
               f"{SOUNDFILE_FORMATS[fmt][1]} encoder")
        raise APIError(400, f"response_format {fmt!r} is not supported by this server: {why}; "
                            f"it serves {', '.join(formats)}", param="response_format",
                       code="unsupported_format")
    return fmt


def _check_rate(fmt: str, sample_rate: int) -> None:
    if fmt == "opus" and sample_rate not in OPUS_RATES:
        raise APIError(400, f"response_format 'opus' needs a sample rate of "
                            f"{', '.join(map(str, OPUS_RATES))} Hz; this model speaks at "
                            f"{sample_rate} Hz", param="response_format",
                       code="unsupported_format")


def _count(engine, text: str) -> int:
    """The text's token count; 400 for text the model cannot speak."""
    from ...errors import TTSInputError
    try:
        return engine.count(text)
    except TTSInputError as e:
        raise APIError(400, f"input: {e}", param="input", code="invalid_value") from e


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------
def pcm16(audio: np.ndarray) -> np.ndarray:
    """Float audio in [-1, 1] (clipped) as 16-bit little-endian samples, rounded as
    dasllama.TTS.save_wav writes them."""
    a = np.clip(np.asarray(audio, dtype=np.float64).reshape(-1), -1.0, 1.0)
    return np.round(a * 32767.0).astype("<i2")


def wav_header(sample_rate: int, data_bytes: Optional[int]) -> bytes:
    """The 44-byte header of a 16-bit mono PCM wav with data_bytes of samples (None: a
    stream of unknown length)."""
    data = WAV_UNKNOWN_SIZE if data_bytes is None else data_bytes
    riff = WAV_UNKNOWN_SIZE if data_bytes is None else 36 + data_bytes
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVE" + b"fmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, 2 * sample_rate, 2, 16)
            + b"data" + struct.pack("<I", data))


class AudioEncoder:
    """16-bit mono pieces in, one response format's bytes out. streaming: add() returns the
    bytes each piece makes available (see the module docstring for what a streamed header
    holds); otherwise add() keeps everything and finish() returns the whole file. Either
    way, the bytes of every add() and finish() concatenated are the response."""

    def __init__(self, fmt: str, sample_rate: int, streaming: bool):
        self.fmt = fmt
        self.sample_rate = int(sample_rate)
        self.streaming = streaming
        self._parts: List[bytes] = []
        self._started = False
        self._file = None
        self._buffer: Optional[io.BytesIO] = None
        self._sent = 0
        if fmt in SOUNDFILE_FORMATS:
            import soundfile
            major, subtype = SOUNDFILE_FORMATS[fmt]
            self._buffer = io.BytesIO()
            self._file = soundfile.SoundFile(self._buffer, mode="w",
                                             samplerate=self.sample_rate, channels=1,
                                             format=major, subtype=subtype)

    def _drain(self) -> bytes:
        data = self._buffer.getbuffer()[self._sent:].tobytes()
        self._sent += len(data)
        return data

    def add(self, pcm: np.ndarray) -> bytes:
        if self._file is not None:
            self._file.write(pcm)
            return self._drain() if self.streaming else b""
        raw = pcm.astype("<i2", copy=False).tobytes()
        if not self.streaming:
            self._parts.append(raw)
            return b""
        if self.fmt == "wav" and not self._started:
            raw = wav_header(self.sample_rate, None) + raw
        self._started = True
        return raw

    def finish(self) -> bytes:
        if self._file is not None:
            self._file.close()
            return self._drain() if self.streaming else self._buffer.getvalue()
        if self.streaming:
            # A stream with no audio still owes its header.
            return wav_header(self.sample_rate, None) if self.fmt == "wav" and \
                not self._started else b""
        data = b"".join(self._parts)
        return (wav_header(self.sample_rate, len(data)) if self.fmt == "wav" else b"") + data

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()


# --------------------------------------------------------------------------------------------
# Synthesis on a thread of its own
# --------------------------------------------------------------------------------------------
class SpeechJob(SerialJob):
    """One request's synthesis: TTS.stream on the job's thread (serial_job.SerialJob), each
    piece encoded; ``chunks()`` yields the response's bytes."""

    what = "speech model"

    def __init__(self, loaded, text: str, voice: Optional[str], body: SpeechRequest,
                 encoder: AudioEncoder, timeout: float):
        super().__init__(loaded, timeout)
        self._args = (text, voice, body)
        self._encoder = encoder
        self.frames = 0

    def work(self) -> None:
        text, voice, body = self._args
        engine = self._loaded.engine
        pieces = engine.stream(text, voice, body)
        try:
            for piece in pieces:
                if self.cancelled:
                    return
                data = self._encoder.add(pcm16(piece))
                if data:
                    self.emit(data)
        finally:
            pieces.close()
        self.frames = engine.output_units()
        data = self._encoder.finish()
        if data:
            self.emit(data)

    def finish(self) -> None:
        self._encoder.close()

    def error(self, exc: Exception) -> APIError:
        if isinstance(exc, ValueError):
            return APIError(400, f"input: {exc}", param="input", code="invalid_value")
        log.error("speech synthesis failed: %s: %s", type(exc).__name__, exc)
        return APIError(500, f"speech synthesis failed: {type(exc).__name__}: {exc}",
                        code="synthesis_failed")

    def chunks(self) -> AsyncIterator[bytes]:
        """The response's bytes as they come (SerialJob.items)."""
        return self.items()


# --------------------------------------------------------------------------------------------
# The route
# --------------------------------------------------------------------------------------------
@router.post("/v1/audio/speech")
async def speech(body: SpeechRequest, request: Request):
    registry = registry_of(request)
    config = config_of(request)
    entry = registry.resolve(body.model, kind="tts")
    fmt = _response_format(body)
    lease = registry.lease(entry)
    loaded = await lease.__aenter__()
    try:
        engine = loaded.engine
        engine.check(body)
        voice = engine.voice(body.voice_name(), entry.name)
        _check_rate(fmt, loaded.sample_rate)
        n_tokens = await run_in_threadpool(_count, engine, body.input)
        streaming = body.stream_format is not None
        encoder = AudioEncoder(fmt, loaded.sample_rate, streaming)
        job = SpeechJob(loaded, body.input, voice, body, encoder, config.request_timeout)
        job.start(max_waiting=1 + config.max_queue)
    except BaseException:
        lease.release()
        raise
    headers = {"x-audio-sample-rate": str(loaded.sample_rate)}

    def cleanup():
        job.cancel()
        lease.release()

    if body.stream_format == "audio":
        return WatchedStreamingResponse(job.chunks(), cleanup, job.cancel,
                                        media_type=MEDIA_TYPES[fmt],
                                        headers={**SSE_HEADERS, **headers})
    if body.stream_format == "sse":
        return EventStreamResponse(_events(job, n_tokens), cleanup=cleanup,
                                   on_disconnect=job.cancel)
    watcher = asyncio.ensure_future(watch_disconnect(request.receive, job.cancel))
    try:
        data = b"".join([chunk async for chunk in job.chunks()])
    finally:
        watcher.cancel()
        cleanup()
    return Response(data, media_type=MEDIA_TYPES[fmt], headers=headers)


async def _events(job: SpeechJob, n_tokens: int) -> AsyncIterator[bytes]:
    try:
        async for chunk in job.chunks():
            yield sse(json.dumps({"type": "speech.audio.delta",
                                  "audio": base64.b64encode(chunk).decode("ascii")}))
    except APIError as e:
        job.cancel()
        yield sse(json.dumps(e.body()))
        return
    usage = {"input_tokens": n_tokens, "output_tokens": job.frames,
             "total_tokens": n_tokens + job.frames}
    yield sse(json.dumps({"type": "speech.audio.done", "usage": usage}))
