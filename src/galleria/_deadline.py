"""A cooperative deadline for one unit of work (one request of ``galleria serve``).

A thread cannot be stopped from outside, so a long computation is stopped from inside: the code
that runs it calls :func:`check_deadline` between its stages (and in its long loops). With no
deadline in force (the library and the command line), :func:`check_deadline` does nothing.

Examples
--------
>>> import time
>>> with deadline_after(60.0):
...     check_deadline()          # well within the minute: nothing happens
>>> check_deadline()              # no deadline in force
>>> with deadline_after(0.0):
...     time.sleep(0.001)
...     check_deadline()
Traceback (most recent call last):
...
galleria._deadline.DeadlineExceeded: the request took longer than its 0 s time limit
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["DeadlineExceeded", "check_deadline", "deadline_after", "remaining"]


class DeadlineExceeded(TimeoutError):
    """The work ran past its deadline (``galleria serve`` answers 503)."""


_CURRENT: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar(
    "galleria_deadline", default=None
)


@contextmanager
def deadline_after(seconds: float, *, since: float | None = None) -> Iterator[None]:
    """Within the block, :func:`check_deadline` raises once ``seconds`` have passed since ``since``
    (a :func:`time.monotonic` reading; default: now)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise ValueError(f"seconds must be a number >= 0, got {seconds!r}")
    start = time.monotonic() if since is None else since
    token = _CURRENT.set((start + float(seconds), float(seconds)))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def remaining() -> float:
    """Seconds left before the deadline in force (``inf`` without one; negative once it passed)."""
    current = _CURRENT.get()
    return math.inf if current is None else current[0] - time.monotonic()


def check_deadline() -> None:
    """Raise :class:`DeadlineExceeded` when the deadline in force has passed; else nothing."""
    current = _CURRENT.get()
    if current is not None and time.monotonic() > current[0]:
        raise DeadlineExceeded(f"the request took longer than its {current[1]:g} s time limit")
