"""Continuous batching: several sequences decoded together in one forward step.

::

    from dasllama import LLM
    with LLM("smollm2") as llm:
        texts = llm.generate_many(["The capital of France is", "1, 2, 3,"], max_tokens=16,
                                  temperature=0, slots=2)

``BatchEngine`` is the step-driven scheduler over ``_core.BatchEngine`` (csrc/serve/): each
``step()`` feeds every active sequence's next token, plus a chunk of a newcomer's prompt, through
the model as one batch of rows, samples each sequence with its own sampler, and turns tokens into
text (whole UTF-8 characters, stop strings held back until resolved), exactly as ``LLM.generate``
does: the same seed gives the same text whatever else is running. Requests that find every slot
busy wait in a FIFO queue. ``EngineThread`` runs a BatchEngine on a thread of its own for callers
that submit from other threads (the server).

The KV pool: every slot owns a region of one allocation that holds ``n_ctx`` positions (the
context is per slot and never split: ``kv_pool_bytes`` = slots x one slot's bytes). A finished
slot keeps its cached tokens; a new request takes the free slot sharing the longest prefix with
its prompt and evaluates only the rest (``Usage.cached_tokens``).

``sliding_rings=True`` (off by default) makes a sliding-window layer (Gemma-3's local layers)
keep a ring of ``window + chunk - 1`` rows per slot instead of ``n_ctx`` when that is fewer,
where chunk = min(prefill_chunk, 128) is then the most prompt tokens a step takes from one
sequence of such a model (``kv_layer_rows``). It shrinks ``kv_pool_bytes``, but the pool's pages
are only touched as sequences grow, so resident memory drops only for sequences longer than the
ring; the price is prompt chunks capped at 128 rows and prefix reuse limited to prefixes whose
window the ring still holds (a prompt's early prefix is lost once a sequence outgrows the ring).
Off, every layer keeps ``n_ctx`` rows: any cached prefix is reused and a step takes a prompt
whole (up to the step's rows).

Memory beyond the weights and the pool (``stats``): the steps run on the model's own forward
buffers (``forward_scratch_bytes``, shared, not a second set), and the engine holds the step's
logits, one sampler scratch per pool thread and the slots' token histories (``scratch_bytes``).

Thread-safety: a BatchEngine is used from one thread; EngineThread.submit/cancel from any.
"""

from __future__ import annotations

import codecs
import collections
import itertools
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, List, Optional, Protocol, Sequence

import numpy as np

from . import _core
from .llm import _TextStream, _check_int

__all__ = ["SamplingParams", "Usage", "Event", "Request", "Constraint", "BatchEngine",
           "EngineThread", "QueueFull"]

# Prompt tokens a step takes while other sequences decode. The default fills a step (the
# engine's 512 rows, as llama.cpp's default micro-batch): prompts finish soonest and the products
# run at full width, at the price of slower steps for the decoders meanwhile; a smaller chunk
# keeps their tokens flowing evenly.
DEFAULT_PREFILL_CHUNK = 512


class QueueFull(RuntimeError):
    """The engine's waiting queue is at max_queue."""


@dataclass
class SamplingParams:
    """The sampler settings of one request (see dasllama.llm for the chain). seed None: a fresh
    random seed."""
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: Optional[int] = None


@dataclass
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0       # prompt tokens whose K/V rows were reused from a slot's cache
    completion_tokens: int = 0


class Constraint(Protocol):
    """Constrained decoding (dasllama.grammar): which tokens may come next."""

    def mask(self) -> Optional[np.ndarray]:
        """The allowed next tokens as a bitmask: uint32 words, bit (t % 32) of word t // 32 set
        when token t is allowed; None when anything is allowed."""

    def advance(self, token: int) -> None:
        """Records the sampled token."""

    def is_done(self) -> bool:
        """True once the constraint is complete (generation stops with finish "stop")."""


@dataclass
class Event:
    """What a request produced in one step. kind "token": a sampled token (text may be "" while
    a character or a stop string is incomplete; logprob/top_logprobs when asked for). kind
    "done": the request ended (finish_reason, usage; text holds any held-back tail). kind
    "error": it failed (error)."""
    request_id: int
    kind: str
    text: str = ""
    token: int = -1
    logprob: Optional[float] = None
    top_logprobs: Optional[List[tuple]] = None    # [(token id, logprob)], most probable first
    finish_reason: Optional[str] = None           # eog | stop | length | context | cancelled
    usage: Optional[Usage] = None
    error: Optional[BaseException] = None


