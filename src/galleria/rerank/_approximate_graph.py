"""Exact k-NN lists of a set against itself, each pair's product computed once (tiles of a symmetric Gram).

The approximate full re-ranking (:mod:`galleria.rerank.approximate`) needs every member's ``k``
nearest other members. An exact pass over all rows (the exact mode's first pass,
:func:`galleria.index.neighbor_graph.exact_graph`) computes every product ``x_i · x_j`` twice, once
for row ``i`` and once for row ``j``. Here the members are cut into tiles of :data:`TILE`
consecutive members and only the tiles ``(I, J)`` with ``I <= J`` are multiplied (BLAS, one thread
per tile, the worker threads of :func:`~galleria.rerank._common.parallel_blocks`):

1. Each diagonal tile ``(I, I)`` gives its rows' ``k`` best members inside the tile; the ``k``-th
   best score so far is the row's *threshold*, a lower bound of its true ``k``-th best.
2. Each other tile ``(I, J)`` keeps only the entries at or above the threshold of their row (rows
   of ``I``) or of their column (rows of ``J``: the tile read transposed). Every true neighbour
   passes. The kept entries are merged into each row's ``k`` best whenever
   :data:`_PENDING` of them wait, which raises the thresholds: a row that has seen ``c`` columns
   keeps about ``k · TILE / c`` entries of the next tile, so the kept entries stay near
   ``k · log(n / TILE)`` per row in all.
3. Each row's ``k`` best among what was kept, by (score, id).

The score of column ``j`` for row ``i`` is ``x_i · x_j`` (cosine, unit rows) or
``x_i · x_j - |x_j|² / 2`` (Euclidean: the same order as the distance). The result equals the exact
lists but where two members' distances to a row are equal, or within the rounding of the tile
products (a few float32 ulps), at the ``k``-th place. Memory: ``k`` scores and ids per member, the
entries kept between two merges, and a tile per worker thread.
"""

from __future__ import annotations

import numpy as np

from galleria._blas import one_blas_thread
from galleria.rerank._common import parallel_blocks

__all__ = ["GRAPH_METHODS", "SYMMETRIC_LIMIT", "TILE", "symmetric_graph"]

#: Ways to build the neighbour graph (see :func:`galleria.index.neighbor_graph.build_graph`).
GRAPH_METHODS: tuple[str, ...] = ("auto", "symmetric", "exact", "hnsw", "ivf")
#: Sets (probes + gallery) up to this size get the ``"symmetric"`` exact lists from ``graph="auto"``.
SYMMETRIC_LIMIT = 200_000

#: Members per tile (a tile is TILE² float32 products: 16 MB).
TILE = 2048
#: Kept entries that wait at most before they are merged into the rows' best (12 bytes each).
_PENDING = 1 << 22


class _Best:
    """Every row's ``k`` best (score, column) so far and its threshold, merged from kept entries."""

    def __init__(self, size: int, k: int) -> None:
        self.k = k
        self.scores = np.full((size, k), -np.inf, dtype=np.float32)
        self.columns = np.zeros((size, k), dtype=np.int64)
        self.threshold = np.full(size, -np.inf, dtype=np.float32)
        self.pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.waiting = 0

    def add(self, rows: np.ndarray, columns: np.ndarray, scores: np.ndarray) -> None:
        self.pending.append((rows, columns, scores))
        self.waiting += rows.size
        if self.waiting >= _PENDING:
            self.merge()

    def merge(self) -> None:
        """Each touched row's ``k`` best of its kept entries and its former best, ties to the lower column."""
        if not self.pending:
            return
        size, k = self.threshold.size, self.k
        parts = self.pending
        rows = np.concatenate([part[0] for part in parts]) if parts else np.empty(0, dtype=np.int64)
        touched = np.flatnonzero(np.bincount(rows, minlength=size))
        rows = np.concatenate([np.repeat(touched, k), rows])
        columns = np.concatenate([self.columns[touched].ravel()] + [part[1] for part in parts])
        scores = np.concatenate([self.scores[touched].ravel()] + [part[2] for part in parts])
        self.pending, self.waiting = [], 0
        ranked = np.argsort(_row_score_keys(rows, scores))  # equal scores in any order: fixed below
        starts = np.searchsorted(rows[ranked], touched)
        chosen = ranked[starts[:, None] + np.arange(k)[None, :]]
        _ties_by_column(chosen, ranked, starts, columns, scores)
        self.scores[touched] = scores[chosen]
        self.columns[touched] = columns[chosen]
        self.threshold[touched] = self.scores[touched, k - 1]


