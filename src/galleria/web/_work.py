"""The worker pool of ``galleria serve``: heavy work off the event loop, bounded, under a deadline.

Decoding an upload, embedding it, searching and re-ranking run in a pool of a few threads, never in
the event loop, so that while they run the server still answers ``/api/info``, thumbnails and pages.
Each request's work gets a deadline (``serve --request-timeout``): when it passes, the request is
answered 503 at once. The thread cannot be killed; it stops at the next point where the work checks
its deadline (:func:`galleria._deadline.check_deadline`: between stages, and in the long loops), and
work still queued when its deadline passes never starts. So a request past its time frees its worker
soon after, not only when its computation would have ended.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from galleria._deadline import DeadlineExceeded, check_deadline, deadline_after

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_WORKERS",
    "MAX_REQUEST_TIMEOUT",
    "RequestTimeout",
    "WorkerPool",
    "check_timeout",
]

T = TypeVar("T")

#: Seconds a request's work may take by default (``serve --request-timeout``).
DEFAULT_REQUEST_TIMEOUT = 60.0
#: Longest accepted request timeout (a day).
MAX_REQUEST_TIMEOUT = 86_400.0
#: Threads that search, decode uploads and re-rank at once.
DEFAULT_WORKERS = max(1, min(4, os.cpu_count() or 1))


class RequestTimeout(TimeoutError):
    """A request's work ran past the server's request timeout (answered 503)."""


def check_timeout(value: Any) -> float:
    """A request timeout in seconds: a finite number in (0, :data:`MAX_REQUEST_TIMEOUT`]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"request_timeout must be a number of seconds, got {value!r}")
    if not 0 < value <= MAX_REQUEST_TIMEOUT:
        raise ValueError(
            f"request_timeout must be above 0 and at most {MAX_REQUEST_TIMEOUT:g} seconds, got {value!r}"
        )
    return float(value)


class WorkerPool:
    """``workers`` threads running request work, each call under a ``timeout``-second deadline."""

    def __init__(self, workers: int = DEFAULT_WORKERS, timeout: float = DEFAULT_REQUEST_TIMEOUT) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256:
            raise ValueError(f"workers must be an int from 1 to 256, got {workers!r}")
        self.workers = workers
        self.timeout = check_timeout(timeout)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix="galleria-serve"
            )
        return self._executor

    def message(self) -> str:
        """The 503 answer's text."""
        return (
            f"the request took longer than the server's limit of {self.timeout:g} s "
            "(galleria serve --request-timeout); try smaller settings (k, pool) or again later"
        )

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in a worker thread; :class:`RequestTimeout` once the deadline passes."""
        timeout = self.timeout
        queued = time.monotonic()

        def call() -> T:
            with deadline_after(timeout, since=queued):
                check_deadline()  # queued past its deadline: it never starts
                return function(*args)

        future = asyncio.wrap_future(self._pool().submit(call))
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except (asyncio.TimeoutError, DeadlineExceeded):
            future.add_done_callback(_consume)
            raise RequestTimeout(self.message()) from None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        """The app's lifespan: the pool is shut down when the server stops."""
        try:
            yield
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Let the running work finish at its next deadline check; start no more."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _consume(future: Any) -> None:
    """Fetch an abandoned future's outcome, so that its error is not reported as never retrieved."""
    if not future.cancelled():
        future.exception()