@dataclass
class Request:
    """One sequence to generate. prompt: token ids (already checked against the vocabulary).
    max_tokens None: until the context is full. extra_eog: token ids that end it like an
    end-of-generation token (a chat template's turn end). logprobs: None, or how many top
    alternatives to report per token (0: only the sampled token's). ignore_eos: never sample an
    end-of-generation token (nor extra_eog), so generation runs to max_tokens (benchmarks).
    render_tokens: {token id: text} of control tokens whose text the output keeps (a tool-call
    format's markers, dasllama.tools.ToolPlan.rendered_tokens; the text of other control tokens
    is left out). A rendered token comes out whole, and stop strings match only the text
    around it: a stop string never cuts one, nor matches across one (a marker the tool parser
    needs is never lost to a stop string), while a stop string in the text before or after it
    still stops there."""
    prompt: Sequence[int]
    max_tokens: Optional[int] = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: Sequence[str] = ()
    extra_eog: Sequence[int] = ()
    logprobs: Optional[int] = None
    constraint: Optional[Constraint] = None
    on_event: Optional[Callable[[Event], None]] = None
    ignore_eos: bool = False
    render_tokens: Optional[Dict[int, str]] = None
    id: int = -1     # set by submit


class _RenderingStream(_TextStream):
    """A _TextStream that also takes rendered control tokens (Request.render_tokens): such a
    token's text is emitted whole, never searched for stop strings, and ends any stop string
    the text before it was starting (the held-back text is released, since what follows is the
    token, not the rest of the stop string)."""

    def push_rendered(self, text: str) -> str:
        if self.stopped:
            return ""
        held = self.push(b"", final=True)    # no stop string in it: push() already looked
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return held + text


@dataclass
class _Active:
    request: Request
    slot: int
    text: _RenderingStream
    usage: Usage


def _sampler_for(params: SamplingParams):
    seed = params.seed
    if seed is None:
        seed = random.SystemRandom().getrandbits(32)
    return _core.Sampler(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                         min_p=params.min_p, repeat_penalty=params.repeat_penalty,
                         presence_penalty=params.presence_penalty,
                         frequency_penalty=params.frequency_penalty,
                         penalty_last_n=params.penalty_last_n, seed=seed)


