"""The models a server offers, by name: loading, leasing, keep-alive unloading.

Each model is a :class:`ModelEntry`. An LLM, once loaded, is a :class:`LoadedLLM`: the
dasllama.LLM, a BatchEngine over it with the server's slots and context, and the
EngineThread that steps it. A speech model (kind "tts") is a :class:`LoadedTTS`, a speech
recognition model (kind "asr") a :class:`LoadedASR`; both serve one request at a time
(:class:`SerialModel`). Other kinds come with a loader of their own (ModelSpec.loader) and are
held the same way; routes ask for the kind they serve.

A route takes a :class:`Lease` for the time it uses a model (``async with
registry.lease(entry) as loaded``): the lease loads the model if it is not loaded, and a
model with a lease out is never unloaded. A housekeeping task unloads models idle longer than
keep_alive seconds; the next lease loads them again.

Everything here runs on the server's event loop, except loading and closing, which run on a
worker thread so the loop keeps answering (/health says "loading" meanwhile).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

from .config import ModelSpec, ServerConfig
from .errors import APIError

__all__ = ["ModelRegistry", "ModelEntry", "LoadedLLM", "SerialModel", "LoadedTTS", "LoadedASR",
           "Lease", "STATES"]

log = logging.getLogger("dasllama.server")

STATES = ("unloaded", "loading", "ready", "error")

# How often the housekeeping task looks for idle models and samples throughput.
HOUSEKEEPING_PERIOD_S = 0.25
# The window over which tokens/s is reported: long enough to smooth single steps, short
# enough that the figure follows load changes.
THROUGHPUT_WINDOW_S = 10.0
# Engine counters kept across reloads (a reloaded engine starts from zero).
_CUMULATIVE = ("prompt_tokens", "cached_tokens", "prompt_cache_hits", "generated_tokens", "steps")


# OpenAI's model names that its clients send by default (Open WebUI, the SDK's examples): on
# a route of that kind they stand for this server's only model of it.
OPENAI_MODEL_NAMES = {
    "asr": ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe"),
    "tts": ("tts-1", "tts-1-hd", "gpt-4o-mini-tts"),
}


def _retrieve_exception(task: asyncio.Task) -> None:
    """Marks a failed load's error as seen: when every request waiting for the load was
    cancelled, nobody else reads it (it is recorded in the entry's error)."""
    if not task.cancelled():
        task.exception()


class LoadedLLM:
    """A language model ready to serve: llm (dasllama.LLM), engine (BatchEngine) and
    thread (EngineThread, started)."""

    kind = "llm"

    def __init__(self, llm, engine, thread):
        self.llm = llm
        self.engine = engine
        self.thread = thread

    @classmethod
    def load(cls, spec: ModelSpec, config: ServerConfig) -> "LoadedLLM":
        from ..batch import BatchEngine, EngineThread
        from ..llm import LLM

        n_ctx = config.n_ctx_of(spec)
        slots = config.slots_of(spec)
        llm = LLM(spec.source, device=config.device, n_ctx=n_ctx, threads=config.threads,
                  kv_type=config.kv_type)
        try:
            engine = BatchEngine(llm, slots=slots, n_ctx=n_ctx, max_queue=config.max_queue,
                                 sliding_rings=config.sliding_rings)
            loaded = cls(llm, engine, EngineThread(engine))
            engine.eog_ids()    # now, on the loading thread, not in a request (ignore_eos)
            loaded.thread.start()
        except BaseException:
            llm.close()
            raise
        return loaded

    @property
    def n_ctx(self) -> int:
        return self.engine.n_ctx

    @property
    def slots(self) -> int:
        return self.engine.slots

    @property
    def stats(self) -> dict:
        return self.thread.stats

    def close(self) -> None:
        try:
            self.thread.stop()
        finally:
            try:
                self.engine.close()
            finally:
                self.llm.close()


class SerialModel:
    """A model that serves one request at a time (a TTS or an ASR object runs one synthesis or
    transcription at a time): `model` is the object; a request's work holds `lock` (a threading.Lock) for the whole
    of it (serial_job.SerialJob); `waiting` counts the requests holding or waiting for it
    (changed on the event loop only). close() waits for the request in progress, which a
    cancelled request ends at its next piece."""

    kind = "serial"

    def __init__(self, model):
        self.model = model
        self.lock = threading.Lock()
        self.waiting = 0

    def close(self) -> None:
        with self.lock:
            self.model.close()


class LoadedTTS(SerialModel):
    """A speech model ready to serve: tts (dasllama.TTS) with its spec's voices registered."""

    kind = "tts"

    @property
    def tts(self):
        return self.model

    @property
    def engine(self):
        """What the speech route needs from this kind of model (server/speech_engines.py)."""
        from .speech_engines import speech_engine

        return speech_engine(self.model)

    @classmethod
    def load(cls, spec: ModelSpec, config: ServerConfig) -> "LoadedTTS":
        from ..kokoro import KokoroTTS
        from ..tts import TTS

        tts = TTS(spec.source, device=config.device, n_threads=config.threads or 0)
        try:
            for name, path in (spec.voices or {}).items():
                if isinstance(tts, KokoroTTS):
                    tts.register_voice(name, str(path))   # a pack, a blend or a .npy style
                elif str(path).lower().endswith(".wav"):
                    tts.register_voice(name, path)
                else:
                    tts.load_voice(name, path)
        except BaseException:
            tts.close()
            raise
        return cls(tts)

    @property
    def sample_rate(self) -> int:
        return self.tts.sample_rate


class LoadedASR(SerialModel):
    """A speech recognition model ready to serve: asr (dasllama.ASR). Requests take turns for
    the whole of a transcription (an ASR would otherwise interleave them window by window,
    and every request would wait as long as all of them together)."""

    kind = "asr"

    @property
    def asr(self):
        return self.model

    @classmethod
    def load(cls, spec: ModelSpec, config: ServerConfig) -> "LoadedASR":
        from ..asr import ASR

        return cls(ASR(spec.source, n_threads=config.threads))


class ModelEntry:
    """One model's state: state is one of STATES; loaded is the LoadedLLM (or the loader's
    object) while state is "ready"; error is why the last load failed."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.state = "unloaded"
        self.error: Optional[str] = None
        self.loaded: Any = None
        self.in_use = 0
        self.last_used = time.monotonic()
        self.loads = 0
        self.created = int(time.time())
        self.lock: Optional[asyncio.Lock] = None     # made on the loop by ModelRegistry.start
        self.load_task: Optional[asyncio.Task] = None    # the load in progress, if any
        self.retired: Dict[str, int] = {k: 0 for k in _CUMULATIVE}
        self._throughput: Deque[Tuple[float, int]] = collections.deque()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    def stats(self) -> Optional[dict]:
        """The engine's stats snapshot with counters summed over reloads; None when this is
        not a loaded LLM."""
        loaded = self.loaded
        if self.state != "ready" or getattr(loaded, "kind", None) != "llm":
            return None
        out = dict(loaded.stats)
        for k in _CUMULATIVE:
            out[k] = out.get(k, 0) + self.retired[k]
        return out

    def sample_throughput(self, now: float) -> None:
        stats = self.stats()
        if stats is None:
            return
        self._throughput.append((now, stats.get("generated_tokens", 0)))
        while self._throughput and now - self._throughput[0][0] > THROUGHPUT_WINDOW_S:
            self._throughput.popleft()

    def tokens_per_second(self) -> float:
        """Generated tokens per second over the last THROUGHPUT_WINDOW_S."""
        if len(self._throughput) < 2:
            return 0.0
        (t0, g0), (t1, g1) = self._throughput[0], self._throughput[-1]
        return (g1 - g0) / (t1 - t0) if t1 > t0 else 0.0

    def _load_blocking(self, config: ServerConfig):
        if self.spec.kind == "llm" and self.spec.loader is None:
            return LoadedLLM.load(self.spec, config)
        if self.spec.kind == "tts" and self.spec.loader is None:
            return LoadedTTS.load(self.spec, config)
        if self.spec.kind == "asr" and self.spec.loader is None:
            return LoadedASR.load(self.spec, config)
        if self.spec.loader is None:
            raise ValueError(f"model {self.name!r} of kind {self.spec.kind!r} has no loader")
        return self.spec.loader()

    def _retire(self) -> None:
        stats = self.stats()
        if stats is not None:
            for k in _CUMULATIVE:
                self.retired[k] = stats.get(k, 0)
        self._throughput.clear()


class Lease:
    """A model in use by one request; released by the async context manager's exit (or
    release(), which is idempotent, for a stream that outlives its handler)."""

    def __init__(self, registry: "ModelRegistry", entry: ModelEntry):
        self._registry = registry
        self.entry = entry
        self.model: Any = None
        self._held = False

    async def __aenter__(self):
        self.model = await self._registry._acquire(self.entry)
        self._held = True
        return self.model

    async def __aexit__(self, *exc):
        self.release()

    def release(self) -> None:
        if self._held:
            self._held = False
            self.entry.in_use -= 1
            self.entry.last_used = time.monotonic()


class ModelRegistry:
    """Models by name (see the module docstring). start() and close() run on the event loop
    (the app's lifespan calls them)."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self._entries: Dict[str, ModelEntry] = {}
        self._housekeeping: Optional[asyncio.Task] = None
        self._loads: List[asyncio.Task] = []
        for spec in config.models:
            self.add(spec)

    # ------------------------------------------------------------------------------------
    # Lookup
    # ------------------------------------------------------------------------------------
    def add(self, spec: ModelSpec) -> ModelEntry:
        """Offers one more model (before start(), or after it from the event loop)."""
        if spec.name in self._entries:
            raise ValueError(f"a model named {spec.name!r} is already registered")
        entry = ModelEntry(spec)
        if self._housekeeping is not None:
            entry.lock = asyncio.Lock()
        self._entries[spec.name] = entry
        return entry

    def entries(self) -> List[ModelEntry]:
        return list(self._entries.values())

    def get(self, name: str) -> Optional[ModelEntry]:
        return self._entries.get(name)

    def resolve(self, name: Optional[str], kind: str = "llm") -> ModelEntry:
        """The entry a request's `model` field names. None, or one of OpenAI's own model
        names for that kind (OPENAI_MODEL_NAMES) that no model here is called, picks the only
        model of that kind; an unknown name is a 404, a model of another kind a 400."""
        if name is None:
            of_kind = [e for e in self._entries.values() if e.kind == kind]
            if len(of_kind) == 1:
                return of_kind[0]
            if not of_kind:
                raise APIError(404, f"this server has no {kind} model", param="model",
                               code="model_not_found")
            raise APIError(400, f"model is required: this server has several {kind} models "
                                f"({', '.join(e.name for e in of_kind)})", param="model",
                           code="model_required")
        entry = self._entries.get(name)
        if entry is None and name in OPENAI_MODEL_NAMES.get(kind, ()):
            return self.resolve(None, kind)
        if entry is None:
            known = ", ".join(sorted(self._entries)) or "none"
            raise APIError(404, f"the model {name!r} does not exist on this server (models: "
                                f"{known})", param="model", code="model_not_found")
        if entry.kind != kind:
            raise APIError(400, f"the model {name!r} is a {entry.kind} model; this route needs "
                                f"a {kind} model", param="model", code="wrong_model_kind")
        return entry

    def lease(self, entry: ModelEntry) -> Lease:
        return Lease(self, entry)

    # ------------------------------------------------------------------------------------
    # Health
    # ------------------------------------------------------------------------------------
    def health(self) -> Tuple[bool, str]:
        """(ready, reason). Not ready while a model loads or after its load failed; a model
        unloaded for keep-alive counts as ready (it loads on the next request)."""
        loading = [e.name for e in self._entries.values() if e.state == "loading"]
        failed = [e for e in self._entries.values() if e.state == "error"]
        if failed:
            return False, "; ".join(f"model {e.name!r} failed to load: {e.error}" for e in failed)
        if loading:
            return False, f"loading model{'s' if len(loading) > 1 else ''} {', '.join(loading)}"
        if not self._entries:
            return False, "no model is configured"
        return True, "ok"

    # ------------------------------------------------------------------------------------
    # Loading and unloading
    # ------------------------------------------------------------------------------------
    async def _acquire(self, entry: ModelEntry):
        assert entry.lock is not None, "ModelRegistry.start() was not called"
        async with entry.lock:
            if entry.state != "ready":
                if entry.load_task is None:
                    entry.load_task = asyncio.ensure_future(self._load(entry))
                    entry.load_task.add_done_callback(_retrieve_exception)
                # Shielded: a request cancelled while it waits leaves the load to finish and be
                # recorded (the next request waits for the same load instead of starting one).
                await asyncio.shield(entry.load_task)
            entry.in_use += 1
            entry.last_used = time.monotonic()
            return entry.loaded

    async def _load(self, entry: ModelEntry) -> None:
        entry.state = "loading"
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        try:
            loaded = await loop.run_in_executor(None, entry._load_blocking, self.config)
        except Exception as e:
            entry.state, entry.error = "error", f"{type(e).__name__}: {e}"
            log.error("model %r failed to load: %s", entry.name, entry.error)
            raise APIError(503, f"the model {entry.name!r} could not be loaded: {entry.error}",
                           param="model", code="model_load_failed") from e
        finally:
            entry.load_task = None
        entry.loaded, entry.state, entry.error = loaded, "ready", None
        entry.loads += 1
        entry.last_used = time.monotonic()
        log.info("model %r loaded in %.1f s", entry.name, time.monotonic() - t0)

    async def unload(self, entry: ModelEntry) -> bool:
        """Unloads a model that no request uses; False when it is in use or not loaded."""
        async with entry.lock:
            if entry.state != "ready" or entry.in_use:
                return False
            loaded, entry.loaded = entry.loaded, None
            entry._retire()
            entry.state = "unloaded"
        await asyncio.get_running_loop().run_in_executor(None, loaded.close)
        log.info("model %r unloaded after %.1f s idle", entry.name,
                 time.monotonic() - entry.last_used)
        return True

    async def _load_in_background(self, entry: ModelEntry) -> None:
        try:
            async with self.lease(entry):
                pass
        except APIError:
            pass    # recorded in entry.error; /health reports it

    async def _housekeep(self) -> None:
        keep_alive = self.config.keep_alive
        while True:
            await asyncio.sleep(HOUSEKEEPING_PERIOD_S)
            now = time.monotonic()
            for entry in list(self._entries.values()):
                entry.sample_throughput(now)
                if (keep_alive is not None and entry.state == "ready" and not entry.in_use
                        and not entry.lock.locked() and now - entry.last_used > keep_alive):
                    try:
                        await self.unload(entry)
                    except Exception:   # a failed close must not stop housekeeping
                        log.exception("unloading model %r failed", entry.name)

    async def start(self) -> None:
        """Makes the locks on this loop, starts housekeeping and, with config.load_at_start,
        loads every model in the background (requests for a model wait for its load)."""
        for entry in self._entries.values():
            entry.lock = asyncio.Lock()
        self._housekeeping = asyncio.ensure_future(self._housekeep())
        if self.config.load_at_start:
            for entry in self._entries.values():
                entry.state = "loading"    # before the first /health can ask
                self._loads.append(asyncio.ensure_future(self._load_in_background(entry)))

    async def wait_loaded(self) -> None:
        """Returns when the loads that start() began have finished (failed ones included)."""
        if self._loads:
            await asyncio.gather(*self._loads, return_exceptions=True)

    async def close(self) -> None:
        """Stops housekeeping and closes every loaded model (requests still running end with
        the engine's stop)."""
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            await asyncio.gather(self._housekeeping, return_exceptions=True)
        # Loads in progress finish first: a worker thread cannot be interrupted, and a model
        # it loads after this point would never be closed.
        in_progress = [e.load_task for e in self._entries.values() if e.load_task is not None]
        await asyncio.gather(*self._loads, *in_progress, return_exceptions=True)
        loop = asyncio.get_running_loop()
        for entry in self._entries.values():
            loaded, entry.loaded = entry.loaded, None
            if loaded is not None:
                entry.state = "unloaded"
                try:
                    await loop.run_in_executor(None, loaded.close)
                except Exception:
                    log.exception("closing model %r failed", entry.name)
