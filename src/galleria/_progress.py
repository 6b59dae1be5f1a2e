"""Progress of long work: a tqdm bar on a terminal, a plain line every few seconds anywhere else.

A bar that redraws itself is unreadable in a log file or a CI console, and nothing at all for minutes
is worse; so off a terminal :func:`progress` prints ``DESCRIPTION: N/TOTAL UNIT (P%), R UNIT/s, about
T left`` at most every :data:`LINE_EVERY` seconds, and a last line at the end when it printed any.
Work that ends within the first interval prints nothing (so a quick command, or a one-line error,
stays as it was). ``TQDM_DISABLE=1`` silences both forms.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

__all__ = ["LINE_EVERY", "LineProgress", "progress"]

#: Seconds between two progress lines off a terminal.
LINE_EVERY = 5.0


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

    def close(self) -> None:
        """Print the final count if any line was printed (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._printed:
            print(self._line(time.monotonic()) + " - done", file=self._stream, flush=True)

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        return tqdm(total=total, desc=description, unit=unit, initial=initial)
    return LineProgress(total, description, unit, initial=initial)
