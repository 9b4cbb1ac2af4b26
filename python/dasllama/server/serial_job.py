"""Work on a model that serves one request at a time (speech synthesis, transcription).

Such a model (registry.SerialModel: a TTS or an ASR) has a threading.Lock and a count of the
requests holding or waiting for it. A :class:`SerialJob` is one request's work: a thread of its
own that takes the lock (looking every LOCK_POLL_S whether it was cancelled meanwhile), runs
the subclass's ``work()``, and hands what it produces to the event loop, so the loop is never
blocked. ``items()`` yields those items; ``cancel()`` stops the work at its next item, or
before it starts. A job starts only while fewer than max_waiting requests hold or wait for the
model; over that it is a 503 with Retry-After, as a full engine queue is.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, AsyncIterator, Optional

from .bridge import RETRY_AFTER_S, next_before, post_to_loop
from .errors import APIError

__all__ = ["SerialJob", "LOCK_POLL_S"]

# How often a request waiting for the model looks whether it was cancelled.
LOCK_POLL_S = 0.1


class SerialJob:
    """One request's work on a serial model (see the module docstring). Subclasses write
    ``work()`` (on the job's thread: call ``emit(item)`` for each result, look at
    ``cancelled`` between items), ``error(exc)`` (the APIError a failure of work() answers
    with) and, when they hold resources, ``finish()`` (on the job's thread, last)."""

    # What the 503 calls the model ("the speech model is busy: ...").
    what = "model"

    def __init__(self, loaded, timeout: float):
        self._loaded = loaded
        self._timeout = timeout
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + timeout
        self._queue: asyncio.Queue = asyncio.Queue()
        self._cancel = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -------------------------------------------------------------------- for subclasses
    def work(self) -> None:   # pragma: no cover - every subclass writes its own
        raise NotImplementedError

    def error(self, exc: Exception) -> APIError:
        return APIError(500, f"{type(exc).__name__}: {exc}", code="internal_error")

    def finish(self) -> None:
        pass

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def emit(self, item: Any) -> None:
        post_to_loop(self._loop, self._queue.put_nowait, ("item", item))

    # -------------------------------------------------------------------- lifetime
    def start(self, max_waiting: int) -> None:
        """Starts the thread, or raises a 503 when max_waiting requests already hold or wait
        for the model."""
        if self._loaded.waiting >= max_waiting:
            raise APIError(503, f"the {self.what} is busy: {self._loaded.waiting} requests "
                                f"hold or wait for it; retry after {RETRY_AFTER_S} s",
                           code="queue_full", headers={"Retry-After": str(RETRY_AFTER_S)})
        self._loaded.waiting += 1
        self._thread = threading.Thread(target=self._run, name=f"dasllama-{self.what}",
                                        daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """Stops the work at its next item (idempotent)."""
        self._cancel.set()

    def _end(self) -> None:    # on the loop: the model is free before the reader hears so
        self._loaded.waiting -= 1
        self._queue.put_nowait(("end", None))

    def _run(self) -> None:   # on the job's thread
        lock = self._loaded.lock
        try:
            while not lock.acquire(timeout=LOCK_POLL_S):
                if self._cancel.is_set():
                    return
            try:
                if not self._cancel.is_set():
                    self.work()
            finally:
                lock.release()
        except Exception as e:    # reported to the request; the server keeps serving
            post_to_loop(self._loop, self._queue.put_nowait, ("error", e))
        finally:
            try:
                self.finish()
            finally:
                post_to_loop(self._loop, self._end)   # last: finished, cancelled or failed

    async def items(self) -> AsyncIterator[Any]:
        """The work's items as they come; RequestTimeout past the timeout (the work is
        cancelled); a failure as error(exc)."""
        while True:
            kind, value = await next_before(self._queue, self._deadline, self._timeout,
                                            self.cancel)
            if kind == "end":
                return
            if kind == "error":
                raise self.error(value) from value
            yield value
