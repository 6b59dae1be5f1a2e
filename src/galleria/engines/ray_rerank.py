"""Approximate full k-reciprocal re-ranking with its output blocks computed by Ray tasks.

The driver prepares everything but the output (:func:`galleria.rerank.approximate.
prepare_k_reciprocal_approximate`: the graph over probes + gallery, the row scales, the sparse
features and their inverted index) and puts it once in Ray's object store. Each task computes one
block of probes × the whole gallery from that shared state. Blocks have the size the one-process
stream uses (fixed by the gallery's size, never by the number of workers), and a row's values do
not depend on the rows computed with it, so the output equals
:func:`galleria.rerank.iter_k_reciprocal_rerank_approximate`'s bit for bit for any number of
workers. Blocks are yielded in probe order; at most ``in_flight`` are computed ahead of the
consumer, which bounds the driver's memory.

A task whose worker dies is retried by Ray (``max_retries``); when the retries run out the stream
raises ``RuntimeError`` naming the block and Ray's message. Nothing is written anywhere: a caller
such as :func:`galleria.metrics.reid_evaluate` sees either every block or the error.

Ray is an optional dependency: ``pip install -e '.[ray]'``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from galleria._validation import check_positive_int
from galleria.rerank.approximate import PreparedApproximate, prepare_k_reciprocal_approximate

__all__ = ["ray_rerank_approximate"]

#: Times a block's task is retried after its worker died.
MAX_RETRIES = 2


def _ray() -> Any:
    try:
        import ray
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("distributed re-ranking needs Ray: pip install -e '.[ray]'") from error
    return ray


def _block(prepared: PreparedApproximate, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """One task: probes ``start:stop`` against the whole gallery (``prepared`` from the object store)."""
    return prepared.block(start, stop)


def ray_rerank_approximate(
    probe: Any,
    gallery: Any,
    *,
    address: str | None = None,
    in_flight: int | None = None,
    **settings: Any,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:func:`galleria.rerank.iter_k_reciprocal_rerank_approximate` with its blocks on Ray tasks.

    Parameters
    ----------
    probe, gallery : array_like
        Features, as for :func:`galleria.rerank.iter_k_reciprocal_rerank_approximate`.
    address : str, optional
        A Ray cluster to join (``"auto"``, ``"ray://host:10001"``) when Ray is not running yet;
        None starts a local Ray on this machine's CPUs. A running Ray is used as it is.
    in_flight : int, optional
        Blocks computed ahead of the consumer (default: twice the cluster's CPUs).
    **settings
        ``metric``, ``k1``, ``k2``, ``lambda_value``, ``mode``, ``graph``, ``scale_sample`` of
        :func:`galleria.rerank.iter_k_reciprocal_rerank_approximate`.

    Yields
    ------
    (probe_rows, block)
        In probe order, equal bit for bit to the one-process stream's pairs.

    Raises
    ------
    TypeError, ValueError
        As :func:`galleria.rerank.iter_k_reciprocal_rerank_approximate`, or ``in_flight < 1``.
    RuntimeError
        A block's task failed after its retries (its message names the block).
    """
    ahead = None if in_flight is None else check_positive_int("in_flight", in_flight)
    prepared = prepare_k_reciprocal_approximate(probe, gallery, **settings)
    return _run(prepared, address, ahead)


def _run(
    prepared: PreparedApproximate, address: str | None, ahead: int | None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    ray = _ray()
    if not ray.is_initialized():
        if address is None:
            ray.init(include_dashboard=False)
        else:
            ray.init(address=address)
    if ahead is None:
        ahead = max(1, 2 * int(ray.cluster_resources().get("CPU", 1)))
    shared = ray.put(prepared)  # sent once; every task reads the same copy
    task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(_block)
    step, probes = prepared.step, prepared.probes
    pending: deque[tuple[int, int, Any]] = deque()
    starts = iter(range(0, probes, step))
    for start in starts:
        stop = min(start + step, probes)
        pending.append((start, stop, task.remote(shared, start, stop)))
        if len(pending) >= ahead:
            break
    try:
        while pending:
            start, stop, reference = pending.popleft()
            following = next(starts, None)
            if following is not None:
                end = min(following + step, probes)
                pending.append((following, end, task.remote(shared, following, end)))
            try:
                rows, block = ray.get(reference)
            except Exception as error:  # Ray wraps the task's error, or reports the lost worker
                raise RuntimeError(f"re-ranking probes {start}:{stop} failed on Ray: {error}") from error
            yield rows, block
    finally:
        for _, _, reference in pending:
            ray.cancel(reference)
