"""dasllama's OpenAI-compatible HTTP server (`dasllama serve`).

::

    from dasllama.server import ServerConfig, ModelSpec, create_app, run
    run(ServerConfig(models=[ModelSpec("smollm2", "smollm2")], parallel=4))   # blocks

    # or any ASGI host:
    app = create_app(ServerConfig(models=[ModelSpec("smollm2", "smollm2")]))

Routes: /health, /v1/models, /metrics, /tokenize, /detokenize, /v1/chat/completions,
/v1/completions (and the areas in dasllama.server.routers.OPTIONAL when present). Needs the
`server` extra: ``pip install 'dasllama[server]'``.
"""

from __future__ import annotations

from .config import ModelSpec, ServerConfig

__all__ = ["create_app", "run", "ServerConfig", "ModelSpec"]


def create_app(config=None, registry=None):
    """The ASGI app (see dasllama.server.app.create_app)."""
    from .app import create_app as _create_app
    return _create_app(config, registry)


def run(config: ServerConfig, log_level: str = "warning", access_log: bool = False) -> None:
    """Serves config under uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(config), host=config.host, port=config.port, log_level=log_level,
                access_log=access_log, lifespan="on")
