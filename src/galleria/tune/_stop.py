"""Ctrl-C during a study: stop it cleanly wherever the signal lands.

Python raises KeyboardInterrupt between any two bytecodes. Inside a trial's measurement that is what
we want (the trial ends at once); inside optuna's own bookkeeping between trials it can leave optuna
half-way (an ``UnboundLocalError`` from its ``finally`` block, with a traceback).
:func:`stopping_on_interrupt` installs, for the length of ``study.optimize``, a SIGINT handler
that raises only while a trial is measuring, and otherwise records the interrupt and asks the
study to stop after the current step; the caller raises KeyboardInterrupt once ``optimize`` has
returned.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["stopping_on_interrupt"]


@contextmanager
def stopping_on_interrupt(
    study: Any, measuring: list[bool], interrupted: list[BaseException]
) -> Iterator[None]:
    """Within the block, SIGINT raises KeyboardInterrupt while ``measuring[0]`` is true; otherwise it
    appends to ``interrupted`` and calls ``study.stop()``. Outside the main thread, or when SIGINT has
    no Python handler, nothing changes."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return

    def handler(number: int, frame: Any) -> None:
        if measuring[0]:
            raise KeyboardInterrupt
        interrupted.append(KeyboardInterrupt())
        study.stop()

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
