"""Progress of long work: a tqdm bar on a terminal, a plain line every few seconds anywhere else.

A bar that redraws itself is unreadable in a log file or a CI console, and nothing at all for minutes
is worse; so off a terminal :func:`progress` prints ``DESCRIPTION: N/TOTAL UNIT (P%), R UNIT/s, about
T left`` at most every :data:`LINE_EVERY` seconds, and a last line at the end when it printed any:
``... - done`` when the work finished, ``... - interrupted`` after Ctrl-C and ``... - stopped`` after
an error (a reporter used as a context manager knows which). Work that ends within the first interval
prints nothing (so a quick command, or a one-line error, stays as it was). ``TQDM_DISABLE=1``
silences both forms. :class:`PhaseProgress` gives one such reporter per phase of a longer job.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = [
    "LINE_EVERY",
    "BatchPacer",
    "LineProgress",
    "PhaseProgress",
    "Progress",
    "counter",
    "ending",
    "progress",
]

#: ``on_progress(phase, done, total)``: the phase a long computation is in, the work of that phase
#: finished so far and the phase's work to do (:class:`PhaseProgress` shows it).
Progress = Callable[[str, int, int], None]

#: Seconds between two progress lines off a terminal.
LINE_EVERY = 5.0


def counter(on_progress: Progress | None, phase: str, total: int) -> Callable[[int], None]:
    """A ``count(n)`` that reports everything counted so far in ``phase``, with ``total``, to
    ``on_progress`` (and does nothing when ``on_progress`` is None)."""
    done = [0]

    def count(n: int) -> None:
        done[0] += n
        if on_progress is not None:
            on_progress(phase, done[0], total)

    return count


def ending(kind: type[BaseException] | None) -> str:
    """The last word of a progress line: ``done``, or why the work ended early (``kind``, the
    exception that ended it: ``interrupted`` for Ctrl-C, ``stopped`` for anything else)."""
    if kind is None:
        return "done"
    return "interrupted" if issubclass(kind, KeyboardInterrupt) else "stopped"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class LineProgress:
    """A progress reporter that prints one plain line at most every ``every`` seconds.

    It has the part of tqdm's interface the library uses: ``update(n)``, ``close()``, and use as a
    context manager.

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> with LineProgress(4, "building gallery", "img", every=0.0, stream=out) as bar:
    ...     bar.update(2); bar.update(2)
    >>> out.getvalue().splitlines()[0].startswith("building gallery: 2/4 img (50%)")
    True
    """

    def __init__(
        self,
        total: int | None,
        description: str,
        unit: str,
        *,
        every: float | None = None,
        stream: TextIO | None = None,
        initial: int = 0,
    ) -> None:
        self.total = total
        self.n = initial
        self._initial = initial
        self._description = description
        self._unit = unit
        self._every = LINE_EVERY if every is None else every
        self._stream = stream if stream is not None else sys.stderr
        self._started = time.monotonic()
        self._last = self._started
        self._printed = False
        self._closed = False

    def _line(self, now: float) -> str:
        done = self.n - self._initial
        rate = done / (now - self._started) if now > self._started else 0.0
        text = f"{self._description}: {self.n}"
        if self.total:
            text += f"/{self.total} {self._unit} ({100 * self.n / self.total:.0f}%)"
        else:
            text += f" {self._unit}"
        if rate > 0:
            text += f", {rate:.1f} {self._unit}/s"
            if self.total and self.n < self.total:
                text += f", about {_duration((self.total - self.n) / rate)} left"
        return text

    def update(self, n: int = 1) -> None:
        """Count ``n`` more items; print a line if the last one is ``every`` seconds old."""
        self.n += n
        now = time.monotonic()
        if now - self._last >= self._every:
            print(self._line(now), file=self._stream, flush=True)
            self._last = now
            self._printed = True

    def close(self, end: str = "done") -> None:
        """Print the final count, ending ``- END``, if any line was printed (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._printed:
            print(f"{self._line(time.monotonic())} - {end}", file=self._stream, flush=True)

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close(ending(kind))  # never "done" when an exception ends the work


def _terminal_columns() -> int:
    """The width of the terminal on stderr, 0 when it reports no size."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
        return size.columns if size.lines > 0 else 0
    except (OSError, ValueError, AttributeError):
        return 0


def progress(
    total: int | None, description: str, unit: str = "img", *, enabled: bool = True, initial: int = 0
) -> Any:
    """A progress reporter over ``total`` items: tqdm on a terminal, :class:`LineProgress` elsewhere.

    ``enabled=False`` (or ``TQDM_DISABLE`` set) gives a silent one. Either has ``update(n)`` and
    ``close()`` and is a context manager.
    """
    from tqdm.auto import tqdm

    silent = os.environ.get("TQDM_DISABLE", "").strip().lower() in ("1", "true", "yes", "on")
    if not enabled or silent:
        return tqdm(total=total, disable=True)
    if sys.stderr.isatty():
        # A terminal that reports no size (a pseudo-terminal nobody sized) makes tqdm draw nothing.
        sized = _terminal_columns() > 0
        return tqdm(
            total=total,
            desc=description,
            unit=unit,
            initial=initial,
            ncols=None if sized else 80,
            nrows=None if sized else 24,
            disable=False,
        )
    return LineProgress(total, description, unit, initial=initial)


class BatchPacer:
    """Per-item progress through work done in batches: ``target(1)`` once per item, exactly.

    A batched embedder finishes a whole batch at once, so counting at the end of each batch leaves a
    bar still for the length of a batch (half a minute for a CNN on a CPU). While a batch runs,
    :meth:`batch` advances ``target`` one item at a time on a small thread, at the pace measured on
    the batches before it (none for the first), stopping one short of the batch's size; when the
    batch ends the rest is counted. The total is exact; only its spread over time is estimated.
    Calls to ``target`` never overlap. ``seconds_per_item`` is the pace (None until a batch is
    measured); pass it on to a later pacer of the same work.
    """

    def __init__(self, target: Callable[[int], Any], seconds_per_item: float | None = None) -> None:
        self._target = target
        self._lock = threading.Lock()
        self.seconds_per_item = seconds_per_item

    def advance(self, n: int = 1) -> None:
        """Count ``n`` items now (one call of ``target``; serialised with the pacing thread's)."""
        if n > 0:
            with self._lock:
                self._target(n)

    @contextmanager
    def batch(self, size: int, counted: int = 0) -> Iterator[None]:
        """Pace ``size`` items over the body's run; ``counted`` of them are counted by the caller."""
        pace = self.seconds_per_item
        stop = threading.Event()
        ticked = [0]
        planned = size - counted - 1  # the last item waits for the batch's end

        def run() -> None:
            assert pace is not None
            while ticked[0] < planned and not stop.wait(pace):
                with self._lock:
                    if stop.is_set():
                        return
                    self._target(1)
                    ticked[0] += 1

        thread = None
        if pace is not None and planned > 0:
            thread = threading.Thread(target=run, name="galleria-progress", daemon=True)
            thread.start()
        started = time.monotonic()
        try:
            yield
        finally:
            stop.set()
            if thread is not None:
                thread.join()
        if size > 0:
            self.seconds_per_item = (time.monotonic() - started) / size
        for _ in range(size - counted - ticked[0]):
            self.advance(1)


class PhaseProgress:
    """Progress through the named phases of one job: a :func:`progress` reporter per phase.

    Called as ``reporter(phase, done, total)`` (``done`` counted from the phase's start), it opens
    the phase's reporter, described ``PREFIX: PHASE`` and counting ``units[phase]``, at the phase's
    first call (``default_unit`` for a phase ``units`` does not name), and closes the one before.
    Used as a context manager it closes the last one, as
    :class:`LineProgress` does: ``- done``, or ``- interrupted`` / ``- stopped`` when an exception
    ends the job. Phases never reported print nothing.

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> with PhaseProgress("map", {"graph": "img"}, make=lambda total, text, unit: LineProgress(
    ...         total, text, unit, every=0.0, stream=out)) as reporter:
    ...     reporter("graph", 5, 10); reporter("graph", 10, 10)
    >>> last = out.getvalue().splitlines()[-1]
    >>> last.startswith("map: graph: 10/10 img (100%)"), last.endswith(" - done")
    (True, True)
    """

    def __init__(
        self,
        prefix: str,
        units: dict[str, str] | None = None,
        *,
        default_unit: str = "img",
        enabled: bool = True,
        make: Callable[[int | None, str, str], Any] | None = None,
    ) -> None:
        self._prefix = prefix
        self._units = dict(units or {})
        self._default_unit = default_unit
        self._make = (
            make
            if make is not None
            else (lambda total, text, unit: progress(total, text, unit, enabled=enabled))
        )
        self._phase: str | None = None
        self._bar: Any = None
        self._done = 0

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        if phase != self._phase:
            self._finish(None)
            self._phase = phase
            self._done = 0
            self._bar = self._make(
                total, f"{self._prefix}: {phase}", self._units.get(phase, self._default_unit)
            )
        if total is not None and self._bar.total != total:
            self._bar.total = total
        if done > self._done:
            self._bar.update(done - self._done)
            self._done = done

    def _finish(self, kind: type[BaseException] | None) -> None:
        bar, self._bar, self._phase = self._bar, None, None
        if bar is not None:
            bar.__exit__(kind, None, None)

    def __enter__(self) -> PhaseProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self._finish(kind)
