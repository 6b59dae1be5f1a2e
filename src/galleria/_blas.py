"""Running BLAS products on one thread: faster for small products next to other work, and the same
bits whatever the machine's thread count (a matrix product on 2 OpenBLAS threads may round otherwise
than on 1). The neighbour graph's shards (:mod:`galleria.index.ivf_graph`) and the re-rankers'
blocks (:mod:`galleria.rerank._common`) use it.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import threadpoolctl
from threadpoolctl import ThreadpoolController

__all__ = ["one_blas_thread"]


class _OneBlasThread:
    """Context manager: the BLAS libraries loaded in this process run on one thread while it is entered.

    The small matrix products of pool re-ranking (a few hundred rows each) are far slower when BLAS
    spreads them over threads that compete with other work for the cores. The thread count of a
    BLAS library is a setting of the whole process, so the limit is counted: the first caller to
    enter sets it, the last to leave restores what was there before, however many threads re-rank
    at once (other threads' BLAS calls meanwhile run on one thread too). Re-entrant.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._controller: ThreadpoolController | None = None
        self._limiter: Any = None

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                if self._controller is None:  # found once, on first use (numpy's BLAS is loaded by then)
                    self._controller = ThreadpoolController()
                _release_openblas_control()
                self._limiter = self._controller.limit(limits=1, user_api="blas")
                _release_openblas_control()
            self._depth += 1

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                _release_openblas_control()
                self._limiter.restore_original_limits()
                self._limiter = None
                _release_openblas_control()


def _release_openblas_control() -> None:
    """Let this thread set OpenBLAS's process-wide thread count, and leave it to any thread after.

    threadpoolctl ≥ 3.8 lets one Python thread at a time change it and ignores the others; the
    counted limit may be set by one thread and restored by another.
    """
    release = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if release is not None:
        release(force=True)


_ONE_BLAS_THREAD = _OneBlasThread()


def one_blas_thread() -> _OneBlasThread:
    """Run the enclosed BLAS calls on one thread (see :class:`_OneBlasThread`); thread-safe, re-entrant.

    Examples
    --------
    >>> import numpy as np
    >>> with one_blas_thread():
    ...     product = np.ones((3, 2)) @ np.ones((2, 3))
    """
    return _ONE_BLAS_THREAD
