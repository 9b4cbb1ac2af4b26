"""POST /v1/completions: continue one or several prompts (strings or token ids), n choices
each, with echo and logprobs of the generated tokens."""

from __future__ import annotations

from typing import List

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from ..bridge import Job
from ..errors import APIError
from ..generation import (ChoiceResult, Generation, StreamChunks, admit, apply_event,
                          completion_logprobs, engine_requests, finish_reason, usage_of)
from ..schemas import Completion, CompletionRequest
from .common import check_token_ids, new_id, now, registry_of

router = APIRouter()


def _check_unsupported(body: CompletionRequest) -> None:
    if body.suffix:
        raise APIError(400, "suffix (fill-in-the-middle) is not supported by this server",
                       param="suffix", code="unsupported")
    if body.best_of is not None and body.best_of != body.n:
        raise APIError(400, "best_of other than n is not supported by this server",
                       param="best_of", code="unsupported")
    if body.logit_bias:
        raise APIError(400, "logit_bias is not supported by this server", param="logit_bias",
                       code="unsupported")
    if body.echo and body.logprobs is not None:
        raise APIError(400, "echo with logprobs (logprobs of the prompt's tokens) is not "
                            "supported by this server", param="echo", code="unsupported")


def _prompt_ids(llm, prompts: list) -> List[tuple]:
    """(token ids, prompt text) per prompt; 400 naming the prompt that is empty or holds a
    token outside the vocabulary."""
    out, n_vocab = [], llm.n_vocab
    for i, p in enumerate(prompts):
        where = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
        if isinstance(p, str):
            ids = llm.tokenize(p, add_special=True, parse_special=False)
            if not ids:
                raise APIError(400, f"{where} has no tokens", param=where, code="invalid_value")
            out.append((ids, p))
            continue
        check_token_ids(p, n_vocab, where)
        out.append((list(p), None))
    return out


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    entry = registry_of(request).resolve(body.model)
    _check_unsupported(body)

    async def prepare(loaded):
        """The engine requests, and per choice the echoed prompt text ("" without echo)."""
        llm = loaded.llm
        prompts = await run_in_threadpool(_prompt_ids, llm, body.prompts())
        requests, echoes = [], []
        for i, (ids, text) in enumerate(prompts):
            where = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
            max_tokens = admit(len(ids), loaded.n_ctx, body.max_tokens, where)
            requests += engine_requests(ids, body, n=body.n, max_tokens=max_tokens,
                                        stop=body.stop_list(), logprobs=body.logprobs)
            if body.echo:
                echo = text if text is not None else await run_in_threadpool(llm.detokenize, ids)
            else:
                echo = ""
            echoes += [echo] * body.n
        return requests, echoes

    generation, echoes = await Generation.start(request, entry, prepare)
    llm = generation.loaded.llm
    n_prompts = len(echoes) // body.n
    if body.stream:
        return generation.stream(_chunks(body, entry.name, llm, echoes, n_prompts,
                                         generation.job))
    results = await generation.collect(request, len(echoes))
    choices = []
    for i, r in enumerate(results):
        logprobs = (completion_logprobs(llm, r.tokens, body.logprobs, len(echoes[i]))
                    if body.logprobs is not None else None)
        choices.append({"index": i, "text": echoes[i] + r.text, "logprobs": logprobs,
                        "finish_reason": finish_reason(r.finish)})
    return Completion(id=new_id("cmpl"), created=now(), model=entry.name, choices=choices,
                      usage=usage_of(results, n_prompts, body.n))


async def _chunks(body: CompletionRequest, model: str, llm, echoes: list, n_prompts: int,
                  job: Job):
    out = StreamChunks("text_completion", "cmpl", model)
    results = [ChoiceResult() for _ in echoes]
    offsets = [len(e) for e in echoes]

    def text_chunk(index, text, logprobs=None, finish=None):
        return out.chunk([{"index": index, "text": text, "logprobs": logprobs,
                           "finish_reason": finish}])

    for i, echo in enumerate(echoes):
        if echo:
            yield text_chunk(i, echo)
    try:
        async for index, event in job.events():
            apply_event(results, index, event)
            logprobs = None
            if body.logprobs is not None and event.kind == "token" and event.logprob is not None:
                logprobs = completion_logprobs(llm, [results[index].tokens[-1]], body.logprobs,
                                               offsets[index])
                offsets[index] += len(logprobs["tokens"][0])
            if event.text or logprobs:
                yield text_chunk(index, event.text, logprobs)
            if event.kind == "done":
                yield text_chunk(index, "", finish=finish_reason(event.finish_reason))
    except APIError as e:     # an error event, or RequestTimeout
        job.cancel()
        yield out.error(e)
        return
    for tail in out.end(body, usage_of(results, n_prompts, body.n)):
        yield tail
