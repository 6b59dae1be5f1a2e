r"""k-reciprocal re-ranking of one large pool without any (N+1)×(N+1) array.

The dense cores (:mod:`galleria.rerank.pool`, :mod:`galleria.rerank.batched`) hold several arrays of
the pool's squared size, which is right for a few hundred candidates and a MemoryError for tens of
thousands (2.4 GB at 10,000). This module re-ranks one pool the way full re-ranking does it in
``mode="paper"`` (:mod:`galleria.rerank.full`; with one probe it is exactly the pool re-ranker):

1. the raw distance rows are visited in blocks; each block leaves only its rows' scale (maximum),
   their first ``k1 + 1`` ranked members and, when there are several blocks, their nearest
   ``8 (k1 + 1)`` distances;
2. reciprocity and the expansion of Eq. 4 are built on those neighbour lists, a block of rows at a
   time, giving the (row, column) pairs of the expanded sets;
3. the distances of those pairs (a few dozen per row) are read from the kept nearest ones; the rare
   blocks holding a pair beyond them are computed again, exactly as in the first pass; Eq. 7;
4. Eq. 11 and Eq. 10 only need the probe's row of ``d_J``, hence the features on the probe's support
   (the columns where the probe's expanded feature is not 0; elsewhere ``min(V_p, V_g) = 0``), a dense
   (N+1)×|support| array processed in column chunks.

Memory stays near O(N·k1) plus one block of rows and the support columns. The floating-point
operations are those of the dense core on the same values, in the same order (every sum runs left to
right; skipped terms are exact zeros), so the results are equal bit for bit, given equal raw
distances. A pool's distances come from BLAS matrix products, whose last bit can depend on the
product's shape; :class:`VectorRows` therefore computes a pool of up to ``_BLOCK_ELEMENTS ** 0.5``
members in one product shaped as the dense path's.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import scipy.sparse as sp

from galleria.distances import pairwise_distances
from galleria.rerank._common import (
    effective_ks,
    ordered_sum,
    ranked_and_nearest,
    ranked_members,
    reciprocal_mask,
)

__all__ = ["MatrixRows", "PoolRows", "VectorRows", "sparse_pool_core"]

#: Elements per block of distance rows (float64: 32 MB), also the bound on a chunk of support columns.
_BLOCK_ELEMENTS = 1 << 22
#: Nearest distances kept over all rows between the two passes (keys and values: 128 MB at most),
#: up to this many times ``k1 + 1`` per row: the expanded sets lie almost always among them (none
#: missed at 8 in a 5,000-pool of clustered 512-d vectors, 4,904 pairs at 1), so that the second
#: pass seldom needs to compute a block again.
_CACHE_ELEMENTS = 1 << 23
_CACHE_FACTOR = 8


class PoolRows(Protocol):
    """Raw distance rows of a pool (the probe first, then the candidates), block by block."""

    @property
    def size(self) -> int:
        """Members of the pool, the probe included."""

    def rows(self, start: int, stop: int) -> np.ndarray:
        """A new float64 array of the raw distances of members ``start:stop`` to every member."""


class MatrixRows:
    """:class:`PoolRows` of a given (N+1)×(N+1) distance matrix (read, never copied whole)."""

    def __init__(self, matrix: np.ndarray) -> None:
        self._matrix = matrix

    @property
    def size(self) -> int:
        """Members of the pool, the probe included."""
        return int(self._matrix.shape[0])

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the matrix as a new float64 array."""
        return np.array(self._matrix[start:stop], dtype=np.float64)


