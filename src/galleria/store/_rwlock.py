"""A readers–writer lock: many readers at once, one writer alone, writers never starved."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ReadWriteLock"]


class ReadWriteLock:
    """Shared (read) and exclusive (write) locking, not re-entrant.

    A waiting writer blocks new readers, so a steady stream of queries cannot starve an
    ``add_images``. Not re-entrant: code holding the lock must not take it again (the store takes it
    only in its public methods).

    Examples
    --------
    >>> lock = ReadWriteLock()
    >>> with lock.reading():
    ...     with lock.reading():  # another reader (only safe because no writer is waiting here)
    ...         pass
    >>> with lock.writing():
    ...     pass
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the lock shared for the ``with`` block."""
        with self._condition:
            while self._writer or self._writers_waiting:
                self._condition.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._condition:
                self._readers -= 1
                if self._readers == 0:
                    self._condition.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the lock exclusively for the ``with`` block."""
        with self._condition:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._condition.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._condition:
                self._writer = False
                self._condition.notify_all()
