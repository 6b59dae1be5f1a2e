"""Updating a neighbour graph after items were added and removed, instead of building it anew.

A pure core (:func:`update_graph`) over the new state's vectors, the old graph and how the old rows
map to the new ones. What it does, in three steps:

1. **Rows that lost neighbours** (they listed a removed item) are repaired: their candidates are the
   neighbours they kept, and the old neighbour lists of the items they lost (an item near the one
   removed is the likeliest to take its place); each row keeps its ``k`` nearest by exact distance.
2. **Added items** get their own ``k`` nearest among all items: by exact blocks over every item up to
   :data:`EXACT_SEARCH_LIMIT` items, through a faiss inverted file (``IndexIVFFlat``, about
   :data:`CELL_SIZE` items a list, :data:`PROBES` lists probed, its distances exact) above.
3. **Rows the added items should enter** take them: every distance from an added item to an existing
   one that was computed in step 2 (all of them by exact blocks; the ``2k`` nearest through the
   inverted file) and beats the existing row's ``k``-th is merged into that row.

An exact graph (every graph of up to :data:`galleria.index.neighbor_graph.EXACT_LIMIT` items, as
``method="auto"`` builds them) stays exact: its repaired rows are computed anew among all items (step 1
then costs those rows' share of a rebuild), so the update equals a rebuild.

Rows that were neither touched by a removal nor entered by an added item stay as they were. The
result has the layout of :func:`galleria.index.neighbor_graph.exact_graph`'s (rows sorted by
distance, ties to the lower id, no row listing itself or an item twice); its approximation is a row
repaired in step 1 whose true replacement was not among its candidates, an added item's neighbour
the inverted file did not probe, and (inverted file only) a row an added item should have entered
outside that item's ``2k`` nearest. ``benchmarks/experiments/bench_graph_update.py`` measures it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria.distances import pairwise_distances
from galleria.index.exact_blocks import BLOCK_ELEMENTS, smallest_sorted
from galleria.index.neighbor_graph import _refined, exact_graph

__all__ = ["CELL_SIZE", "EXACT_SEARCH_LIMIT", "PROBES", "update_graph"]

#: Up to this many items, the added items are compared with every item (exact blocks).
EXACT_SEARCH_LIMIT = 200_000
#: Items per inverted list, and lists probed per added item, above that.
CELL_SIZE = 1024
PROBES = 32
#: Candidate entries gathered at once while repairing rows (each a d-vector: 64 MB at d = 128).
_GATHER = 1 << 17
#: Old rows carried over at once.
_ROWS = 1 << 15


def _sorted_rows(ids: np.ndarray, distances: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` first entries by (distance, id), a repeated id kept once (``-1``: no entry)."""
    order = np.lexsort((ids, distances), axis=1)
    ids = np.take_along_axis(ids, order, axis=1)
    distances = np.take_along_axis(distances, order, axis=1)
    repeated = np.zeros(ids.shape, dtype=bool)
    repeated[:, 1:] = (ids[:, 1:] == ids[:, :-1]) & (ids[:, 1:] >= 0)
    if repeated.any():  # a repeat has the same distance, so it follows its first entry directly
        distances = np.where(repeated | (ids < 0), np.inf, distances).astype(np.float32)
        return _sorted_rows(np.where(repeated, -1, ids), distances, k)
    return ids[:, :k], distances[:, :k]


