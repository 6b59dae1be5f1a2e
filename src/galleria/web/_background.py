"""Work a page needs once per gallery (the map, the duplicate groups), done in one background thread.

The first request starts the work and is answered at once ("computing"); later requests get the
result when it is ready. A failure is kept (and logged) so that it is reported, not retried in a
loop. At most :data:`MAX_KEYS` results are kept; the oldest goes first.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["MAX_KEYS", "Background"]

_LOG = logging.getLogger("galleria.web")
#: Results kept at most (e.g. duplicate groups at a few thresholds).
MAX_KEYS = 4


class Background:
    """``get(key, work)``: ``("ready", value)``, ``("computing", None)`` or ``("failed", message)``."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._lock = threading.Lock()
        self._done: OrderedDict[Hashable, tuple[str, Any]] = OrderedDict()
        self._running: set[Hashable] = set()
        self._max_keys = max_keys

    def get(self, key: Hashable, work: Callable[[], Any]) -> tuple[str, Any]:
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            if key in self._running:
                return "computing", None
            self._running.add(key)
        threading.Thread(target=self._run, args=(key, work), daemon=True, name="galleria-background").start()
        return "computing", None

    def _run(self, key: Hashable, work: Callable[[], Any]) -> None:
        try:
            outcome: tuple[str, Any] = ("ready", work())
        except Exception as error:  # reported on the page, logged here
            _LOG.exception("background work %r failed", key)
            outcome = ("failed", f"{type(error).__name__}: {error}")
        with self._lock:
            self._running.discard(key)
            self._done[key] = outcome
            while len(self._done) > self._max_keys:
                self._done.popitem(last=False)

    def wait(self, key: Hashable, timeout: float = 60.0) -> None:
        """Block until ``key``'s work is done (tests, and ``galleria serve --map``), at most ``timeout`` s."""
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                if key in self._done or key not in self._running:
                    return
            time.sleep(0.02)