class BatchEngine:
    """Continuous batching over one LLM (see the module docstring). slots: sequences decoded
    together; n_ctx: positions of each slot (default llm.n_ctx); prefill_chunk: prompt tokens
    a step takes while others decode; max_queue: requests that may wait for a slot (None: no
    limit); sliding_rings: sliding-window layers keep rings instead of n_ctx rows (see the
    module docstring)."""

    def __init__(self, llm, slots: int = 4, n_ctx: Optional[int] = None,
                 prefill_chunk: int = DEFAULT_PREFILL_CHUNK, max_queue: Optional[int] = None,
                 sliding_rings: bool = False):
        self.llm = llm
        slots = _check_int("slots", slots, 1)
        n_ctx = llm.n_ctx if n_ctx is None else _check_int("n_ctx", n_ctx, 1)
        self.max_queue = _check_int("max_queue", max_queue, 0, allow_none=True)
        if not isinstance(sliding_rings, bool):
            raise ValueError(f"sliding_rings must be True or False, got {sliding_rings!r}")
        self._core = _core.BatchEngine(llm.model, slots, n_ctx,
                                       _check_int("prefill_chunk", prefill_chunk, 1),
                                       sliding_rings)
        self._tok = llm.tokenizer
        self._queue: Deque[Request] = collections.deque()
        self._active: Dict[int, _Active] = {}          # by slot
        self._ids = itertools.count(1)
        self._completed = 0
        self._eog: Optional[List[int]] = None   # the tokenizer's end-of-generation ids
        self._callback_errors: list = []        # (request, error) of on_event calls that raised

    # --- properties -----------------------------------------------------------------------
    @property
    def slots(self) -> int:
        return self._core.n_slots

    @property
    def n_ctx(self) -> int:
        return self._core.n_ctx

    @property
    def kv_pool_bytes(self) -> int:
        return self._core.kv_pool_bytes

    @property
    def sliding_rings(self) -> bool:
        return self._core.sliding_rings

    def kv_layer_rows(self, layer: int) -> int:
        """Rows each slot keeps for the layer: n_ctx, or (sliding_rings) a sliding layer's
        ring."""
        return self._core.kv_layer_rows(_check_int("layer", layer, 0))

    @property
    def waiting(self) -> int:
        """Queued requests that the free slots cannot take at the next step."""
        return max(0, len(self._queue) - (self.slots - self._core.n_active))

    @property
    def has_work(self) -> bool:
        return bool(self._queue or self._active)

    @property
    def stats(self) -> dict:
        """running, queued, slots_busy, slots, n_ctx (per slot), kv_pool_bytes, scratch_bytes
        (what the engine holds beyond weights and pool: step logits, sampler scratch, slot
        histories), forward_scratch_bytes (the row buffers of the model's forward pass that the
        steps share), completed, and
        the engine's counters: steps, rows, prompt_tokens, cached_tokens, prompt_cache_hits,
        generated_tokens; on a model opened on a GPU also seats: {"batch": {"served",
        "declined": {reason: n}, "uploads", "reason", "device_kv_bytes", ...}} (steps the
        device declined ran on the CPU; reason: why the last one was).
        """
        out = dict(running=len(self._active), queued=len(self._queue),
                   slots_busy=self._core.n_active, slots=self.slots, n_ctx=self.n_ctx,
                   kv_pool_bytes=self.kv_pool_bytes, scratch_bytes=self._core.scratch_bytes,
                   forward_scratch_bytes=self._core.forward_scratch_bytes,
                   completed=self._completed)
        out.update(self._core.stats)
        seats = self._core.seat_stats()
        if seats:
            out["seats"] = seats
        return out

    # --- requests -------------------------------------------------------------------------
    def new_id(self) -> int:
        return next(self._ids)

    def check(self, request: Request) -> None:
        """Raises ValueError / ShapeError naming what is wrong with the request (thread-safe:
        reads only the model's constants)."""
        from .errors import ShapeError
        ids = self.llm._check_ids(request.prompt)
        if len(ids) > self.n_ctx:
            raise ShapeError(f"the prompt has {len(ids)} tokens but a slot's context holds "
                             f"n_ctx={self.n_ctx}; shorten it or start the engine with a larger "
                             f"n_ctx")
        request.prompt = ids
        _check_int("max_tokens", request.max_tokens, 0, allow_none=True)
        stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or ())
        for s in stop:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop strings must be non-empty strings, got {s!r}")
        request.stop = stop
        if request.render_tokens:
            rendered = {}
            for token, text in dict(request.render_tokens).items():
                if (isinstance(token, bool) or not isinstance(token, (int, np.integer))
                        or not 0 <= token < self.llm.n_vocab):
                    raise ValueError(f"render_tokens: token {token!r} is outside the vocabulary "
                                     f"[0, {self.llm.n_vocab})")
                if not isinstance(text, str):
                    raise ValueError(f"render_tokens: the text of token {token} must be a "
                                     f"string, got {text!r}")
                rendered[int(token)] = text
            request.render_tokens = rendered
        if request.logprobs is not None:
            _check_int("logprobs", request.logprobs, 0)
            if request.logprobs > _core.MAX_TOP_LOGPROBS:
                raise ValueError(f"logprobs must be at most {_core.MAX_TOP_LOGPROBS}, got "
                                 f"{request.logprobs}")
        _sampler_for(request.sampling)   # ValueError naming a bad setting

    def submit(self, request: Request) -> int:
        """Queues a request (checked first) and returns its id. Raises QueueFull when max_queue
        requests already wait."""
        self.check(request)
        waiting = self.waiting
        if self.max_queue is not None and waiting >= self.max_queue:
            raise QueueFull(f"{waiting} requests are waiting for a slot (max_queue="
                            f"{self.max_queue})")
        return self._enqueue(request)

    def _enqueue(self, request: Request) -> int:
        """Queues a request already checked and counted against max_queue."""
        if request.id < 0:
            request.id = self.new_id()
        self._queue.append(request)
        return request.id

    def cancel(self, request_id: int) -> List[Event]:
        """Ends a queued or running request now (its slot is free for the next step); returns
        (and delivers) its "done" event with finish_reason "cancelled". Unknown ids: nothing."""
        for r in self._queue:
            if r.id == request_id:
                self._queue.remove(r)
                return self._emit([Event(r.id, "done", finish_reason="cancelled",
                                         usage=Usage(prompt_tokens=len(r.prompt)))], r)
        for a in list(self._active.values()):
            if a.request.id == request_id:
                return self._emit([self._finish(a, "cancelled")], a.request)
        return []

    # --- the step -------------------------------------------------------------------------
    def step(self) -> List[Event]:
        """Admits waiting requests into free slots, runs one forward step, and returns the
        events of this step (each also delivered to its request's on_event). An on_event that
        raises has its request cancelled; the step still finishes every other sequence's
        token, then raises the first such error."""
        self._callback_errors = []
        events = self._step()
        errors, self._callback_errors = self._callback_errors, []
        for request, _ in errors:
            request.on_event = None      # it failed once: no more calls into it
            self.cancel(request.id)
        if errors:
            raise errors[0][1]
        return events

    def _step(self) -> List[Event]:
        events = self._admit()
        if not self._active:
            return events
        try:
            sampled = self._core.step()
        except Exception as e:   # every running request fails; the engine stays usable
            for a in list(self._active.values()):
                events += self._emit([self._fail(a, e)], a.request)
            return events
        for slot, token, logprob, top, error in sampled:
            a = self._active[slot]
            if error is not None:   # its mask and bans left no token: it alone fails
                events += self._emit([self._fail(a, ValueError(error))], a.request)
                continue
            events += self._emit(self._on_token(a, token, logprob, top), a.request)
        return events

    def run(self) -> None:
        """Steps until every submitted request has finished."""
        while self.has_work:
            self.step()

    def close(self) -> None:
        """Cancels everything queued or running."""
        for r in list(self._queue):
            self.cancel(r.id)
        for a in list(self._active.values()):
            self.cancel(a.request.id)

    # --- internals ------------------------------------------------------------------------
    def _emit(self, events: List[Event], request: Request) -> List[Event]:
        if request.on_event is not None:
            for ev in events:
                try:
                    request.on_event(ev)
                except Exception as e:   # the caller's bug must not stall the other slots
                    self._callback_errors.append((request, e))
                    break
        return events

    def _admit(self) -> List[Event]:
        events: List[Event] = []
        while self._queue and self._core.n_active < self.slots:
            r = self._queue.popleft()
            if r.max_tokens == 0:   # nothing to generate (LLM.generate gives "" too)
                self._completed += 1
                events += self._emit([Event(r.id, "done", finish_reason="length",
                                            usage=Usage(prompt_tokens=len(r.prompt)))], r)
                continue
            top = -1 if r.logprobs is None else r.logprobs
            banned = self.eog_ids() + list(r.extra_eog) if r.ignore_eos else []
            try:
                slot, cached = self._core.start(r.prompt, _sampler_for(r.sampling), top, banned)
            except Exception as e:   # never lose a request: it ends with its error
                self._completed += 1
                events += self._emit([Event(r.id, "error", error=e,
                                            usage=Usage(prompt_tokens=len(r.prompt)))], r)
                continue
            a = _Active(r, slot, _RenderingStream(r.stop), Usage(len(r.prompt), cached, 0))
            self._active[slot] = a
            events += self._emit(self._set_mask(a), r)
        return events

    def eog_ids(self) -> List[int]:
        """The tokenizer's end-of-generation token ids (what ignore_eos bans); found once, by a
        walk over the vocabulary."""
        if self._eog is None:
            self._eog = [t for t in range(self._tok.n_vocab) if self._tok.is_eog(t)]
        return self._eog

    def _set_mask(self, a: _Active) -> List[Event]:
        """Hands the constraint's next mask to the slot; a constraint that fails (its matcher
        rejects, or its mask allows nothing) ends that request alone with an "error" event."""
        if a.request.constraint is None:
            return []
        try:
            mask = a.request.constraint.mask()
            if mask is not None:
                self._core.set_mask(a.slot, mask)
        except Exception as e:
            return [self._fail(a, e)]
        return []

    def _fail(self, a: _Active, error: BaseException) -> Event:
        self._core.finish(a.slot)
        del self._active[a.slot]
        self._completed += 1
        return Event(a.request.id, "error", error=error, usage=a.usage)

    def _finish(self, a: _Active, reason: str) -> Event:
        tail = a.text.push(b"", final=True) if reason != "cancelled" else ""
        self._core.finish(a.slot)
        del self._active[a.slot]
        self._completed += 1
        return Event(a.request.id, "done", text=tail, finish_reason=reason, usage=a.usage)

    def _on_token(self, a: _Active, token: int, logprob: float, top: list) -> List[Event]:
        """LLM._run's rules for one sampled token."""
        r, tok = a.request, self._tok
        if tok.is_eog(token) or token in r.extra_eog:
            return [self._finish(a, "eog")]
        a.usage.completion_tokens += 1
        if r.render_tokens and token in r.render_tokens:
            piece = a.text.push_rendered(r.render_tokens[token])
        else:
            piece = a.text.push(b"" if tok.is_control(token) else bytes(tok.piece(token)))
        ev = Event(r.id, "token", text=piece, token=token)
        if r.logprobs is not None:
            ev.logprob, ev.top_logprobs = float(logprob), [(int(t), float(p)) for t, p in top]
        out = [ev]
        constraint_done = False
        if r.constraint is not None:
            try:
                r.constraint.advance(token)
                constraint_done = r.constraint.is_done()
            except Exception as e:
                return out + [self._fail(a, e)]
        if a.text.stopped or constraint_done:
            out.append(self._finish(a, "stop"))
        elif r.max_tokens is not None and a.usage.completion_tokens >= r.max_tokens:
            out.append(self._finish(a, "length"))
        elif self._core.n_past(a.slot) >= self.n_ctx:
            out.append(self._finish(a, "context"))
        else:
            out += self._set_mask(a)
        return out


