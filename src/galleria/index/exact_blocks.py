"""Exact nearest neighbours block by block: the stable k smallest of each row, and the k nearest of
candidate rows computed a block of distances at a time (the core the exact and inverted-file graphs share)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from galleria.distances import pairwise_distances

__all__ = ["BLOCK_ELEMENTS", "neighbours_among", "smallest_sorted"]

#: Distances computed at once in one block (float32: 64 MB).
BLOCK_ELEMENTS = 1 << 24
#: Rows at least this many times wider than ``k`` are first cut down through a strided sample.
_CUT = 32
_STRIDE = 16


def _select(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`smallest_sorted` by one selection per row, redoing stably the rows tied at the k-th value."""
    positions = np.argpartition(values, k - 1, axis=1)[:, :k]
    found = np.take_along_axis(values, positions, axis=1)
    bound = found.max(axis=1, keepdims=True)
    # a row whose k-th value is tied with entries left out may have kept a higher position: redo it
    tied = np.flatnonzero(
        np.count_nonzero(values == bound, axis=1) != np.count_nonzero(found == bound, axis=1)
    )
    if tied.size:
        redone = np.argsort(values[tied], axis=1, kind="stable")[:, :k]
        positions[tied] = redone
        found[tied] = np.take_along_axis(values[tied], redone, axis=1)
    order = np.lexsort((positions, found), axis=1)
    return np.take_along_axis(positions, order, axis=1), np.take_along_axis(found, order, axis=1)


def smallest_sorted(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions and values of the ``k`` smallest entries of each row, by (value, position).

    Equal to ``np.argsort(values, axis=1, kind="stable")[:, :k]`` and the values there; ``values``
    (m, w) must hold no NaN (``+inf`` marks an entry that may not be chosen), ``k <= w``. Wide rows
    are first cut down: the k-th smallest of every 16th entry bounds the row's k-th smallest from
    above, and only the entries at or below it (kept in position order) are selected among.

    Examples
    --------
    >>> smallest_sorted(np.array([[0.5, 0.1, 0.1, 0.0]]), 3)[0].tolist()
    [[3, 1, 2]]
    """
    count, width = values.shape
    if k == 0 or count == 0:
        return np.empty((count, k), dtype=np.int64), np.empty((count, k), dtype=values.dtype)
    if k >= width:
        order = np.argsort(values, axis=1, kind="stable")[:, :k]
        return order, np.take_along_axis(values, order, axis=1)
    if width < _CUT * k:
        return _select(values, k)
    bound = np.partition(values[:, ::_STRIDE], k - 1, axis=1)[:, k - 1 : k]
    found = np.flatnonzero(values <= bound)
    rows = found // width
    counts = np.bincount(rows, minlength=count)
    slots = np.arange(found.size) - (np.cumsum(counts) - counts)[rows]
    kept = np.full((count, int(counts.max())), np.inf, dtype=values.dtype)
    kept[rows, slots] = values.ravel()[found]
    where = np.zeros(kept.shape, dtype=np.int64)
    where[rows, slots] = found - rows * width
    local, chosen = _select(kept, k) if kept.shape[1] > k else smallest_sorted(kept, k)
    return np.take_along_axis(where, local, axis=1), chosen


def neighbours_among(
    vectors: np.ndarray,
    rows: np.ndarray,
    candidates: np.ndarray,
    k: int,
    space: str,
    block: int,
    tick: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest of ``candidates`` (ascending ids) to each of ``rows``, never the row itself."""
    ids = np.empty((rows.size, k), dtype=np.int32)
    distances = np.empty((rows.size, k), dtype=np.float32)
    chosen = vectors if candidates.size == vectors.shape[0] else vectors[candidates]
    step = max(1, block // max(1, candidates.size))
    for begin in range(0, rows.size, step):
        part = rows[begin : begin + step]
        block_distances = pairwise_distances(vectors[part], chosen, space)
        where = np.minimum(np.searchsorted(candidates, part), candidates.size - 1)
        own = candidates[where] == part
        block_distances[np.flatnonzero(own), where[own]] = np.inf
        positions, values = smallest_sorted(block_distances, k)
        ids[begin : begin + step] = candidates[positions]
        distances[begin : begin + step] = values
        if tick is not None:
            tick(part.size)
    return ids, distances
