"""POST /v1/audio/transcriptions and POST /v1/audio/translations: speech to text with the
server's ASR models (dasllama.ASR, Whisper).

The body is OpenAI's multipart form: ``file`` (the audio: wav, flac, ogg or mp3, decoded by
dasllama.audio), ``model``, ``language``, ``prompt`` (the first window's initial prompt),
``temperature``, ``response_format``, ``timestamp_granularities[]``, ``stream``; translations
take file, model, prompt, temperature and response_format. Options go to
``ASR.transcribe`` as faster-whisper names them (prompt: initial_prompt; word granularity:
word_timestamps; translations: task "translate"; chunking_strategy: vad_filter); what the
model or this version cannot do (word timestamps, translation on an English-only model, a
language the model does not speak, sampling temperatures) is the ASR's own ASRError, answered
as a 400 naming the request field. A file that cannot be decoded (AudioError) is a 400 on
``file``; an empty one too. The upload's size is limited by ``--max-upload``
(config.max_upload_bytes: a 413 past it, checked before the form is parsed).

response_format (default json):

- json: ``{"text", "usage": {"type": "duration", "seconds"}}``; text: the same text as a
  text/plain body. The text is the segments' texts joined, stripped at both ends (what
  ``"".join(s.text for s in segments).strip()`` gives on ``ASR.transcribe``'s segments).
- srt, vtt: subtitles, one cue per segment (dasllama.transcribe_cli's writer).
- verbose_json: ``{"task", "language", "duration", "text", "segments", "usage"}`` (the
  language by its English name, "german", as OpenAI gives it), each
  segment with faster-whisper's fields (id counted from 0, as OpenAI does); with the word
  granularity also ``"words": [{"word", "start", "end"}]``. The segment granularity is what
  verbose_json always returns; granularities need verbose_json, as with OpenAI.

stream=true (json or text only): server-sent events ``{"type": "transcript.text.delta",
"delta"}`` as segments are decoded, then ``{"type": "transcript.text.done", "text",
"usage"}``; the deltas joined are the done event's text. A request with an option the model
cannot run is answered with its 400 before the stream starts.

An ASR model runs one transcription at a time: the request's work (decoding the file and
transcribing it) runs on a thread of its own holding the model's lock (serial_job.SerialJob),
so the event loop is never blocked; requests waiting for the model count against
--max-queue (over it: 503 with Retry-After). A client that goes away stops its transcription
at the next segment.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from typing import Any, AsyncIterator, Dict, List, Literal, Optional

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import UploadFile

from ...whisper_languages import language_name
from ..bridge import sse, watch_disconnect
from ..errors import APIError, validation_message
from ..generation import EventStreamResponse
from ..middleware import CLIENT_GONE_STATUS
from ..serial_job import SerialJob
from .common import config_of, metrics_of, registry_of

__all__ = ["router", "TranscriptionForm", "UPLOAD_PATHS", "RESPONSE_FORMATS", "transcript_text",
           "multipart_missing"]

log = logging.getLogger("dasllama.server")

router = APIRouter()

TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
TRANSLATIONS_PATH = "/v1/audio/translations"
# The routes that take files: their bodies get config.max_upload_bytes instead of max_body.
UPLOAD_PATHS = (TRANSCRIPTIONS_PATH, TRANSLATIONS_PATH)
RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
STREAM_FORMATS = ("json", "text")
# Form fields a request may send besides the file: OpenAI's fields with room for the repeated
# granularities and include[] entries. More is not a transcription request.
MAX_FORM_FIELDS = 32
# The largest text field (a prompt): Whisper keeps 223 tokens of it, a few KB of text.
MAX_FIELD_BYTES = 64 * 1024
# Sampling temperatures OpenAI accepts; the ASR decides which of them it runs.
MAX_TEMPERATURE = 1.0
# ASR.transcribe's option names, as its ASRError messages name them, and the request field
# that set each: an ASRError's param is the first one its message names.
_OPTION_FIELDS = (("word_timestamps", "timestamp_granularities[]"),
                  ("task", "model"), ("language", "language"),
                  ("temperature", "temperature"), ("vad_filter", "chunking_strategy"),
                  ("initial_prompt", "prompt"), ("multilingual", "model"))
MEDIA_TYPES = {"text": "text/plain", "srt": "application/x-subrip", "vtt": "text/vtt"}


# --------------------------------------------------------------------------------------------
# The form
# --------------------------------------------------------------------------------------------
class TranscriptionForm(BaseModel):
    """The form's fields but the file. Form values are text, so numbers and booleans are read
    from their text ("0.2", "true") rather than strictly typed as JSON bodies are."""
    model_config = ConfigDict(extra="ignore")

    model: Optional[str] = None
    language: Optional[str] = Field(None, min_length=1, max_length=16)
    prompt: Optional[str] = None
    temperature: float = Field(0.0, ge=0.0, le=MAX_TEMPERATURE)
    response_format: Literal["json", "text", "srt", "vtt", "verbose_json"] = "json"
    timestamp_granularities: List[Literal["word", "segment"]] = Field(default_factory=list)
    stream: bool = False
    chunking_strategy: Optional[str] = None
    include: List[str] = Field(default_factory=list)

    def check(self) -> None:
        """What the fields cannot ask for together (400s naming the field)."""
        if self.timestamp_granularities and self.response_format != "verbose_json":
            raise APIError(400, f"timestamp_granularities[] needs response_format "
                                f"'verbose_json' (got {self.response_format!r})",
                           param="timestamp_granularities[]", code="invalid_value")
        if self.stream and self.response_format not in STREAM_FORMATS:
            raise APIError(400, f"stream is served with response_format "
                                f"{' or '.join(STREAM_FORMATS)} (got {self.response_format!r})",
                           param="stream", code="invalid_value")
        if self.include:
            raise APIError(400, f"include[] {self.include!r} is not supported: this server "
                                f"returns no token logprobs for transcriptions",
                           param="include[]", code="unsupported")


# Fields that may repeat, as "name[]" (how the openai client sends lists) or "name".
_LIST_FIELDS = ("timestamp_granularities", "include")


def multipart_missing() -> Optional[str]:
    """Why forms cannot be parsed here (Starlette parses them with python-multipart), or
    None when they can."""
    import importlib.util

    # The package's module is python_multipart; before 0.0.13 it was multipart.
    if any(importlib.util.find_spec(name) for name in ("python_multipart", "multipart")):
        return None
    return ("reading uploads needs the python-multipart package (pip install "
            "python-multipart)")


async def _read_form(request: Request):
    """(the parsed form, to close; its upload; the other fields, "name[]" lists as "name") of
    a multipart body. 501 without python-multipart, 415 for another content type, 400 for a
    body that is not valid multipart/form-data or has no file."""
    missing = multipart_missing()
    if missing:
        raise APIError(501, missing, code="not_installed")
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "multipart/form-data":
        raise APIError(415, f"the body must be multipart/form-data with the audio in the "
                            f"'file' field (got content type {content_type or 'none'!r})",
                       code="unsupported_media_type")
    try:
        form = await request.form(max_files=1, max_fields=MAX_FORM_FIELDS,
                                  max_part_size=MAX_FIELD_BYTES)
    except asyncio.CancelledError:
        raise
    except Exception as e:   # Starlette's 400 or python-multipart's own parse errors
        detail = getattr(e, "detail", None) or getattr(e, "message", None) or str(e)
        raise APIError(400, f"the body is not valid multipart/form-data: {detail}",
                       code="invalid_multipart") from None
    uploads = form.getlist("file")
    if not uploads:
        await form.close()
        raise APIError(400, "file is required: the audio file as the form's 'file' part",
                       param="file", code="missing_file")
    upload = uploads[0]
    if not isinstance(upload, UploadFile):
        await form.close()
        raise APIError(400, "file must be an uploaded file (a form part with a filename), not "
                            "a text field", param="file", code="invalid_value")
    fields: Dict[str, Any] = {}
    for key, value in form.multi_items():
        if key == "file":
            continue
        if isinstance(value, UploadFile):
            await form.close()
            raise APIError(400, f"{key}: a file where text was expected", param=key,
                           code="invalid_value")
        name = key[:-2] if key.endswith("[]") else key
        if name in _LIST_FIELDS:
            fields.setdefault(name, []).append(value)
        else:
            fields[name] = value
    return form, upload, fields


def _validated(fields: Dict[str, Any], task: str) -> TranscriptionForm:
    if task == "translate":
        for name in ("language", "timestamp_granularities"):
            if name in fields:
                raise APIError(400, f"{name} is not a field of translations (the output is "
                                    f"English text)", param=name, code="invalid_value")
    try:
        body = TranscriptionForm.model_validate(fields)
    except ValidationError as e:
        message, param = validation_message(e.errors())
        raise APIError(400, message, param=param, code="invalid_value") from None
    body.check()
    return body


# --------------------------------------------------------------------------------------------
# Transcription on a thread of its own
# --------------------------------------------------------------------------------------------
def _param_of(message: str) -> Optional[str]:
    for option, field in _OPTION_FIELDS:
        if option in message:
            return field
    return None


class TranscriptionJob(SerialJob):
    """One request's transcription (serial_job.SerialJob): decodes the file and runs
    ASR.transcribe on the job's thread. Items: ("info", TranscriptionInfo) once the options
    and the file were accepted, then ("segment", Segment) as each is decoded."""

    what = "speech recognition model"

    def __init__(self, loaded, audio: bytes, filename: Optional[str], options: Dict[str, Any],
                 timeout: float):
        super().__init__(loaded, timeout)
        self._audio = audio
        self._filename = filename
        self._options = options
        self.audio_seconds = 0.0
        self.processing_seconds = 0.0

    def work(self) -> None:
        start = time.perf_counter()
        try:
            upload = io.BytesIO(self._audio)
            upload.name = self._filename or "file"    # what errors call it; never opened
            segments, info = self._loaded.asr.transcribe(upload, **self._options)
            self._audio = b""    # decoded: the bytes are no longer needed
            self.audio_seconds = float(info.duration)
            self.emit(("info", info))
            for segment in segments:
                if self.cancelled:
                    segments.close()
                    return
                self.emit(("segment", segment))
        finally:
            self.processing_seconds = time.perf_counter() - start

    def error(self, exc: Exception) -> APIError:
        from ...asr import ASRError
        from ...audio import AudioError

        if isinstance(exc, AudioError):
            return APIError(400, f"file: the audio cannot be used: {exc}", param="file",
                            code="invalid_audio")
        if isinstance(exc, ASRError):
            return APIError(400, str(exc), param=_param_of(str(exc)), code="unsupported")
        log.error("transcription failed: %s: %s", type(exc).__name__, exc)
        return APIError(500, f"transcription failed: {type(exc).__name__}: {exc}",
                        code="transcription_failed")


def _asr_options(body: TranscriptionForm, task: str) -> Dict[str, Any]:
    """ASR.transcribe's keyword arguments for the form: only what the request set, so the
    ASR's defaults stand for the rest."""
    options: Dict[str, Any] = {"task": task, "temperature": body.temperature}
    if body.language is not None:
        options["language"] = body.language
    if body.prompt:
        options["initial_prompt"] = body.prompt
    if "word" in body.timestamp_granularities:
        options["word_timestamps"] = True
    if body.chunking_strategy is not None:
        options["vad_filter"] = True
    return options


