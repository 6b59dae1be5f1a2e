"""Carrying a store's neighbour graph over to the store's next state (:mod:`galleria.store.graph`).

The graph of a state is held with the store's path table of that state and a fingerprint of each
row's vector. When the store has changed since (images added, removed), the old rows are found in
the new table by path; a row whose fingerprint differs (its vector changed) counts as removed and
its new row as added. :func:`galleria.index.graph_update.update_graph` then updates the graph.
"""

from __future__ import annotations

import numpy as np

from galleria.index.graph_update import update_graph
from galleria.index.neighbor_graph import EXACT_LIMIT
from galleria.store._paths import PathTable

__all__ = ["REBUILD_SHARE", "fingerprints", "follow"]

#: A graph is updated while the rows added and removed since its build stay within this share of
#: the store's rows; past it the next use builds it anew.
REBUILD_SHARE = 0.25
#: Odd multipliers of the fingerprint, one per dimension (drawn once, the same in every process).
_MULTIPLIERS = np.random.default_rng(0x6A11E71A).integers(1, 1 << 62, size=1 << 16, dtype=np.uint64) | 1
_BLOCK = 1 << 16


def fingerprints(vectors: np.ndarray) -> np.ndarray:
    """One uint64 per row: a multiply-add hash of its float32 bits (a changed vector changes it)."""
    count, dim = vectors.shape
    out = np.empty(count, dtype=np.uint64)
    multipliers = _MULTIPLIERS[np.arange(dim) % _MULTIPLIERS.size]
    bits = np.ascontiguousarray(vectors, dtype=np.float32).view(np.uint32)
    with np.errstate(over="ignore"):
        for begin in range(0, count, _BLOCK):
            part = bits[begin : begin + _BLOCK].astype(np.uint64)
            out[begin : begin + _BLOCK] = (part * multipliers[None, :]).sum(axis=1, dtype=np.uint64)
    return out


def _old_rows_in(old: PathTable, new: PathTable) -> np.ndarray:
    """Each old row's row in ``new`` (-1: gone); a table extended by appending is matched directly."""
    count = len(old)
    if len(new) >= count and np.array_equal(new.offsets[: count + 1], old.offsets):
        end = int(old.offsets[-1])
        if np.array_equal(new.data[:end], old.data):
            return np.arange(count, dtype=np.int64)
    return new.rows_of(list(old))


def follow(
    old_rows: PathTable,
    old_fingerprints: np.ndarray,
    ids: np.ndarray,
    distances: np.ndarray,
    changed: int,
    new_rows: PathTable,
    vectors: np.ndarray,
    space: str,
) -> tuple[np.ndarray, np.ndarray, int, dict[str, int]] | None:
    """The graph of the new state ``(ids, distances, changed, counts)``, or None when it is to be rebuilt.

    ``changed`` counts the rows added and removed since the graph was built; the result adds this
    change's. None when the change would pass :data:`REBUILD_SHARE` of the new rows, or the graph
    would lose neighbours (the new state is too small for its ``k``).
    """
    size = len(new_rows)
    k = ids.shape[1]
    if size < 2 or k == 0 or k > size - 1:
        return None
    kept = _old_rows_in(old_rows, new_rows)
    present = np.flatnonzero(kept >= 0)
    same = fingerprints(vectors[kept[present]]) == old_fingerprints[present]
    kept[present[~same]] = -1  # re-embedded: removed here, and added back as a new row
    survivors = int(np.count_nonzero(kept >= 0))
    change = (len(old_rows) - survivors) + (size - survivors)
    if changed + change > REBUILD_SHARE * size:
        return None
    # a gallery that "auto" graphs exactly keeps an exact graph: the update equals a rebuild
    exact = size <= EXACT_LIMIT
    new_ids, new_distances, counts = update_graph(vectors, ids, distances, kept, k, space, exact=exact)
    counts["removed"] = len(old_rows) - survivors
    return new_ids, new_distances, changed + change, counts
