"""The app factory: one ASGI app, the same under uvicorn (`dasllama serve`) and other ASGI
hosts.

Middleware, outermost first: request metrics; CORS (only with cors_origins); API-key auth
(only with api_key; /health stays open); the body limit (max_body_bytes; max_upload_bytes
on the routes that take audio files). Then the routers
(dasllama.server.routers) and the error handlers that answer every failure in the OpenAI
shape. ``app.state`` holds config, registry (the models) and metrics.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Optional

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from .. import __version__
from .config import ServerConfig
from .errors import install_error_handlers
from .metrics import ServerMetrics
from .middleware import AuthMiddleware, BodyLimitMiddleware, MetricsMiddleware
from .registry import ModelRegistry
from .routers import include_routers
from .routers.transcription import UPLOAD_PATHS

__all__ = ["create_app"]


def create_app(config: Optional[ServerConfig] = None,
               registry: Optional[ModelRegistry] = None) -> FastAPI:
    """The server's ASGI app for config (its models load when the app starts, in the
    background: /health answers 503 until they are ready). registry: a ModelRegistry to use
    instead of one made from config.models."""
    config = config or ServerConfig()
    registry = registry or ModelRegistry(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await registry.start()
        try:
            yield
        finally:
            await registry.close()

    app = FastAPI(title="dasllama", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.state.config = config
    app.state.registry = registry
    app.state.metrics = ServerMetrics(registry)
    install_error_handlers(app)
    include_routers(app)

    # add_middleware puts each one outside the ones before it: innermost first.
    app.add_middleware(BodyLimitMiddleware, max_bytes=config.max_body_bytes,
                       path_limits={path: config.max_upload_bytes for path in UPLOAD_PATHS})
    if config.api_key:
        app.add_middleware(AuthMiddleware, api_key=config.api_key)
    if config.cors_origins:
        origins = list(config.cors_origins)
        app.add_middleware(CORSMiddleware, allow_origins=origins,
                           allow_methods=["GET", "POST", "OPTIONS"],
                           allow_headers=["Authorization", "Content-Type"],
                           allow_credentials="*" not in origins)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    return app
