"""From the engine thread to the event loop: the engine requests of one HTTP request.

The EngineThread calls each Request's on_event on its own thread. A :class:`Job` forwards
those events to an asyncio.Queue on the server's loop with ``loop.call_soon_threadsafe``, so
route handlers read them with ``await``; each event is tagged with the index of the choice it
belongs to (a request with n choices is n engine requests). ``Job.cancel()`` cancels every
request still running, which frees their slots at the engine's next step; a handler calls it
when the client disconnects, when the request times out, and whenever it stops reading.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, List, Optional, Sequence, Tuple

from ..batch import Event, QueueFull, Request
from .errors import APIError

__all__ = ["Job", "RequestTimeout", "watch_disconnect", "sse", "SSE_DONE", "RETRY_AFTER_S"]

# The Retry-After a full queue answers with: about one short request's time on a busy server.
RETRY_AFTER_S = 1

SSE_DONE = b"data: [DONE]\n\n"


def sse(payload: str) -> bytes:
    """One server-sent event carrying a JSON text."""
    return f"data: {payload}\n\n".encode("utf-8")


class RequestTimeout(APIError):
    def __init__(self, seconds: float):
        super().__init__(504, f"the request took longer than the server's timeout of "
                              f"{seconds:g} s and was cancelled", code="timeout")


class Job:
    """The engine requests behind one HTTP request (see the module docstring).

    thread: the model's EngineThread. timeout: seconds from now after which events() cancels
    everything and raises RequestTimeout."""

    def __init__(self, thread, timeout: float):
        self._thread = thread
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._timeout = timeout
        self._deadline = self._loop.time() + timeout
        self._ids: List[int] = []
        self._open: set = set()
        self.started = time.perf_counter()
        self.first_token_at: Optional[float] = None
        self.cancelled = False

    def _forward(self, index: int):
        loop, queue = self._loop, self._queue

        def on_event(event: Event) -> None:      # runs on the engine thread
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (index, event))
            except RuntimeError:
                pass    # the loop is closed: the server is shutting down, nobody reads
        return on_event

    def submit(self, requests: Sequence[Request]) -> None:
        """Submits every request, or none: when the engine's queue is full part way, the ones
        already submitted are cancelled and the client gets 503 with Retry-After."""
        try:
            for index, request in enumerate(requests):
                request.on_event = self._forward(index)
                rid = self._thread.submit(request)
                self._ids.append(rid)
                self._open.add(index)
        except QueueFull as e:
            self.cancel()
            raise APIError(503, f"the server is busy: {e}; retry after {RETRY_AFTER_S} s",
                           code="queue_full",
                           headers={"Retry-After": str(RETRY_AFTER_S)}) from e
        except ValueError as e:    # the engine's own checks (prompt, stops, sampling)
            self.cancel()
            raise APIError(400, str(e), code="invalid_value") from e
        except RuntimeError as e:  # the engine thread is stopping: the server shuts down
            self.cancel()
            raise APIError(503, f"the model is shutting down: {e}", code="shutting_down",
                           headers={"Retry-After": str(RETRY_AFTER_S)}) from e

    def cancel(self) -> None:
        """Cancels the requests that have not finished (idempotent)."""
        if self._open and not self.cancelled:
            self.cancelled = True
            for index in list(self._open):
                self._thread.cancel(self._ids[index])

    @property
    def done(self) -> bool:
        return not self._open

    async def events(self) -> AsyncIterator[Tuple[int, Event]]:
        """(choice index, event) until every request has sent its "done" or "error" event."""
        while self._open:
            remaining = self._deadline - self._loop.time()
            try:
                if remaining <= 0:
                    raise asyncio.TimeoutError
                index, event = await asyncio.wait_for(self._queue.get(), remaining)
            except asyncio.TimeoutError:
                self.cancel()
                raise RequestTimeout(self._timeout) from None
            if event.kind in ("done", "error"):
                self._open.discard(index)
            elif event.kind == "token" and self.first_token_at is None:
                self.first_token_at = time.perf_counter()
            yield index, event


async def watch_disconnect(receive, on_disconnect) -> None:
    """Calls on_disconnect() when the client goes away. For a handler whose body has been
    read: the ASGI receive channel then only ever delivers http.disconnect."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            on_disconnect()
            return
