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
from typing import AsyncIterator, Callable, List, Optional, Sequence, Tuple

from starlette.responses import StreamingResponse

from ..batch import Event, QueueFull, Request
from .errors import APIError

__all__ = ["Job", "RequestTimeout", "watch_disconnect", "WatchedStreamingResponse",
           "post_to_loop", "next_before", "sse", "SSE_DONE", "RETRY_AFTER_S"]

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


def post_to_loop(loop: asyncio.AbstractEventLoop, callback: Callable, *args) -> None:
    """Schedules callback(*args) on loop from another thread; nothing once the loop is closed
    (the server is shutting down and nobody reads)."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        pass


async def next_before(queue: asyncio.Queue, deadline: float, timeout: float,
                      cancel: Callable[[], None]):
    """The queue's next item. Past deadline (the running loop's clock) calls cancel() and
    raises RequestTimeout(timeout)."""
    remaining = deadline - asyncio.get_running_loop().time()
    try:
        if remaining <= 0:
            raise asyncio.TimeoutError
        return await asyncio.wait_for(queue.get(), remaining)
    except asyncio.TimeoutError:
        cancel()
        raise RequestTimeout(timeout) from None


class Job:
    """The engine requests behind one HTTP request (see the module docstring).

    thread: the model's EngineThread. timeout: seconds from now after which events() cancels
    everything and raises RequestTimeout. on_first_token(seconds), when given, is called once
    with the time from the job's creation to its first token (time to first token)."""

    def __init__(self, thread, timeout: float,
                 on_first_token: Optional[Callable[[float], None]] = None):
        self._thread = thread
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._timeout = timeout
        self._deadline = self._loop.time() + timeout
        self._ids: List[int] = []
        self._open: set = set()
        self._started = time.perf_counter()
        self._on_first_token = on_first_token
        self._seen_token = False
        self._cancelled = False

    def _forward(self, index: int):
        loop, queue = self._loop, self._queue

        def on_event(event: Event) -> None:      # runs on the engine thread
            post_to_loop(loop, queue.put_nowait, (index, event))
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
        if self._open and not self._cancelled:
            self._cancelled = True
            for index in list(self._open):
                self._thread.cancel(self._ids[index])

    async def events(self) -> AsyncIterator[Tuple[int, Event]]:
        """(choice index, event) until every request has sent its "done" or "error" event."""
        while self._open:
            index, event = await next_before(self._queue, self._deadline, self._timeout,
                                             self.cancel)
            if event.kind in ("done", "error"):
                self._open.discard(index)
            elif event.kind == "token" and not self._seen_token:
                self._seen_token = True
                if self._on_first_token is not None:
                    self._on_first_token(time.perf_counter() - self._started)
            yield index, event


async def watch_disconnect(receive, on_disconnect) -> None:
    """Calls on_disconnect() when the client goes away. For a handler whose body has been
    read: the ASGI receive channel then only ever delivers http.disconnect."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            on_disconnect()
            return


class WatchedStreamingResponse(StreamingResponse):
    """A streamed body that runs `cleanup` (cancel the work, release the lease) however it
    ends: finished, failed, or cut by a client that went away, even before its first chunk.
    Disconnects are also watched directly and call `on_disconnect`, so work that has not sent
    anything yet (a request waiting for a slot or for the model) is cancelled too."""

    def __init__(self, chunks: AsyncIterator[bytes], cleanup: Callable[[], None],
                 on_disconnect: Callable[[], None], media_type: Optional[str] = None,
                 headers: Optional[dict] = None):
        super().__init__(chunks, media_type=media_type, headers=headers)
        self._cleanup = cleanup
        self._on_disconnect = on_disconnect

    async def __call__(self, scope, receive, send):
        watcher = asyncio.ensure_future(watch_disconnect(receive, self._on_disconnect))
        try:
            await super().__call__(scope, receive, send)
        finally:
            watcher.cancel()
            self._cleanup()
