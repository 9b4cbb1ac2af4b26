"""POST /v1/chat/completions.

The flow: validate (schemas.ChatCompletionRequest) -> resolve the model -> ``prepare_chat``
(template, tokens, admission, constraint: the one place a body becomes engine requests) ->
submit -> collect or stream -> ``finish_message`` (the one place generated text becomes the
reply's message, where tool calls are parsed out).

Constrained output (``response_format`` json_object / json_schema) comes from dasllama.grammar;
tool calling (``tools``) is the hook ``_tool_plan`` / ``finish_message``, served once
dasllama.tools provides it. Until a hook is served, a request that needs it is a 400: never
silently ignored.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from ..bridge import SSE_DONE, Job, RequestTimeout, sse
from ..errors import APIError
from ..generation import (ChoiceResult, EventStreamResponse, admit, apply_event,
                          chat_logprobs, collect, engine_requests, finish_reason, usage_of)
from ..schemas import ChatCompletion, ChatCompletionRequest
from .common import config_of, metrics_of, new_id, now, registry_of

router = APIRouter()


@dataclass
class PreparedChat:
    """A chat request turned into engine requests: the prompt, its stops, the n requests, and
    (when tools are in play) the plan that parses tool calls out of the reply."""
    ids: List[int]
    extra_eog: List[int]
    stops: List[str]
    max_tokens: int
    requests: list
    tool_plan: Any = None
    top_logprobs: int = 0


# --------------------------------------------------------------------------------------------
# Hooks: constrained decoding and tools
# --------------------------------------------------------------------------------------------
def _optional_module(name: str):
    """dasllama.<name> if it is part of this install, else None."""
    qualified = f"dasllama.{name}"
    if importlib.util.find_spec(qualified) is None:
        return None
    return importlib.import_module(qualified)


def _constraint_factory(body: ChatCompletionRequest, llm, extra_eog) -> Optional[Callable]:
    """A function making one constraint per engine request for body.response_format, or None
    when the output is free text. 400 for a format that cannot be enforced."""
    rf = body.response_format
    if rf is None or rf.type == "text":
        return None
    grammar = _optional_module("grammar")
    if grammar is None or not hasattr(grammar, "constraint_for_response_format"):
        raise APIError(400, f"response_format {rf.type!r} is not supported by this server "
                            f"(no constrained decoding in this install)",
                       param="response_format", code="unsupported")
    spec = rf.model_dump(by_alias=True, exclude_none=True)
    try:
        grammar.check_response_format(spec)
        # Built once now so an unenforceable schema is a 400 before anything is submitted.
        first = [grammar.constraint_for_response_format(llm, spec, extra_eog=extra_eog)]
    except ValueError as e:
        raise APIError(400, f"response_format: {e}", param="response_format",
                       code="invalid_response_format") from e

    def make():
        if first:
            return first.pop()
        return grammar.constraint_for_response_format(llm, spec, extra_eog=extra_eog)
    return make


def _tool_plan(body: ChatCompletionRequest, llm):
    """Hook for tool calling: how the tools are rendered and how calls are parsed back.
    Served when dasllama.tools provides it; until then a request with tools is a 400."""
    if not body.tools:
        return None
    raise APIError(400, "tools are not supported by this server yet", param="tools",
                   code="unsupported")


def finish_message(text: str, plan) -> dict:
    """The reply's message from the generated text: where tool calls are parsed out (plan
    set) into OpenAI tool_calls; plain content otherwise."""
    return {"role": "assistant", "content": text}


# --------------------------------------------------------------------------------------------
# Preparation
# --------------------------------------------------------------------------------------------
def _check_unsupported(body: ChatCompletionRequest) -> None:
    if body.logit_bias:
        raise APIError(400, "logit_bias is not supported by this server", param="logit_bias",
                       code="unsupported")


async def prepare_chat(body: ChatCompletionRequest, loaded) -> PreparedChat:
    """Everything between a validated body and engine requests: the chat template, tokens,
    admission against the context, sampling, stops and the constraint."""
    llm = loaded.llm
    messages = [m.for_template() for m in body.messages]
    plan = _tool_plan(body, llm)
    try:
        ids, extra_eog, text_stops = await run_in_threadpool(llm.chat_prompt, messages)
    except ValueError as e:    # the template rejected the conversation
        raise APIError(400, f"messages: {e}", param="messages", code="invalid_messages") from e
    ids, extra_eog = list(ids), list(extra_eog)
    max_tokens = admit(len(ids), loaded.n_ctx, body.token_limit(), "messages")
    stops = body.stop_list() + list(text_stops)
    top = body.top_logprobs or 0
    factory = await run_in_threadpool(_constraint_factory, body, llm, extra_eog)
    requests = engine_requests(ids, body, loaded, n=body.n, max_tokens=max_tokens, stop=stops,
                               extra_eog=extra_eog, logprobs=top if body.logprobs else None,
                               constraint_factory=factory)
    return PreparedChat(ids, extra_eog, stops, max_tokens, requests, plan, top)


# --------------------------------------------------------------------------------------------
# The route
# --------------------------------------------------------------------------------------------
@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request):
    registry = registry_of(request)
    entry = registry.resolve(body.model)
    _check_unsupported(body)
    lease = registry.lease(entry)
    loaded = await lease.__aenter__()
    try:
        prepared = await prepare_chat(body, loaded)
        job = Job(loaded.thread, config_of(request).request_timeout)
        job.submit(prepared.requests)
    except BaseException:
        lease.release()
        raise
    observe = lambda s: metrics_of(request).observe_ttft(entry.name, s)  # noqa: E731
    if body.stream:
        def cleanup():
            job.cancel()
            lease.release()
        return EventStreamResponse(_chunks(body, entry.name, loaded.llm, prepared, job, observe),
                                   cleanup=cleanup, on_disconnect=job.cancel)
    try:
        results = await collect(job, request, body.n, observe)
    finally:
        lease.release()
    choices = []
    for i, r in enumerate(results):
        logprobs = ({"content": chat_logprobs(loaded.llm, r.tokens, prepared.top_logprobs)}
                    if body.logprobs else None)
        message = finish_message(r.text, prepared.tool_plan)
        reason = "tool_calls" if message.get("tool_calls") else finish_reason(r.finish)
        choices.append({"index": i, "message": message, "logprobs": logprobs,
                        "finish_reason": reason})
    return ChatCompletion(id=new_id("chatcmpl"), created=now(), model=entry.name,
                          choices=choices, usage=usage_of(results, 1, body.n))


def _chunk(cid: str, created: int, model: str, choices: list, usage=None) -> bytes:
    payload = {"id": cid, "object": "chat.completion.chunk", "created": created,
               "model": model, "choices": choices}
    if usage is not None:
        payload["usage"] = usage
    return sse(json.dumps(payload, ensure_ascii=False))


async def _chunks(body: ChatCompletionRequest, model: str, llm, prepared: PreparedChat,
                  job: Job, observe):
    """The SSE stream: a role chunk per choice, content deltas (with logprobs when asked),
    a finish chunk per choice, a usage chunk (stream_options.include_usage), [DONE]."""
    cid, created = new_id("chatcmpl"), now()
    results = [ChoiceResult() for _ in range(body.n)]
    for i in range(body.n):
        yield _chunk(cid, created, model, [{"index": i, "delta": {"role": "assistant",
                                                                  "content": ""},
                                            "logprobs": None, "finish_reason": None}])
    reported = False
    try:
        async for index, event in job.events():
            if not reported and job.first_token_at is not None:
                reported = True
                observe(job.first_token_at - job.started)
            apply_event(results, index, event)
            logprobs = None
            if body.logprobs and event.kind == "token" and event.logprob is not None:
                logprobs = {"content": chat_logprobs(llm, [results[index].tokens[-1]],
                                                     prepared.top_logprobs)}
            if event.text or logprobs:
                yield _chunk(cid, created, model, [{"index": index,
                                                    "delta": {"content": event.text},
                                                    "logprobs": logprobs,
                                                    "finish_reason": None}])
            if event.kind == "done":
                yield _chunk(cid, created, model, [{"index": index, "delta": {},
                                                    "logprobs": None,
                                                    "finish_reason": finish_reason(
                                                        event.finish_reason)}])
    except (APIError, RequestTimeout) as e:
        job.cancel()
        yield sse(json.dumps(e.body()))
        return
    if body.stream_options is not None and body.stream_options.include_usage:
        yield _chunk(cid, created, model, [], usage=usage_of(results, 1, body.n))
    yield SSE_DONE
