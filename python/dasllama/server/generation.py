"""What chat and completions share: engine requests from a validated body, prompt admission
against the context, running a Job to the end or as a stream, and token logprobs.

A route handler resolves the model, then ``Generation.start()`` takes a lease on it and runs the
route's prepare(loaded): turn the body into token ids, ``admit()`` the prompt (400 when it
cannot fit, max_tokens capped by the context), ``engine_requests()``; the requests are then
submitted as one Job (503 when the queue is full). ``Generation.collect()`` gives a plain
response's results, ``Generation.stream()`` the response over the route's chunk generator.
The lease and the job are released by whichever of these ends the request.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

from ..batch import Constraint, Event, Request, SamplingParams, Usage
from .bridge import SSE_DONE, Job, WatchedStreamingResponse, sse, watch_disconnect
from .errors import APIError
from .routers.common import config_of, metrics_of, new_id, now, registry_of

__all__ = ["ChoiceResult", "Generation", "StreamChunks", "admit", "sampling_params", "engine_requests",
           "EventStreamResponse", "token_text", "finish_reason", "usage_of",
           "SSE_HEADERS"]

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class ChoiceResult:
    """One choice as it accumulates: text, finish reason, usage, and per token (when logprobs
    were asked for) (token id, logprob, [(id, logprob)] alternatives)."""
    text_parts: List[str] = field(default_factory=list)
    finish: Optional[str] = None
    usage: Optional[Usage] = None
    tokens: List[tuple] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)


def admit(n_prompt: int, n_ctx: int, max_tokens: Optional[int], param: str) -> int:
    """The max_tokens to run with: at most what the context leaves after the prompt. A prompt
    that leaves no room (or, for max_tokens 0, does not fit at all) is a 400 naming both
    counts."""
    room = n_ctx - n_prompt
    if room < 0 or (room == 0 and max_tokens != 0):
        raise APIError(400, f"the prompt has {n_prompt} tokens but the model's context holds "
                            f"{n_ctx} tokens (n_ctx), which leaves no room to generate; shorten "
                            f"the {param}", param=param, code="context_length_exceeded")
    return room if max_tokens is None else min(max_tokens, room)


def sampling_params(body, seed_offset: int = 0) -> SamplingParams:
    """SamplingParams from a body's sampling fields; unset ones keep the engine's defaults.
    Choice i of a seeded request uses seed + i, so choices differ and each is reproducible."""
    p = SamplingParams()
    for name, value in (("temperature", body.temperature), ("top_p", body.top_p),
                        ("top_k", body.top_k), ("min_p", body.min_p),
                        ("presence_penalty", body.presence_penalty),
                        ("frequency_penalty", body.frequency_penalty),
                        ("repeat_penalty", body.repetition_penalty)):
        if value is not None:
            setattr(p, name, value)
    if body.seed is not None:
        p.seed = body.seed + seed_offset
    return p


def engine_requests(ids: Sequence[int], body, *, n: int, max_tokens: int,
                    stop: Sequence[str], extra_eog: Sequence[int] = (),
                    logprobs: Optional[int] = None,
                    constraint_factory: Optional[Callable[[], Optional[Constraint]]] = None,
                    render_tokens: Optional[Dict[int, str]] = None) -> List[Request]:
    """n engine requests for one prompt (choice i seeded seed + i). constraint_factory makes
    one constraint per request (a constraint follows one sequence). render_tokens: the control
    tokens whose text the reply keeps (Request.render_tokens: a tool format's markers)."""
    out = []
    for i in range(n):
        out.append(Request(prompt=list(ids), max_tokens=max_tokens,
                           sampling=sampling_params(body, i), stop=list(stop),
                           extra_eog=list(extra_eog), logprobs=logprobs,
                           ignore_eos=bool(body.ignore_eos),
                           constraint=constraint_factory() if constraint_factory else None,
                           render_tokens=dict(render_tokens) if render_tokens else None))
    return out


def finish_reason(engine_reason: Optional[str]) -> Optional[str]:
    """OpenAI's finish_reason for the engine's: a full context is a length stop."""
    return {"eog": "stop", "stop": "stop", "length": "length", "context": "length",
            "cancelled": "stop"}.get(engine_reason, engine_reason)


def usage_of(results: Sequence[ChoiceResult], n_prompts: int = 1, n: int = 1) -> dict:
    """Usage over choices: each distinct prompt counted once (its n choices share it), cached
    tokens the fewest any choice of a prompt reused (not to overstate the reuse)."""
    prompt = cached = completion = 0
    for p in range(n_prompts):
        group = results[p * n:(p + 1) * n]
        usages = [r.usage for r in group if r.usage is not None]
        if usages:
            prompt += usages[0].prompt_tokens
            cached += min(u.cached_tokens for u in usages)
        completion += sum(u.completion_tokens for u in usages)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _raise_event_error(event: Event) -> None:
    err = event.error
    if isinstance(err, APIError):
        raise err
    if isinstance(err, ValueError):
        raise APIError(400, str(err), code="invalid_value")
    raise APIError(500, f"generation failed: {type(err).__name__}: {err}",
                   code="generation_failed")


def apply_event(results: List[ChoiceResult], index: int, event: Event) -> None:
    """Adds one event to results[index] (raises APIError for an "error" event). A tool
    format's markers are in the event's text already (Request.render_tokens)."""
    r = results[index]
    if event.kind == "error":
        _raise_event_error(event)
    text = event.text
    if text:
        r.text_parts.append(text)
    if event.kind == "token" and event.logprob is not None:
        r.tokens.append((event.token, event.logprob, list(event.top_logprobs or [])))
    if event.kind == "done":
        r.finish = event.finish_reason
        r.usage = event.usage


class Generation:
    """One HTTP request's generation: the lease on its model, the loaded model and the Job of
    its engine requests (see the module docstring)."""

    def __init__(self, lease, loaded, job: Job):
        self.lease = lease
        self.loaded = loaded
        self.job = job

    @classmethod
    async def start(cls, http_request, entry,
                    prepare: Callable[[Any], Awaitable[Tuple[List[Request], Any]]]
                    ) -> Tuple["Generation", Any]:
        """Leases entry's model, runs prepare(loaded) -> (engine requests, what the route
        keeps) and submits the requests; returns the Generation and what prepare kept. On any
        failure the lease is released before the error propagates."""
        lease = registry_of(http_request).lease(entry)
        loaded = await lease.__aenter__()
        try:
            requests, kept = await prepare(loaded)
            metrics = metrics_of(http_request)
            job = Job(loaded.thread, config_of(http_request).request_timeout,
                      on_first_token=lambda s: metrics.observe_ttft(entry.name, s))
            job.submit(requests)
        except BaseException:
            lease.release()
            raise
        return cls(lease, loaded, job), kept

    def _end(self) -> None:
        self.job.cancel()
        self.lease.release()

    async def collect(self, http_request, n_choices: int) -> List[ChoiceResult]:
        """Runs the job to its end and returns each choice's result. A client that
        disconnects meanwhile cancels the job (its slots free at the next step)."""
        results = [ChoiceResult() for _ in range(n_choices)]
        watcher = asyncio.ensure_future(watch_disconnect(http_request.receive, self.job.cancel))
        try:
            async for index, event in self.job.events():
                apply_event(results, index, event)
        finally:
            watcher.cancel()
            self._end()
        return results

    def stream(self, chunks: AsyncIterator[bytes]) -> "EventStreamResponse":
        """The server-sent event response over chunks (a generator reading self.job)."""
        return EventStreamResponse(chunks, cleanup=self._end, on_disconnect=self.job.cancel)


class StreamChunks:
    """The events of one streamed response: chunks of {id, object, created, model, choices[,
    usage]} (id and created shared by the whole stream), then the end: a usage chunk when
    stream_options.include_usage asks, and [DONE]; or, for a stream that fails, its error."""

    def __init__(self, object_name: str, id_prefix: str, model: str):
        self._head = {"id": new_id(id_prefix), "object": object_name, "created": now(),
                      "model": model}

    def chunk(self, choices: list, usage: Optional[dict] = None) -> bytes:
        payload = {**self._head, "choices": choices}
        if usage is not None:
            payload["usage"] = usage
        return sse(json.dumps(payload, ensure_ascii=False))

    def end(self, body, usage: dict) -> List[bytes]:
        """The events after the last choice's finish chunk."""
        wants_usage = body.stream_options is not None and body.stream_options.include_usage
        return ([self.chunk([], usage=usage)] if wants_usage else []) + [SSE_DONE]

    @staticmethod
    def error(error: APIError) -> bytes:
        """The event that ends a failed stream: the error in the OpenAI shape."""
        return sse(json.dumps(error.body()))


class EventStreamResponse(WatchedStreamingResponse):
    """A server-sent event stream (see bridge.WatchedStreamingResponse for its cleanup)."""

    def __init__(self, chunks: AsyncIterator[bytes], cleanup: Callable[[], None],
                 on_disconnect: Callable[[], None]):
        super().__init__(chunks, cleanup, on_disconnect, media_type="text/event-stream",
                         headers=SSE_HEADERS)


def token_text(llm, token: int) -> tuple:
    """(text, bytes) of one token for logprobs: its piece, invalid UTF-8 replaced."""
    try:
        raw = bytes(llm.tokenizer.piece(int(token)))
    except Exception:
        raw = b""
    return raw.decode("utf-8", errors="replace"), list(raw)


def chat_logprobs(llm, tokens: Sequence[tuple], top_n: int) -> List[dict]:
    """OpenAI chat logprobs entries for (token, logprob, alternatives) tuples."""
    out = []
    for token, logprob, alternatives in tokens:
        text, raw = token_text(llm, token)
        top = []
        for alt, alt_lp in alternatives[:top_n]:
            alt_text, alt_raw = token_text(llm, alt)
            top.append({"token": alt_text, "logprob": float(alt_lp), "bytes": alt_raw})
        out.append({"token": text, "logprob": float(logprob), "bytes": raw,
                    "top_logprobs": top})
    return out


def completion_logprobs(llm, tokens: Sequence[tuple], top_n: int, offset: int) -> dict:
    """OpenAI (legacy) completions logprobs for (token, logprob, alternatives) tuples;
    offset: where the first token's text starts in the choice's text."""
    out: dict = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for token, logprob, alternatives in tokens:
        text, _ = token_text(llm, token)
        out["tokens"].append(text)
        out["token_logprobs"].append(float(logprob))
        top: dict = {}
        for alt, alt_lp in alternatives[:top_n]:   # most probable first: keep the first of
            top.setdefault(token_text(llm, alt)[0], float(alt_lp))   # tokens alike as text
        out["top_logprobs"].append(top)
        out["text_offset"].append(offset)
        offset += len(text)
    return out