def _ties_by_column(
    chosen: np.ndarray, ranked: np.ndarray, starts: np.ndarray, columns: np.ndarray, scores: np.ndarray
) -> None:
    """Re-choose by (score from the largest, column) the rows of ``chosen`` where equal scores meet.

    Those are the rows with two equal scores among their ``k`` chosen, or whose ``k``-th score
    equals the next one: there the integer sort left the choice among equal scores open.
    """
    k = chosen.shape[1]
    kept = scores[chosen]
    ends = np.append(starts[1:], ranked.size)
    following = np.minimum(starts + k, ranked.size - 1)
    cut = (ends - starts > k) & (scores[ranked[following]] == kept[:, -1])
    for row in np.flatnonzero((kept[:, 1:] == kept[:, :-1]).any(axis=1) | cut):
        entries = ranked[starts[row] : ends[row]]
        chosen[row] = entries[np.lexsort((columns[entries], -scores[entries]))[:k]]


def _row_score_keys(rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """uint64 keys ordering entries by row, then by score from the largest (one integer sort)."""
    bits = np.negative(scores.astype(np.float32)).view(np.uint32)
    flipped = np.where(bits >> 31, ~bits, bits | np.uint32(1 << 31))  # IEEE order as unsigned order
    keys: np.ndarray = (rows.astype(np.uint64) << np.uint64(32)) | flipped.astype(np.uint64)
    return keys


def symmetric_graph(features: np.ndarray, k: int, metric: str) -> np.ndarray:
    """Each member's ``k`` nearest other members (ids, (n, k) int64, by distance then id).

    ``features`` (n, d) float32: unit rows for ``metric="cosine"``, raw rows for ``"euclidean"``.
    ``k`` is at most ``n - 1``. See the module docstring for the method and how exact it is.
    """
    size = features.shape[0]
    if k == 0:
        return np.empty((size, 0), dtype=np.int64)
    half = (
        np.zeros(size, dtype=np.float32)
        if metric == "cosine"
        else np.einsum("ij,ij->i", features, features) / np.float32(2.0)
    )
    tile = max(TILE, k + 1)
    bounds = [*range(0, size, tile), size]
    best = _Best(size, k)

    def product(first: int, second: int) -> np.ndarray:
        with one_blas_thread():
            gram: np.ndarray = (
                features[bounds[first] : bounds[first + 1]] @ features[bounds[second] : bounds[second + 1]].T
            )
        return gram

    def diagonal(index: int, nothing: None) -> None:  # disjoint rows: any thread
        low, high = bounds[index], bounds[index + 1]
        scores = product(index, index)
        scores -= half[None, low:high]
        np.fill_diagonal(scores, -np.inf)
        width = min(k, high - low - 1)
        if width == 0:
            return
        columns = np.argpartition(-scores, width - 1, axis=1)[:, :width]
        kept = np.take_along_axis(scores, columns, axis=1)
        # argpartition leaves the chosen in any order (numpy's choice); a graph of one tile is never
        # merged, so order each row here: by score from the largest, then by column
        order = np.lexsort((columns, -kept), axis=1)
        best.scores[low:high, :width] = np.take_along_axis(kept, order, axis=1)
        best.columns[low:high, :width] = np.take_along_axis(columns, order, axis=1) + low
        if width == k:  # a short last tile keeps every entry of the other tiles
            best.threshold[low:high] = best.scores[low:high].min(axis=1)

    for _ in parallel_blocks(diagonal, range(len(bounds) - 1)):
        pass
    pairs = [
        (first, second) for first in range(len(bounds) - 1) for second in range(first + 1, len(bounds) - 1)
    ]

    def off_diagonal(pair: int, nothing: None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        first, second = pairs[pair]
        row_low, column_low = bounds[first], bounds[second]
        gram = product(first, second)
        threshold = best.threshold.copy()  # read once: a merge may raise it meanwhile (still a bound)
        rows_bar = threshold[row_low : bounds[first + 1]].min() + half[column_low : bounds[second + 1]].min()
        columns_bar = (
            threshold[column_low : bounds[second + 1]].min() + half[row_low : bounds[first + 1]].min()
        )
        hits = np.flatnonzero(gram >= min(rows_bar, columns_bar))
        local_rows, local_columns = np.divmod(hits, gram.shape[1])
        values = gram.ravel()[hits]
        rows, columns = local_rows + row_low, local_columns + column_low
        forward = values - half[columns] >= threshold[rows]  # row i, column j
        backward = values - half[rows] >= threshold[columns]  # row j, column i
        return (
            np.concatenate([rows[forward], columns[backward]]),
            np.concatenate([columns[forward], rows[backward]]),
            np.concatenate(
                [values[forward] - half[columns[forward]], values[backward] - half[rows[backward]]]
            ),
        )

    for found in parallel_blocks(off_diagonal, range(len(pairs))):
        best.add(*found)
    best.merge()
    return best.columns
