"""POST /v1/chat/completions.

The flow: validate (schemas.ChatCompletionRequest) -> resolve the model -> ``prepare_chat``
(tool plan, template, tokens, admission, constraint: the one place a body becomes engine
requests) -> submit -> collect or stream -> ``finish_message`` / ``ReplyStream`` (the one place
generated text becomes the reply, where tool calls are parsed out).

Constrained output (``response_format`` json_object / json_schema) comes from dasllama.grammar,
tool calling (``tools``, ``tool_choice``) from dasllama.tools; without the llguidance package a
request that needs a constraint is a 400 (grammar's GrammarError), never silently ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from ... import grammar, tools
from ..bridge import Job
from ..errors import APIError
from ..generation import (ChoiceResult, Generation, StreamChunks, admit, apply_event,
                          chat_logprobs, engine_requests, finish_reason, usage_of)
from ..schemas import ChatCompletion, ChatCompletionRequest
from .common import new_id, now, registry_of

router = APIRouter()

# The field a dasllama.tools error message starts with (it names the field first).
_TOOL_FIELD = re.compile(r"^(tools(\[\d+\])?(\.\w+)*|tool_choice(\.\w+)*|parallel_tool_calls)")


@dataclass
class PreparedChat:
    """A chat request turned into engine requests: the n requests (whose render_tokens keep
    the tool format's markers in the reply), the tool plan (None without tools) that parses
    tool calls out of the reply, and the alternatives per token to report."""
    requests: list
    tool_plan: Any = None
    top_logprobs: int = 0


# --------------------------------------------------------------------------------------------
# Constrained decoding and tools
# --------------------------------------------------------------------------------------------
def _factory(make: Callable[[], Any], param: str) -> Callable[[], Any]:
    """A constraint factory: the first constraint is built now, so a grammar that cannot be
    enforced is a 400 before anything is submitted; later ones on demand."""
    try:
        first = [make()]
    except ValueError as e:
        raise APIError(400, f"{param}: {e}", param=param, code="invalid_" + param) from e

    def factory():
        return first.pop() if first else make()
    return factory


def _constraint_factory(body: ChatCompletionRequest, llm, extra_eog, plan
                        ) -> Optional[Callable]:
    """A function making one constraint per engine request (response_format, or a forced
    tool call), or None when the output is free text."""
    rf = body.response_format
    wants_format = rf is not None and rf.type != "text"
    forced = plan is not None and plan.choice in ("required", "function") and plan.tools
    if wants_format and forced:
        raise APIError(400, "response_format cannot be combined with a forced tool_choice",
                       param="response_format", code="unsupported")
    if forced:
        return _factory(lambda: plan.constraint(llm, extra_eog=extra_eog), "tool_choice")
    if not wants_format:
        return None
    spec = rf.model_dump(by_alias=True, exclude_none=True)
    return _factory(lambda: grammar.constraint_for_response_format(llm, spec,
                                                                   extra_eog=extra_eog),
                    "response_format")


def _tool_plan(body: ChatCompletionRequest, llm):
    """The dasllama.tools plan for body.tools / tool_choice; None when neither is given."""
    if not body.tools and body.tool_choice is None:
        return None
    choice = body.tool_choice
    if choice is not None and not isinstance(choice, str):
        choice = choice.model_dump(exclude_none=True)
    try:
        return tools.plan_tools(
            llm.chat_format,
            tools=[t.model_dump(exclude_none=True) for t in body.tools or []],
            tool_choice=choice,
            parallel_tool_calls=True if body.parallel_tool_calls is None
            else body.parallel_tool_calls)
    except ValueError as e:
        match = _TOOL_FIELD.match(str(e))
        raise APIError(400, str(e), param=match.group(0) if match else "tools",
                       code="invalid_tools") from e


def finish_message(text: str, plan) -> dict:
    """The reply's message from the generated text: tool calls parsed out into OpenAI
    tool_calls when the plan is active; plain content otherwise."""
    if plan is None or not plan.active:
        return {"role": "assistant", "content": text}
    content, calls = plan.parse(text)
    return {"role": "assistant", "content": content, "tool_calls": calls or None}


class ReplyStream:
    """One choice's text pieces in, its stream deltas out: a pass-through, or the tool plan's
    streaming parser (calls sent whole once complete)."""

    def __init__(self, plan):
        self._parser = plan.stream() if plan is not None and plan.active else None

    def push(self, text: str) -> List[dict]:
        if self._parser is None:
            return [{"content": text}] if text else []
        return self._parser.push(text) if text else []

    def finish(self) -> List[dict]:
        return self._parser.finish() if self._parser is not None else []

    @property
    def called_tools(self) -> bool:
        return self._parser is not None and self._parser.n_calls > 0


# --------------------------------------------------------------------------------------------
# Preparation
# --------------------------------------------------------------------------------------------
def _check_unsupported(body: ChatCompletionRequest) -> None:
    if body.logit_bias:
        raise APIError(400, "logit_bias is not supported by this server", param="logit_bias",
                       code="unsupported")


def _prepare_blocking(body: ChatCompletionRequest, loaded) -> PreparedChat:
    llm = loaded.llm
    messages = [m.for_template() for m in body.messages]
    plan = _tool_plan(body, llm)
    try:
        ids, extra_eog, text_stops = llm.chat_prompt(messages, tool_plan=plan)
    except ValueError as e:    # the template rejected the conversation
        raise APIError(400, f"messages: {e}", param="messages", code="invalid_messages") from e
    ids, extra_eog = list(ids), list(extra_eog)
    max_tokens = admit(len(ids), loaded.n_ctx, body.token_limit(), "messages")
    stops = body.stop_list() + list(text_stops)
    top = body.top_logprobs or 0
    factory = _constraint_factory(body, llm, extra_eog, plan)
    rendered = plan.rendered_tokens(llm) if plan is not None else None
    requests = engine_requests(ids, body, n=body.n, max_tokens=max_tokens, stop=stops,
                               extra_eog=extra_eog, logprobs=top if body.logprobs else None,
                               constraint_factory=factory, render_tokens=rendered)
    return PreparedChat(requests, plan, top)


async def prepare_chat(body: ChatCompletionRequest, loaded) -> PreparedChat:
    """Everything between a validated body and engine requests: the tool plan, the chat
    template, tokens, admission against the context, sampling, stops and the constraint. On a
    worker thread: templates, tokenizing and grammars take time."""
    return await run_in_threadpool(_prepare_blocking, body, loaded)


# --------------------------------------------------------------------------------------------
# The route
# --------------------------------------------------------------------------------------------
@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request):
    entry = registry_of(request).resolve(body.model)
    _check_unsupported(body)

    async def prepare(loaded):
        prepared = await prepare_chat(body, loaded)
        return prepared.requests, prepared

    generation, prepared = await Generation.start(request, entry, prepare)
    llm = generation.loaded.llm
    if body.stream:
        return generation.stream(_chunks(body, entry.name, llm, prepared, generation.job))
    results = await generation.collect(request, body.n)
    choices = []
    for i, r in enumerate(results):
        logprobs = ({"content": chat_logprobs(llm, r.tokens, prepared.top_logprobs)}
                    if body.logprobs else None)
        message = finish_message(r.text, prepared.tool_plan)
        reason = "tool_calls" if message.get("tool_calls") else finish_reason(r.finish)
        choices.append({"index": i, "message": message, "logprobs": logprobs,
                        "finish_reason": reason})
    return ChatCompletion(id=new_id("chatcmpl"), created=now(), model=entry.name,
                          choices=choices, usage=usage_of(results, 1, body.n))


async def _chunks(body: ChatCompletionRequest, model: str, llm, prepared: PreparedChat,
                  job: Job):
    """The SSE stream: a role chunk per choice, deltas (content, or tool calls once whole;
    logprobs when asked), a finish chunk per choice, a usage chunk
    (stream_options.include_usage), then [DONE]."""
    out = StreamChunks("chat.completion.chunk", "chatcmpl", model)
    results = [ChoiceResult() for _ in range(body.n)]
    replies = [ReplyStream(prepared.tool_plan) for _ in range(body.n)]

    def delta_chunk(index, delta, logprobs=None, finish=None):
        return out.chunk([{"index": index, "delta": delta, "logprobs": logprobs,
                           "finish_reason": finish}])

    for i in range(body.n):
        yield delta_chunk(i, {"role": "assistant", "content": ""})
    try:
        async for index, event in job.events():
            apply_event(results, index, event)
            logprobs = None
            if body.logprobs and event.kind == "token" and event.logprob is not None:
                logprobs = {"content": chat_logprobs(llm, [results[index].tokens[-1]],
                                                     prepared.top_logprobs)}
            deltas = replies[index].push(event.text)
            if event.kind == "done":
                deltas += replies[index].finish()
            if logprobs is not None and not deltas:
                deltas = [{}]     # the token's logprobs go out even while its text waits
            for k, delta in enumerate(deltas):
                yield delta_chunk(index, delta, logprobs if k == 0 else None)
            if event.kind == "done":
                reason = ("tool_calls" if replies[index].called_tools
                          else finish_reason(event.finish_reason))
                yield delta_chunk(index, {}, finish=reason)
    except APIError as e:     # an error event, or RequestTimeout
        job.cancel()
        yield out.error(e)
        return
    for tail in out.end(body, usage_of(results, 1, body.n)):
        yield tail