class VectorRows:
    """:class:`PoolRows` of a store's pool: the probe's scores and the candidates' stored vectors.

    Row 0 is ``[0, scores...]``, row ``i`` is ``[scores[i-1], d(g_i, g_1), ..., d(g_i, g_N)]`` with the
    distances of :func:`galleria.distances.pairwise_distances` in ``space`` (float32, then float64),
    as the re-ranker builds the dense pool matrix.
    """

    def __init__(self, vectors: np.ndarray, scores: np.ndarray, space: str) -> None:
        self._vectors = vectors
        self._scores = np.asarray(scores, dtype=np.float64)
        self._space = space

    @property
    def size(self) -> int:
        """Members of the pool, the probe included."""
        return int(self._scores.shape[0]) + 1

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Raw distance rows ``start:stop`` as a new float64 array (one matrix product)."""
        block = np.empty((stop - start, self.size), dtype=np.float64)
        first = max(start, 1)
        if start == 0:
            block[0, 0] = 0.0
            block[0, 1:] = self._scores
        if stop > first:
            block[first - start :, 1:] = pairwise_distances(
                self._vectors[first - 1 : stop - 1], self._vectors, self._space
            )
            block[first - start :, 0] = self._scores[first - 1 : stop - 1]
        return block


def block_rows(size: int) -> int:
    """Rows per block for a pool of ``size`` members: about ``_BLOCK_ELEMENTS`` entries, at least 2."""
    return max(2, _BLOCK_ELEMENTS // max(1, size))


def sparse_pool_core(source: PoolRows, k1: int, k2: int, lambda_value: float) -> np.ndarray:
    """``d*`` of a pool's N candidates (shape (N,), float64), equal to the dense pool core's.

    Parameters
    ----------
    source : PoolRows
        The pool's raw distance rows (at least 2 members).
    k1, k2, lambda_value
        Validated hyper-parameters (``k2 <= k1``); ``k1`` and ``k2`` are capped as for a pool.
    """
    size = source.size
    first, second, half = effective_ks(k1, k2, size - 1)
    step = block_rows(size)
    ranking, scales, probe_row, kept = _first_pass(source, first + 1, step)

    # Eqs. 3-4 on the neighbour lists, then Eq. 7 on the expanded pairs (sorted by row, then column).
    rows, columns = _expanded_pairs(ranking, half + 1)
    if isinstance(kept, np.ndarray):  # the one block is still there
        distances = kept[rows, columns]
    else:
        distances = _pair_distances(source, rows, columns, scales, step, kept)
    del kept
    features, mass = _pair_features(rows, columns, distances, ranking, second)

    # Eq. 11 and Eq. 10 on the probe's support: the union of the expanded sets of its k2 nearest.
    smallest = _support_minima(features, ranking, second)
    largest = mass[0] + mass - smallest
    jaccard = np.ones(size)
    np.subtract(1.0, smallest / np.where(largest > 0, largest, 1.0), out=jaccard, where=largest > 0)
    final = (1.0 - lambda_value) * jaccard + lambda_value * probe_row
    return np.asarray(final[1:], dtype=np.float64)


def _first_pass(
    source: PoolRows, width: int, step: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | tuple[np.ndarray, np.ndarray]]:
    """Every member's ranking list (its first ``width`` entries) and row scale, from blocks of ``step`` rows.

    Returns ``(ranking, scales, probe_row, kept)``: ``probe_row`` the probe's scaled row (for Eq. 12),
    and ``kept`` the one scaled block when a single block holds every row, else the sorted keys
    ``row · size + column`` of each row's nearest ``keep`` distances and those scaled distances.
    """
    size = source.size
    single = step >= size
    keep = min(size, max(width + 1, min(_CACHE_FACTOR * (width + 1), _CACHE_ELEMENTS // size)))
    ranking = np.empty((size, width), dtype=np.int64)
    scales = np.ones(size, dtype=np.float64)
    cached_keys = np.empty((0 if single else size, keep), dtype=np.int64)  # row · size + column
    cached = np.empty(cached_keys.shape, dtype=np.float64)
    probe_row = block = np.empty(0)
    for start in range(0, size, step):
        stop = min(start + step, size)
        block = _floored(source.rows(start, stop), start)
        peak = block.max(axis=1)
        peak[peak <= 0] = 1.0
        block /= peak[:, None]
        scales[start:stop] = peak
        if single:
            ranking[start:stop] = ranked_members(block, width, False)
        else:
            ranking[start:stop], nearest = ranked_and_nearest(block, width, keep)
            nearest.sort(axis=1)
            cached[start:stop] = np.take_along_axis(block, nearest, axis=1)
            cached_keys[start:stop] = nearest + np.arange(start, stop)[:, None] * size
        if start == 0:
            probe_row = block[0].copy()  # d(p, ·), kept for Eq. 12
    return ranking, scales, probe_row, (block if single else (cached_keys, cached))


def _pair_features(
    rows: np.ndarray, columns: np.ndarray, distances: np.ndarray, ranking: np.ndarray, second: int
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Eq. 7 on the expanded pairs: the (size, size) features, and the sum of each row after Eq. 11.

    Each feature sums to 1 (or is 0); with ``second > 1`` the sums are those of the mean of the
    ``second`` first ranked members' features, as Eq. 11 makes them.
    """
    size = ranking.shape[0]
    weights = np.exp(np.negative(distances))
    totals = np.bincount(rows, weights=weights, minlength=size)  # left to right within each row
    weights /= np.where(totals > 0, totals, 1.0)[rows]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=size))])
    features = sp.csr_matrix((weights, columns, indptr), shape=(size, size))
    mass = (totals > 0).astype(np.float64)  # each feature sums to 1 (or is 0)
    if second > 1:
        summed = mass[ranking[:, 0]]
        for position in range(1, second):
            summed += mass[ranking[:, position]]
        mass = summed / second
    return features, mass


