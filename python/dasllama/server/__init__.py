"""dasllama's OpenAI-compatible HTTP server (`dasllama serve`).

::

    from dasllama.server import ServerConfig, ModelSpec, create_app, run
    run(ServerConfig(models=[ModelSpec("smollm2", "smollm2")], parallel=4))   # blocks

    # or any ASGI host:
    app = create_app(ServerConfig(models=[ModelSpec("smollm2", "smollm2")]))

Routes: /health, /v1/models, /metrics, /tokenize, /detokenize, /v1/chat/completions,
/v1/completions (and the areas in dasllama.server.routers.OPTIONAL when present: embeddings,
/v1/audio/speech for TTS models, /v1/audio/transcriptions and /translations for ASR models,
``ModelSpec(name, source, kind="asr")``). Needs the `server` extra: ``pip install
'dasllama[server]'`` (the audio upload routes also need python-multipart).
"""

from __future__ import annotations

from .config import ModelSpec, ServerConfig

__all__ = ["create_app", "run", "ServerConfig", "ModelSpec"]

# Connections the kernel holds for the server before it accepts them (uvicorn's default).
LISTEN_BACKLOG = 2048
# On Ctrl-C or SIGTERM, running requests get this long to finish before they are cut (a long
# stream would otherwise hold the shutdown for as long as it generates).
GRACEFUL_SHUTDOWN_S = 5


def create_app(config=None, registry=None):
    """The ASGI app (see dasllama.server.app.create_app)."""
    from .app import create_app as _create_app
    return _create_app(config, registry)


def run(config: ServerConfig, log_level: str = "warning", access_log: bool = False,
        announce=None) -> None:
    """Serves config under uvicorn until interrupted. The socket is bound first, so port 0
    takes a free port; announce(url), when given, is called with the bound address's URL
    before the first request is accepted."""
    import socket

    import uvicorn

    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {config.host}:{config.port}: {e.strerror or e}") from e
    sock.listen(LISTEN_BACKLOG)   # connections wait from now on, even before uvicorn runs
    host, port = sock.getsockname()[:2]
    if announce is not None:
        announce(f"http://{'[' + host + ']' if ':' in host else host}:{port}")
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level=log_level,
                                           access_log=access_log, lifespan="on",
                                           timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
