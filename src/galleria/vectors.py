"""Pure vector functions below both the metrics and the re-rankers.

Everything here works on numpy arrays and knows nothing of stores, methods or files.
"""

from __future__ import annotations

import numpy as np

__all__ = ["stable_smallest"]


def stable_smallest(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` smallest entries along the last axis, as a stable sort orders them.

    Equal to ``np.argsort(values, axis=-1, kind="stable")[..., :k]`` (ties go to the lower index),
    computed faster. Short rows use numpy's vectorised (unstable) sort and redo, stably, only the
    rows with a tie among their first ``k + 1`` entries. Long rows are first cut down: the k-th
    smallest of every ``_STRIDE``-th entry bounds the row's k-th smallest from above, so the entries
    at or below it (kept in index order) hold the answer. ``values`` must hold no NaN.

    Examples
    --------
    >>> stable_smallest(np.array([[0.5, 0.1, 0.1, 0.0, 0.7, 0.9, 0.8, 0.6, 0.4]]), 3).tolist()
    [[3, 1, 2]]
    """
    size = values.shape[-1]
    lead = values.shape[:-1]
    flat = values.reshape(-1, size)
    if size <= _SHORT_ROW or k >= size or size // _STRIDE < 4 * k:
        return _smallest_short(flat, k).reshape((*lead, k))
    sample = flat[:, ::_STRIDE]
    bound = np.partition(sample, k - 1, axis=-1)[:, k - 1 : k]
    mask = flat <= bound
    found = np.flatnonzero(mask)
    rows = found // size
    columns = found - rows * size
    counts = np.count_nonzero(mask, axis=1)
    starts = np.cumsum(counts) - counts
    slots = np.arange(found.size) - starts[rows]
    kept = np.full((flat.shape[0], int(counts.max())), np.inf, dtype=flat.dtype)
    kept[rows, slots] = flat.ravel()[found]
    where = np.zeros(kept.shape, dtype=np.int64)
    where[rows, slots] = columns
    local = _smallest_short(kept, k)
    return np.take_along_axis(where, local, axis=-1).reshape((*lead, k))


def _smallest_short(flat: np.ndarray, k: int) -> np.ndarray:
    """:func:`stable_smallest` on a 2-D array by sorting whole rows."""
    span = min(k + 1, flat.shape[1])
    columns = np.argsort(flat, axis=-1)[:, :span]
    ordered = np.take_along_axis(flat, columns, axis=-1)
    tied = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=-1))
    if tied.size:
        columns[tied] = np.argsort(flat[tied], axis=-1, kind="stable")[:, :span]
    return np.ascontiguousarray(columns[:, :k])


#: Rows up to this length are sorted whole (numpy's vectorised sort is fast there).
_SHORT_ROW = 1024
#: Sampling stride used to bound the k-th smallest entry of a long row.
_STRIDE = 32
