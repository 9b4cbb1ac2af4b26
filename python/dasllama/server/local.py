"""A server on a background thread, for notebooks, scripts and tests::

    from dasllama.server import ServerConfig, ModelSpec
    from dasllama.server.local import BackgroundServer
    with BackgroundServer(ServerConfig(models=[ModelSpec("smollm2", "smollm2")])) as srv:
        print(srv.url)      # http://127.0.0.1:PORT, a free port picked by the system
        srv.wait_ready()    # returns once every model has loaded

The socket is bound before the thread starts (no race for the port); leaving the block stops
the server and closes its models.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Optional

from . import GRACEFUL_SHUTDOWN_S
from .app import create_app
from .config import ServerConfig

__all__ = ["BackgroundServer"]

# Longest wait for uvicorn to come up or go down: startup is a few imports and a bind.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class BackgroundServer:
    """Runs create_app(config) under uvicorn on a thread (see the module docstring).
    config.host and config.port pick the address; port 0 takes a free one."""

    def __init__(self, config: ServerConfig, log_level: str = "warning"):
        import uvicorn

        self.config = config
        self.app = create_app(config)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((config.host, config.port))
        self.host, self.port = self._sock.getsockname()[:2]
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level=log_level,
                                                     access_log=False, lifespan="on",
                                                     timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S))
        self._thread: Optional[threading.Thread] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def registry(self):
        return self.app.state.registry

    def start(self) -> "BackgroundServer":
        def serve():
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._server.serve(sockets=[self._sock]))
            finally:
                loop.close()

        self._thread = threading.Thread(target=serve, name="dasllama-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server thread ended during startup (see its log)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not start within {START_TIMEOUT_S:g} s")
            time.sleep(0.01)
        return self

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Blocks until the loads begun at startup have finished (a failed load included:
        check /health)."""
        future = asyncio.run_coroutine_threadsafe(self.registry.wait_loaded(), self._loop)
        future.result(timeout)

    def call(self, coroutine, timeout: float = 60.0):
        """Runs a coroutine on the server's loop and returns its result (e.g. an unload)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def stop(self) -> None:
        if self._thread is None:
            self._sock.close()
            return
        self._server.should_exit = True
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(STOP_TIMEOUT_S)
        self._thread = None
        self._sock.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