class EngineThread:
    """A BatchEngine stepping on a thread of its own while it has work. submit and cancel may
    be called from any thread; request.on_event runs on the engine thread (keep it short: hand
    the event to your own loop or queue)."""

    def __init__(self, engine: BatchEngine, name: str = "dasllama-engine"):
        self.engine = engine
        self._name = name
        self._cv = threading.Condition()
        self._inbox: Deque[Request] = collections.deque()
        # Requests the loop took from the inbox that the snapshot does not count yet: until the
        # step after them ends, they are queued only in the engine, which the snapshot predates.
        self._taken = 0
        self._cancels: List[int] = []
        self._stopping = False
        self._thread: Optional[threading.Thread] = None
        self._snapshot = engine.stats
        self.last_error: Optional[BaseException] = None

    def start(self) -> "EngineThread":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()
        return self

    def submit(self, request: Request) -> int:
        """Checks the request here (raising ValueError / ShapeError in the caller's thread),
        queues it for the engine and returns its id. QueueFull past the engine's max_queue."""
        self.engine.check(request)
        with self._cv:
            if self._stopping:
                raise RuntimeError("the engine thread is stopped")
            limit = self.engine.max_queue
            snap = self._snapshot
            free = snap["slots"] - snap["slots_busy"]
            waiting = max(0, self._queued_locked() - free)
            if limit is not None and waiting >= limit:
                raise QueueFull(f"{waiting} requests are waiting for a slot (max_queue={limit})")
            request.id = self.engine.new_id()
            self._inbox.append(request)
            self._cv.notify()
        return request.id

    def cancel(self, request_id: int) -> None:
        with self._cv:
            self._cancels.append(request_id)
            self._cv.notify()

    def _queued_locked(self) -> int:
        """Requests waiting for a slot as of the last step, plus those submitted since (the
        caller holds the condition's lock)."""
        return self._snapshot["queued"] + self._taken + len(self._inbox)

    @property
    def stats(self) -> dict:
        """The engine's stats as of its last step (queued includes requests submitted since)."""
        with self._cv:
            out = dict(self._snapshot)
            out["queued"] = self._queued_locked()
        return out

    def stop(self, timeout: Optional[float] = 30.0) -> None:
        """Cancels what is queued or running and ends the thread."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        engine = self.engine
        while True:
            with self._cv:
                while not (self._stopping or self._inbox or self._cancels or engine.has_work):
                    self._cv.wait()
                inbox, self._inbox = self._inbox, collections.deque()
                self._taken += len(inbox)
                cancels, self._cancels = self._cancels, []
                stopping = self._stopping
            for r in inbox:     # submit() checked each and counted it against max_queue
                engine._enqueue(r)
            for rid in cancels:
                engine.cancel(rid)
            if stopping:
                engine.close()
                break
            try:
                engine.step()
            except Exception as e:   # an on_event callback failed; keep serving the others
                self.last_error = e
            snapshot = engine.stats
            with self._cv:
                self._snapshot = snapshot
                self._taken = 0
