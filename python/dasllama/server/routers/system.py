"""GET /health, GET /v1/models, GET /v1/models/{id}, GET /metrics, POST /tokenize,
POST /detokenize."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ..errors import APIError, error_body
from ..metrics import CONTENT_TYPE_LATEST
from ..schemas import (DetokenizeRequest, DetokenizeResponse, ModelCard, ModelList,
                       TokenizeRequest, TokenizeResponse)
from .common import check_token_ids, config_of, metrics_of, registry_of

router = APIRouter()


@router.get("/health")
async def health(request: Request):
    """200 {"status": "ok"} when every model is ready (or unloaded for keep-alive, which
    reloads on demand); 503 with the reason while one loads or after a load failed."""
    ready, reason = registry_of(request).health()
    if ready:
        return {"status": "ok"}
    body = error_body(reason, "unavailable_error", None, "not_ready")
    body["status"] = "loading" if reason.startswith("loading") else "error"
    return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})


def _card(entry, config) -> ModelCard:
    """A model's card; an LLM's context and slots as configured while it is not loaded."""
    loaded = entry.loaded if entry.state == "ready" else None
    n_ctx = getattr(loaded, "n_ctx", None)
    slots = getattr(loaded, "slots", None)
    if entry.kind == "llm":
        n_ctx = n_ctx or config.n_ctx_of(entry.spec)
        slots = slots or config.slots_of(entry.spec)
    return ModelCard(id=entry.name, created=entry.created, kind=entry.kind, status=entry.state,
                     n_ctx=n_ctx, slots=slots)


@router.get("/v1/models", response_model=ModelList)
async def list_models(request: Request):
    config = config_of(request)
    return ModelList(data=[_card(e, config) for e in registry_of(request).entries()])


@router.get("/v1/models/{model_id:path}", response_model=ModelCard)
async def get_model(model_id: str, request: Request):
    entry = registry_of(request).get(model_id)
    if entry is None:
        raise APIError(404, f"the model {model_id!r} does not exist on this server",
                       param="model", code="model_not_found")
    return _card(entry, config_of(request))


@router.get("/metrics")
async def metrics(request: Request):
    return Response(metrics_of(request).exposition(), media_type=CONTENT_TYPE_LATEST)


@router.post("/tokenize", response_model=TokenizeResponse)
async def tokenize(body: TokenizeRequest, request: Request):
    registry = registry_of(request)
    entry = registry.resolve(body.model)
    async with registry.lease(entry) as loaded:
        ids, tokens = await run_in_threadpool(_tokenize, loaded.llm, body)
        return TokenizeResponse(tokens=tokens, count=len(ids), max_model_len=loaded.n_ctx)


def _tokenize(llm, body: TokenizeRequest) -> tuple:
    """(ids, what the response lists: the ids, or with_pieces each id with its text). On a
    worker thread: a body of megabytes is a million tokens and as many pieces."""
    ids = llm.tokenize(body.content, body.add_special, body.parse_special)
    if not body.with_pieces:
        return ids, ids
    return ids, [{"id": t, "piece": bytes(llm.tokenizer.piece(t)).decode("utf-8", "replace")}
                 for t in ids]


@router.post("/detokenize", response_model=DetokenizeResponse)
async def detokenize(body: DetokenizeRequest, request: Request):
    registry = registry_of(request)
    entry = registry.resolve(body.model)
    async with registry.lease(entry) as loaded:
        check_token_ids(body.tokens, loaded.llm.n_vocab, "tokens", param_names_item=True)
        text = await run_in_threadpool(loaded.llm.detokenize, body.tokens)
        return DetokenizeResponse(content=text)
