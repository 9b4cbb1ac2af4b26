"""The server's settings (what `dasllama serve` parses into) and the models it serves."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

__all__ = ["ModelSpec", "ServerConfig", "DEFAULT_PORT", "DEFAULT_HOST", "DEFAULT_PARALLEL",
           "DEFAULT_CTX", "DEFAULT_MAX_QUEUE", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_UPLOAD_BYTES",
           "DEFAULT_TIMEOUT_S"]

DEFAULT_HOST = "127.0.0.1"   # loopback: exposing the server is a deliberate --host choice
DEFAULT_PORT = 8080
DEFAULT_PARALLEL = 4
DEFAULT_CTX = 4096
# Requests that may wait for a slot, per model, before new ones get 503: enough to absorb a
# burst from a few clients, small enough that a waiting request is served within minutes.
DEFAULT_MAX_QUEUE = 64
# Largest request body: a full 128k-token context of text is well under this; anything larger
# is not a chat request.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
# Largest transcription or translation request (the uploaded file and the form around it):
# OpenAI's limit on an upload; about 13 minutes of 16 kHz 16-bit wav, hours of compressed
# audio. It is read into memory whole before the model sees it.
DEFAULT_MAX_UPLOAD_BYTES = 25 * 1024 * 1024
# Longest a generation request may take end to end (waiting included) before it is cancelled.
DEFAULT_TIMEOUT_S = 600.0


@dataclass
class ModelSpec:
    """One model the server offers under `name`.

    kind "llm": `source` is a path or a model name for dasllama.models.find; slots and n_ctx
    override the server's --parallel and --ctx for this model. kind "tts": `source` is a
    Pocket TTS GGUF (path or name); `voices` maps voice names to .wav files or voice files
    (dasllama.TTS.save_voice), registered when the model loads. kind "asr": `source` is a
    Whisper model for dasllama.ASR (a packaged name such as "whisper-tiny.en", a .gguf or a
    CTranslate2 folder), served on /v1/audio/transcriptions and /translations. Other kinds (or a custom
    load) give `loader`: a callable that loads the model and returns an object with close();
    the registry calls it on first use and again after a keep-alive unload."""
    name: str
    source: Optional[str] = None
    kind: str = "llm"
    slots: Optional[int] = None
    n_ctx: Optional[int] = None
    loader: Optional[Callable[[], Any]] = None
    voices: Optional[Dict[str, str]] = None


@dataclass
class ServerConfig:
    """Everything `dasllama serve` can set. max_body_bytes: the largest request body;
    max_upload_bytes: the largest body of the upload routes (transcriptions, translations),
    which take audio files. keep_alive: seconds a model may sit idle before it
    is unloaded (None: never). cors_origins: None keeps CORS off; ["*"] allows any origin.
    sliding_rings: language models' sliding-window layers keep rings in the KV pool
    (dasllama.batch.BatchEngine; off by default)."""
    models: List[ModelSpec] = field(default_factory=list)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    parallel: int = DEFAULT_PARALLEL
    n_ctx: int = DEFAULT_CTX
    threads: Optional[int] = None
    device: Optional[str] = None
    kv_type: str = "f16"
    sliding_rings: bool = False
    api_key: Optional[str] = None
    cors_origins: Optional[Sequence[str]] = None
    max_queue: int = DEFAULT_MAX_QUEUE
    keep_alive: Optional[float] = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    request_timeout: float = DEFAULT_TIMEOUT_S
    load_at_start: bool = True

    def __post_init__(self):
        for name, value, low in (("parallel", self.parallel, 1), ("n_ctx", self.n_ctx, 1),
                                 ("max_queue", self.max_queue, 0),
                                 ("max_body_bytes", self.max_body_bytes, 1),
                                 ("max_upload_bytes", self.max_upload_bytes, 1),
                                 ("port", self.port, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.sliding_rings, bool):
            raise ValueError(f"sliding_rings must be True or False, got {self.sliding_rings!r}")
        if self.request_timeout is None or not self.request_timeout > 0:
            raise ValueError(f"request_timeout must be > 0 seconds, got {self.request_timeout!r}")
        if self.keep_alive is not None and self.keep_alive < 0:
            raise ValueError(f"keep_alive must be >= 0 seconds or None, got {self.keep_alive!r}")
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"two models share the name {dupes[0]!r}; give one another "
                             f"name with -m NAME=MODEL")

    def slots_of(self, spec: ModelSpec) -> int:
        """The slots a language model is served with: its own, else the server's --parallel."""
        return spec.slots or self.parallel

    def n_ctx_of(self, spec: ModelSpec) -> int:
        """A language model's context per slot: its own, else the server's --ctx."""
        return spec.n_ctx or self.n_ctx
