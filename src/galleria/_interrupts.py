"""Holding Ctrl-C (SIGINT) and SIGTERM back while a store changes, so that no change lands half-way.

A store change touches several objects in turn: the faiss index, the index's own row bookkeeping,
the store's path table. Python raises KeyboardInterrupt between any two bytecodes, and faiss checks
for Ctrl-C inside long operations, so an interrupt could leave the index one batch ahead of its
bookkeeping; a checkpoint or a save taken afterwards would then not load. :func:`deferred_interrupts`
holds those signals back for the length of the change and delivers them as soon as it is over.

Only the main thread receives signals in Python, and only it may install handlers: in any other
thread the context manager does nothing (no KeyboardInterrupt can be raised there anyway). A signal
whose handler is not a Python function (the default action of SIGTERM, which ends the process at
once, or an ignored signal) is left alone: an abrupt end loses memory, never a file, since every
file is written atomically.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["deferred_interrupts"]

_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM") if hasattr(signal, name))


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT and SIGTERM (those with a Python handler) back inside the block; deliver them after.

    A signal that arrives inside the block is recorded, not acted on; when the block ends (normally
    or by an exception) the original handlers are restored and each recorded signal is handed to
    its handler once, in order, so Ctrl-C raises KeyboardInterrupt right after the block. Nested
    blocks defer to the outermost one.

    Examples
    --------
    >>> with deferred_interrupts():
    ...     total = sum(range(10))
    >>> total
    45
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[tuple[int, Any]] = []
    saved: dict[int, Any] = {}

    def hold(number: int, frame: Any) -> None:
        pending.append((number, frame))

    for number in _SIGNALS:
        handler = signal.getsignal(number)
        if callable(handler) and not getattr(handler, "_galleria_deferring", False):
            saved[number] = handler
    hold._galleria_deferring = True  # type: ignore[attr-defined]
    try:
        for number in saved:
            signal.signal(number, hold)
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)
        for number, frame in pending:
            saved[number](number, frame)