# --------------------------------------------------------------------------------------------
# Responses
# --------------------------------------------------------------------------------------------
def transcript_text(segments) -> str:
    """The transcript of segments: their texts joined, stripped at both ends."""
    return "".join(s.text for s in segments).strip()


def _word(w) -> dict:
    get = w.get if isinstance(w, dict) else (lambda k: getattr(w, k))
    return {"word": get("word"), "start": float(get("start")), "end": float(get("end"))}


def _segment(index: int, s) -> dict:
    return {"id": index, "seek": int(s.seek), "start": float(s.start), "end": float(s.end),
            "text": s.text, "tokens": [int(t) for t in s.tokens],
            "temperature": float(s.temperature or 0.0), "avg_logprob": float(s.avg_logprob),
            "compression_ratio": float(s.compression_ratio),
            "no_speech_prob": float(s.no_speech_prob)}


def _usage(info) -> dict:
    return {"type": "duration", "seconds": float(info.duration)}


def _subtitles(segments, info, fmt: str) -> str:
    from ...transcribe_cli import write_transcript

    out = io.StringIO()
    write_transcript(segments, info, fmt, out)
    return out.getvalue()


def _response(body: TranscriptionForm, task: str, info, segments: list):
    fmt = body.response_format
    text = transcript_text(segments)
    if fmt == "json":
        return JSONResponse({"text": text, "usage": _usage(info)})
    if fmt == "text":
        return PlainTextResponse(text + "\n", media_type=MEDIA_TYPES["text"])
    if fmt in ("srt", "vtt"):
        return PlainTextResponse(_subtitles(segments, info, fmt), media_type=MEDIA_TYPES[fmt])
    out = {"task": task, "language": language_name(info.language),
           "duration": float(info.duration),
           "text": text, "segments": [_segment(i, s) for i, s in enumerate(segments)],
           "usage": _usage(info)}
    if "word" in body.timestamp_granularities:
        out["words"] = [_word(w) for s in segments for w in (s.words or [])]
    return JSONResponse(out)