def _support_minima(features: sp.csr_matrix, ranking: np.ndarray, second: int) -> np.ndarray:
    """``Σ min(V_p, V_g)`` for every member ``g`` (Eq. 11 then Eq. 10's numerator), on the probe's support.

    The support is the union of the expanded sets of the probe's ``second`` nearest members (outside
    it the probe's averaged feature is 0). Its columns are taken in chunks as dense arrays and the
    minima summed left to right over them.
    """
    size = ranking.shape[0]
    near = ranking[0, :second]
    indptr, columns = features.indptr, features.indices
    support = np.unique(np.concatenate([columns[indptr[i] : indptr[i + 1]] for i in near]))
    smallest = np.zeros(size)  # Σ min(V_p, V_g), left to right over the support columns
    chunk = max(1, _BLOCK_ELEMENTS // size)
    for begin in range(0, support.size, chunk):
        part = features[:, support[begin : begin + chunk]].toarray()  # (size, chunk)
        if second > 1:
            averaged = part[ranking[:, 0]]
            for position in range(1, second):
                averaged += part[ranking[:, position]]
            part = averaged / second
        minima = np.minimum(part[0], part)
        if begin:  # go on from the sums of the earlier chunks, still left to right
            minima = np.concatenate([smallest[:, None], minima], axis=1)
        smallest = ordered_sum(minima)
    return smallest


def _floored(block: np.ndarray, start: int) -> np.ndarray:
    """Raw rows ``start:`` floored at 0 with their diagonal entries set to 0, in place."""
    np.maximum(block, 0.0, out=block)
    count = block.shape[0]
    block[np.arange(count), np.arange(start, start + count)] = 0.0
    return block


def _expanded_pairs(ranking: np.ndarray, half_width: int) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. 3-4 on neighbour lists: the (row, column) pairs of every member's expanded set R*.

    ``ranking`` (n, k1 + 1) holds each member's first ranked members. Rows are taken in blocks; a
    block's sets are rows of a (rows, n) bool mask. Returns the pairs sorted by row, then column.
    """
    size, width = ranking.shape
    # R(i, k1) = ranking[i][reciprocal[i]]; R(q, k1/2) = ranking[q, :half][reciprocal_half[q]]
    reciprocal = reciprocal_mask(ranking, width, _BLOCK_ELEMENTS)
    reciprocal_half = reciprocal_mask(ranking, half_width, _BLOCK_ELEMENTS)
    half_sizes = reciprocal_half.sum(axis=1)
    step = max(1, min(_BLOCK_ELEMENTS // size, _BLOCK_ELEMENTS // (width * half_width)))
    found_rows, found_columns = [], []
    for start in range(0, size, step):
        stop = min(start + step, size)
        local = np.arange(stop - start)[:, None]
        heads = ranking[start:stop]  # q for every (i, a)
        near = reciprocal[start:stop]
        inside = np.zeros((stop - start, size), dtype=bool)
        inside[np.broadcast_to(local, near.shape)[near], heads[near]] = True  # R(i, k1)
        members = ranking[heads, :half_width]  # (rows, k1 + 1, half): candidates of R(q, k1/2)
        kept = reciprocal_half[heads]
        # Eq. 4: q ∈ R(i, k1) brings R(q, k1/2) in when |R(i, k1) ∩ R(q, k1/2)| ≥ 2/3 |R(q, k1/2)|.
        shared = (inside[local[:, :, None], members] & kept).sum(axis=2)
        accepted = near & (3 * shared >= 2 * half_sizes[heads])
        take = accepted[:, :, None] & kept
        inside[np.broadcast_to(local[:, :, None], take.shape)[take], members[take]] = True
        block_rows, block_columns = np.nonzero(inside)
        found_rows.append(block_rows + start)
        found_columns.append(block_columns)
    return np.concatenate(found_rows), np.concatenate(found_columns)


def _pair_distances(
    source: PoolRows,
    rows: np.ndarray,
    columns: np.ndarray,
    scales: np.ndarray,
    step: int,
    cache: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Scaled distances of the (row, column) pairs (sorted by row, then column).

    Read from ``cache`` (sorted keys ``row · size + column`` and their scaled distances) where it
    holds them; the blocks holding the others are computed again, as in the first pass.
    """
    size = source.size
    keys = rows * size + columns
    cached_keys, cached = cache[0].ravel(), cache[1].ravel()
    places = np.minimum(np.searchsorted(cached_keys, keys), cached_keys.size - 1)
    hit = cached_keys[places] == keys
    values = np.where(hit, cached[places], 0.0)
    missing = np.flatnonzero(~hit)
    blocks = rows[missing] // step
    bounds = np.searchsorted(blocks, np.arange(int(blocks.max(initial=0)) + 2))
    for number in np.unique(blocks).tolist():
        picked = missing[bounds[number] : bounds[number + 1]]
        start = number * step
        raw = source.rows(start, min(start + step, size))[rows[picked] - start, columns[picked]]
        raw = np.maximum(raw, 0.0)
        raw[rows[picked] == columns[picked]] = 0.0
        values[picked] = raw / scales[rows[picked]]
    return values
