"""Merging identical concurrent work: the first caller of a key computes, the others wait for its answer.

Sixteen concurrent requests for the thumbnail (or the full-size copy) of one large image then decode
it once, so their memory is that of one request, not sixteen.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["SingleFlight"]

T = TypeVar("T")


class _Call(Generic[T]):
    """One computation in flight: its result or error, and the callers waiting on it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None
        self.waiting = 0


class SingleFlight(Generic[T]):
    """Run ``compute()`` once per key at a time; callers of a key in flight share its answer.

    A failure is shared too (each waiting caller re-raises it) and is not remembered: the next call
    after it computes again. Nothing is cached once a computation ends.

    Examples
    --------
    >>> flight = SingleFlight()
    >>> flight.do("a", lambda: 41 + 1)
    42
    >>> flight.in_flight()
    0
    """

    def __init__(self) -> None:
        self._calls: dict[Hashable, _Call[T]] = {}
        self._lock = threading.Lock()

    def in_flight(self) -> int:
        """Keys being computed now."""
        with self._lock:
            return len(self._calls)

    def waiting(self, key: Hashable) -> int:
        """Callers waiting now for the computation of ``key`` (not counting the one computing)."""
        with self._lock:
            call = self._calls.get(key)
            return 0 if call is None else call.waiting

    def do(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``'s answer: computed here, or by the caller already computing ``key``."""
        with self._lock:
            call = self._calls.get(key)
            leader = call is None
            if call is None:
                call = self._calls[key] = _Call()
            else:
                call.waiting += 1
        if not leader:
            call.done.wait()
            if call.error is not None:
                raise call.error
            return call.value  # type: ignore[return-value]
        try:
            call.value = compute()
        except BaseException as error:
            call.error = error
            raise
        finally:
            with self._lock:
                del self._calls[key]
            call.done.set()
        return call.value