def _repair(
    vectors: np.ndarray, rows: np.ndarray, candidates: np.ndarray, k: int, space: str
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest of each row's ``candidates`` (``-1``: none; repeats allowed) by exact distance.

    Rows with fewer than ``k`` distinct candidates get their exact row among all items instead."""
    ordered = np.sort(candidates, axis=1)
    ordered[:, 1:][ordered[:, 1:] == ordered[:, :-1]] = -1  # each candidate once
    ordered[ordered == rows[:, None]] = -1
    enough = (ordered >= 0).sum(axis=1) >= k
    ids = np.empty((rows.size, k), dtype=np.int32)
    distances = np.empty((rows.size, k), dtype=np.float32)
    step = max(1, _GATHER // max(1, ordered.shape[1]))
    chosen = np.flatnonzero(enough)
    for begin in range(0, chosen.size, step):
        part = chosen[begin : begin + step]
        ids[part], distances[part] = _refined(vectors, rows[part], ordered[part], k, space)
    few = np.flatnonzero(~enough)
    if few.size:
        ids[few], distances[few] = exact_graph(vectors, k, space, rows=rows[few])
    return ids, distances


def _search_exact(
    vectors: np.ndarray, added: np.ndarray, k: int, space: str, kth: np.ndarray
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Added rows' exact ``k`` nearest, and every (existing row, added row, distance) beating ``kth``."""
    ids = np.empty((added.size, k), dtype=np.int32)
    distances = np.empty((added.size, k), dtype=np.float32)
    entering: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    step = max(1, BLOCK_ELEMENTS // max(1, vectors.shape[0]))
    for begin in range(0, added.size, step):
        part = added[begin : begin + step]
        block = pairwise_distances(vectors[part], vectors, space)
        block[np.arange(part.size), part] = np.inf
        found, values = smallest_sorted(block, k)
        ids[begin : begin + step], distances[begin : begin + step] = found, values
        where, row = np.nonzero(block < kth[None, :])
        entering.append((row, part[where], block[where, row]))
    return ids, distances, _joined(entering)


def _search_ivf(
    vectors: np.ndarray, added: np.ndarray, k: int, space: str, kth: np.ndarray
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Added rows' ``k`` nearest through a faiss inverted file, exact distances; entries as above."""
    import faiss

    size, dim = vectors.shape
    lists = max(1, min(size // CELL_SIZE, 1 << 16))
    metric = faiss.METRIC_L2 if space == "l2" else faiss.METRIC_INNER_PRODUCT
    quantiser = faiss.IndexFlat(dim, metric)
    index = faiss.IndexIVFFlat(quantiser, dim, lists, metric)
    sample = np.random.default_rng(0).choice(size, size=min(size, 64 * lists), replace=False)
    index.train(np.ascontiguousarray(vectors[np.sort(sample)]))
    index.add(vectors)
    index.nprobe = min(lists, PROBES)
    wide = min(size, 2 * k + 1)
    entering: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    ids = np.empty((added.size, k), dtype=np.int32)
    distances = np.empty((added.size, k), dtype=np.float32)
    for begin in range(0, added.size, 8192):
        part = added[begin : begin + 8192]
        _, found = index.search(vectors[part], wide)
        near, values = _refined(vectors, part, found, wide - 1, space)
        ids[begin : begin + 8192], distances[begin : begin + 8192] = near[:, :k], values[:, :k]
        real = np.isfinite(values)
        beats = real & (values < kth[np.where(real, near, 0)])
        where, slot = np.nonzero(beats)
        entering.append((near[where, slot].astype(np.int64), part[where], values[where, slot]))
    short = np.flatnonzero(~np.isfinite(distances[:, -1]))  # fewer than k found in the probed lists
    if short.size:
        ids[short], distances[short] = exact_graph(vectors, k, space, rows=added[short])
    return ids, distances, _joined(entering)


def _joined(
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32)
    return (
        np.concatenate([part[0] for part in parts]).astype(np.int64),
        np.concatenate([part[1] for part in parts]).astype(np.int64),
        np.concatenate([part[2] for part in parts]).astype(np.float32),
    )


def _enter(
    ids: np.ndarray, distances: np.ndarray, entering: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> int:
    """Merge the entries (row, added id, distance) into the rows (in place); the rows changed."""
    rows, added, values = entering
    if rows.size == 0:
        return 0
    order = np.lexsort((values, rows))
    rows, added, values = rows[order], added[order], values[order]
    touched, starts, counts = np.unique(rows, return_index=True, return_counts=True)
    k = ids.shape[1]
    width = int(min(counts.max(), k))
    slot = np.arange(rows.size) - np.repeat(starts, counts)
    keep = slot < width  # a row takes at most k newcomers, its nearest
    extra_ids = np.full((touched.size, width), -1, dtype=np.int64)
    extra = np.full((touched.size, width), np.inf, dtype=np.float32)
    line = np.repeat(np.arange(touched.size), counts)
    extra_ids[line[keep], slot[keep]] = added[keep]
    extra[line[keep], slot[keep]] = values[keep]
    merged_ids, merged = _sorted_rows(
        np.concatenate([ids[touched].astype(np.int64), extra_ids], axis=1),
        np.concatenate([distances[touched], extra], axis=1),
        k,
    )
    ids[touched], distances[touched] = merged_ids, merged
    return int(touched.size)


def _carry_over(
    vectors: np.ndarray,
    ids: np.ndarray,
    distances: np.ndarray,
    kept: np.ndarray,
    rows: np.ndarray,
    new_ids: np.ndarray,
    new_distances: np.ndarray,
    space: str,
    exact: bool = False,
) -> int:
    """Old ``rows`` (all kept) into the new graph: as they were, or repaired (step 1; ``exact``: each
    repaired row is computed anew among all items); the rows repaired."""
    width = new_ids.shape[1]
    mapped = np.where(ids[rows] >= 0, kept[np.maximum(ids[rows], 0)], -1)  # neighbours as new rows
    lost = mapped < 0
    broken = lost.any(axis=1)
    whole = ~broken  # rows that lost nothing: their first k' entries are still theirs
    new_ids[kept[rows[whole]]] = mapped[whole, :width]
    new_distances[kept[rows[whole]]] = distances[rows[whole], :width]
    if not broken.any():
        return 0
    mapped, lost, chosen = mapped[broken], lost[broken], rows[broken]
    if exact:
        new_ids[kept[chosen]], new_distances[kept[chosen]] = exact_graph(
            vectors, width, space, rows=kept[chosen]
        )
        return int(chosen.size)
    # the old rows of the items each row lost, left-justified: (b, most lost)
    most = int(lost.sum(axis=1).max())
    order = np.argsort(~lost, axis=1, kind="stable")[:, :most]
    gone = np.where(
        np.take_along_axis(lost, order, axis=1), np.take_along_axis(ids[chosen], order, axis=1), -1
    )
    second = np.where(gone[:, :, None] >= 0, kept[ids[np.maximum(gone, 0)]], -1)
    candidates = np.concatenate([mapped, second.reshape(chosen.size, -1)], axis=1)
    new_ids[kept[chosen]], new_distances[kept[chosen]] = _repair(
        vectors, kept[chosen], candidates, width, space
    )
    return int(chosen.size)


def update_graph(
    vectors: Any,
    ids: np.ndarray,
    distances: np.ndarray,
    kept: np.ndarray,
    k: int,
    space: str,
    *,
    exact: bool = False,
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """The graph of ``vectors`` (the new state) from the old graph, updated (module docstring).

    ``exact``: the old graph is exact and so is the result, equal to :func:`exact_graph` of the new
    state: a repaired row is computed anew among all items and the added items by exact blocks.

    ``ids``/``distances`` are the old graph (n_old, k_old); ``kept[i]`` is old row ``i``'s row in the
    new state, or -1 where it was removed (kept rows keep their vectors and their order). New rows
    no old row maps to are the added ones. Returns ``(ids, distances, counts)``: (n, k') int32 and
    float32 arrays, k' = min(k, k_old, n - 1), and how many rows were ``repaired``, ``added`` and
    ``entered``.
    """
    array = np.ascontiguousarray(vectors, dtype=np.float32)
    size = array.shape[0]
    kept = np.asarray(kept, dtype=np.int64)
    width = min(int(k), ids.shape[1], max(size - 1, 0))
    new_ids = np.full((size, width), -1, dtype=np.int32)
    new_distances = np.full((size, width), np.inf, dtype=np.float32)
    counts = {"repaired": 0, "added": 0, "entered": 0}
    survivors = np.flatnonzero(kept >= 0)
    old = np.full(size, -1, dtype=np.int64)
    old[kept[survivors]] = survivors
    added = np.flatnonzero(old < 0)
    if width == 0:
        return new_ids, new_distances, counts
    for begin in range(0, survivors.size, _ROWS):
        counts["repaired"] += _carry_over(
            array,
            ids,
            distances,
            kept,
            survivors[begin : begin + _ROWS],
            new_ids,
            new_distances,
            space,
            exact,
        )
    if added.size:
        kth = new_distances[:, -1].copy()
        kth[added] = -np.inf  # the added rows' own lists come from their search
        search = _search_exact if exact or size <= EXACT_SEARCH_LIMIT else _search_ivf
        found, found_distances, entering = search(array, added, width, space, kth)
        new_ids[added], new_distances[added] = found, found_distances
        counts["added"] = int(added.size)
        counts["entered"] = _enter(new_ids, new_distances, entering)
    return new_ids, new_distances, counts
