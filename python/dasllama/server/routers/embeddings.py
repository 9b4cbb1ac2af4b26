"""POST /v1/embeddings: pooled final hidden states of one or several inputs (LLM.embed).

Inputs are strings or token-id lists. Each is pooled as the model's file says
(``{arch}.pooling_type``: mean, cls or last; mean when it names none, or names per-token
output, which has no single vector to answer with) and scaled to unit length, as OpenAI's
embeddings are. ``encoding_format`` "base64" is the little-endian float32 bytes of each vector
in base64 (what OpenAI answers, and what the ``openai`` SDK asks for by default).

The work runs on a worker thread, one input after another. LLM.embed runs the model under the
model's own lock over a scratch cache, so it never touches the batching engine's KV pool; the
engine's decode steps interleave with it between inputs.
"""

from __future__ import annotations

import base64
from typing import List, Literal, Optional, Union

import numpy as np
from fastapi import APIRouter, Request
from pydantic import Field, field_validator
from starlette.concurrency import run_in_threadpool

from ..errors import APIError
from ..schemas import _Strict, as_prompt_list, prompt_union
from .common import check_token_ids, registry_of

__all__ = ["router", "EmbeddingRequest", "MAX_EMBEDDING_INPUTS"]

router = APIRouter()

# Inputs per request, as OpenAI's API allows: each is a forward pass of its own.
MAX_EMBEDDING_INPUTS = 2048
# Poolings that give one vector per input; the file's other choices fall back to mean.
_VECTOR_POOLINGS = ("mean", "cls", "last")


EmbeddingInput = prompt_union("input")


class EmbeddingRequest(_Strict):
    """POST /v1/embeddings. dimensions: accepted only equal to the model's n_embd (this
    server does not shorten embeddings)."""
    model: Optional[str] = None
    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Optional[int] = Field(None, ge=1)
    user: Optional[str] = None

    @field_validator("input")
    @classmethod
    def _check_input(cls, v):
        if isinstance(v, list):
            if not v:
                raise ValueError("input is an empty list")
            if len(v) > MAX_EMBEDDING_INPUTS:
                raise ValueError(f"at most {MAX_EMBEDDING_INPUTS} inputs per request, "
                                 f"got {len(v)}")
        return v

    def inputs(self) -> list:
        """The inputs as a list, each a string or a list of token ids."""
        return as_prompt_list(self.input)


def _input_ids(llm, inputs: list, n_ctx: int) -> List[List[int]]:
    """Token ids per input; 400 naming the input that is empty, holds a token outside the
    vocabulary, or is longer than the context."""
    out, n_vocab = [], llm.n_vocab
    for i, item in enumerate(inputs):
        where = "input" if len(inputs) == 1 else f"input[{i}]"
        if isinstance(item, str):
            if not item:
                raise APIError(400, f"{where} is an empty string", param=where,
                               code="invalid_value")
            ids = llm.tokenize(item, add_special=True, parse_special=False)
            if not ids:
                raise APIError(400, f"{where} has no tokens", param=where, code="invalid_value")
        else:
            if not item:
                raise APIError(400, f"{where} is an empty token list", param=where,
                               code="invalid_value")
            check_token_ids(item, n_vocab, where)
            ids = list(item)
        if len(ids) > n_ctx:
            raise APIError(400, f"{where} has {len(ids)} tokens but the model's context holds "
                                f"{n_ctx} tokens (n_ctx); shorten it", param=where,
                           code="context_length_exceeded")
        out.append(ids)
    return out


def _pooling(llm) -> str:
    pooling = llm.pooling
    return pooling if pooling in _VECTOR_POOLINGS else "mean"


def _embed_all(llm, inputs: list) -> tuple:
    """(vectors, prompt tokens) for the inputs; runs on a worker thread."""
    ids = _input_ids(llm, inputs, llm.n_ctx)
    pooling = _pooling(llm)
    vectors = [llm.embed(x, pooling=pooling, normalize=True) for x in ids]
    return vectors, sum(len(x) for x in ids)


def _encode(vector: np.ndarray, encoding_format: str) -> Union[List[float], str]:
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector]


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingRequest, request: Request):
    registry = registry_of(request)
    entry = registry.resolve(body.model)
    async with registry.lease(entry) as loaded:
        llm = loaded.llm
        n_embd = int(llm.model.n_embd)
        if body.dimensions is not None and body.dimensions != n_embd:
            raise APIError(400, f"dimensions {body.dimensions} is not supported: the model "
                                f"{entry.name!r} gives embeddings of {n_embd} dimensions "
                                f"(n_embd), and this server does not shorten them",
                           param="dimensions", code="unsupported")
        vectors, n_tokens = await run_in_threadpool(_embed_all, llm, body.inputs())
    data = [{"object": "embedding", "index": i, "embedding": _encode(v, body.encoding_format)}
            for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "model": entry.name,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}