async def _events(items: AsyncIterator, info, outcome: dict) -> AsyncIterator[bytes]:
    parts: List[str] = []
    try:
        async for _, segment in items:
            # The transcript is stripped at its start: the first delta is.
            text = segment.text if parts else segment.text.lstrip()
            if text:
                parts.append(text)
                yield sse(json.dumps({"type": "transcript.text.delta", "delta": text}))
    except APIError as e:
        outcome["value"] = "failed" if e.status >= 500 else "rejected"
        yield sse(json.dumps(e.body()))
        return
    # The deltas joined are the text; a transcript's trailing space is not sent afterwards.
    full = "".join(parts)
    outcome["value"] = "ok"
    yield sse(json.dumps({"type": "transcript.text.done", "text": full.rstrip(),
                          "usage": _usage(info)}))


# --------------------------------------------------------------------------------------------
# The routes
# --------------------------------------------------------------------------------------------
@router.post(TRANSCRIPTIONS_PATH)
async def transcriptions(request: Request):
    return await _serve(request, "transcribe")


@router.post(TRANSLATIONS_PATH)
async def translations(request: Request):
    return await _serve(request, "translate")


async def _serve(request: Request, task: str):
    registry = registry_of(request)
    config = config_of(request)
    metrics = metrics_of(request)
    form, upload, fields = await _read_form(request)
    try:
        body = _validated(fields, task)
        entry = registry.resolve(body.model, kind="asr")
        audio = await upload.read()
    finally:
        await form.close()
    if not audio:
        raise APIError(400, f"file: the uploaded file {upload.filename or ''!r} is empty",
                       param="file", code="invalid_audio")
    lease = registry.lease(entry)
    loaded = await lease.__aenter__()
    outcome = {"value": "cancelled"}
    job: Optional[TranscriptionJob] = None

    def cleanup():
        if job is not None:
            job.cancel()
            metrics.observe_transcription(entry.name, task, outcome["value"],
                                          job.audio_seconds, job.processing_seconds)
        lease.release()

    try:
        job = TranscriptionJob(loaded, audio, upload.filename, _asr_options(body, task),
                               config.request_timeout)
        job.start(max_waiting=1 + config.max_queue)
    except BaseException:
        job = None      # nothing reached the model
        lease.release()
        raise
    del audio
    items = job.items()
    watcher = asyncio.ensure_future(watch_disconnect(request.receive, job.cancel))
    try:
        # The first item is the info (the file and the options were accepted) or the error.
        kind, info = await items.__anext__()
    except StopAsyncIteration:     # cancelled before it started: the client left
        watcher.cancel()
        cleanup()
        return JSONResponse({}, status_code=CLIENT_GONE_STATUS)
    except APIError as e:
        watcher.cancel()
        outcome["value"] = "failed" if e.status >= 500 else "rejected"
        cleanup()
        raise
    except BaseException:
        watcher.cancel()
        cleanup()
        raise
    if body.stream:
        watcher.cancel()
        return EventStreamResponse(_events(items, info, outcome), cleanup=cleanup,
                                   on_disconnect=job.cancel)
    try:
        segments = [segment async for _, segment in items]
        if job.cancelled:     # the client left: the segments are partial and nobody reads them
            return JSONResponse({}, status_code=CLIENT_GONE_STATUS)
        outcome["value"] = "ok"
    except APIError as e:
        outcome["value"] = "failed" if e.status >= 500 else "rejected"
        raise
    finally:
        watcher.cancel()
        cleanup()
    return _response(body, task, info, segments)

