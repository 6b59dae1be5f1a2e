"""The kernel behind the protocol metrics: the positions of every positive in a ranking with junk removed.

A row of *keys* (higher is better) is ranked by descending key, ties to the lower gallery index —
the tie rule (docs/metrics.md); distances become keys by negation, which is exact. Junk items get the key
−inf, which puts them after every valid (finite) item, so that counting the items above a positive
counts valid items only: the position of a positive ``p`` among the valid items is

    rank(p) = #{j : key[j] > key[p]} + #{j < p : key[j] == key[p]}.

No row is sorted whole. Only the items whose key is at least the lowest key of a positive can
precede a positive, so those are gathered and sorted (for a good embedding, a short list), and the
positives are located in it with a binary search; an exact tie with a positive (rare with float
scores) is counted directly. With a ``depth`` only the positives ranked above it are wanted, and
the depth-th largest key (one partition) bounds the list further.

:class:`RankedPositives` holds the result for all queries in CSR form; the summary functions below
turn it into the protocols' figures. Everything here trusts its inputs (the public functions check).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from galleria.vectors import stable_smallest

__all__ = [
    "PR_LEVELS",
    "RankedPositives",
    "average_precision_full",
    "average_precision_trapezoid",
    "collect",
    "interpolated_one",
    "interpolated_pr",
    "positive_ranks",
    "rank_rows",
    "top_of_block",
]

#: Recall levels of the PR-curve points the protocols report: 0, 0.05, …, 1.
PR_LEVELS: npt.NDArray[np.float64] = np.arange(21) / 20


def positive_ranks(
    keys: np.ndarray, positives: npt.NDArray[np.int64], depth: int | None = None
) -> np.ndarray:
    """0-indexed positions of ``positives`` among the valid items of one row of ``keys``, ascending.

    ``keys`` is 1-D, finite for valid items and −inf for junk; ``positives`` are valid, distinct
    indices. With ``depth`` only the positions below ``depth`` are returned.
    """
    if positives.size == 0:
        return np.empty(0, dtype=np.int64)
    chosen = keys[positives]
    if depth is not None and depth < keys.size:
        bound = np.partition(keys, keys.size - depth)[keys.size - depth]  # the depth-th largest key
        near = chosen >= bound
        if not near.all():
            positives = positives[near]
            chosen = chosen[near]
        if positives.size == 0:
            return np.empty(0, dtype=np.int64)
    lowest = chosen.min()
    ahead = np.sort(keys[keys >= lowest])
    right = np.searchsorted(ahead, chosen, side="right")
    ranks = (ahead.size - right).astype(np.int64)
    tied = np.flatnonzero(right - np.searchsorted(ahead, chosen, side="left") > 1)
    for position in tied:  # an equal key before the positive ranks ahead of it (lower index)
        index = positives[position]
        ranks[position] += np.count_nonzero(keys[:index] == chosen[position])
    ranks.sort()
    if depth is not None:
        ranks = ranks[ranks < depth]
    return ranks


def top_of_block(keys: np.ndarray, k: int, *, junk: bool = True) -> npt.NDArray[np.int64]:
    """The first ``k`` gallery indices of every row (ranked by the tie rule), −1 past the end.

    With ``junk`` (the default) keys of −inf are junk and never listed; without, they are ordinary.
    """
    width = min(k, keys.shape[1])
    flipped = np.negative(keys)  # junk becomes +inf, after every valid item
    top = stable_smallest(flipped, width).astype(np.int64)
    if junk:
        top[np.take_along_axis(flipped, top, axis=1) == np.inf] = -1
    if width < k:
        top = np.concatenate([top, np.full((keys.shape[0], k - width), -1, dtype=np.int64)], axis=1)
    return top


def rank_rows(
    keys: np.ndarray, positive_sets: list[npt.NDArray[np.int64]], depth: int | None = None
) -> list[np.ndarray]:
    """:func:`positive_ranks` of every row of a block, with one positive set per row."""
    return [positive_ranks(keys[row], positive_sets[row], depth) for row in range(keys.shape[0])]


@dataclass(frozen=True)
class RankedPositives:
    """Sorted 0-indexed positions of every query's positives (CSR: ``ranks[indptr[i]:indptr[i + 1]]``).

    ``counts`` is the number of positives of each query (R), whether or not all were ranked (a
    ``depth`` keeps only those above it); a query with ``counts == 0`` has no positive.
    """

    indptr: npt.NDArray[np.int64]
    ranks: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]

    def of(self, query: int) -> npt.NDArray[np.int64]:
        """The sorted positions of ``query``'s (ranked) positives."""
        return self.ranks[self.indptr[query] : self.indptr[query + 1]]

    @property
    def first(self) -> npt.NDArray[np.int64]:
        """Position of each query's first positive, −1 when none was ranked."""
        lengths = np.diff(self.indptr)
        result = np.full(len(lengths), -1, dtype=np.int64)
        has = lengths > 0
        result[has] = self.ranks[self.indptr[:-1][has]]
        return result


def collect(rank_lists: list[np.ndarray], counts: npt.NDArray[np.int64]) -> RankedPositives:
    """One :class:`RankedPositives` from per-query rank arrays (in query order) and their R."""
    indptr = np.zeros(len(rank_lists) + 1, dtype=np.int64)
    np.cumsum([len(ranks) for ranks in rank_lists], out=indptr[1:])
    flat = np.concatenate(rank_lists).astype(np.int64) if rank_lists else np.empty(0, dtype=np.int64)
    return RankedPositives(indptr, flat, counts.astype(np.int64))


def _hits_and_owner(ranked: RankedPositives) -> tuple[np.ndarray, np.ndarray]:
    """For every ranked positive: its 1-based order among its query's positives, and its query."""
    lengths = np.diff(ranked.indptr)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    order = np.arange(ranked.ranks.size) - ranked.indptr[owner] + 1
    return order, owner


def average_precision_full(ranked: RankedPositives, normaliser: np.ndarray) -> npt.NDArray[np.float64]:
    """``Σ_i i / (r_i + 1) / normaliser`` over each query's ranked positives (1-based i); NaN where 0.

    With every positive ranked and ``normaliser = R`` this is the classic AP; with the positives
    above R and ``normaliser = R`` it is MAP@R.
    """
    order, owner = _hits_and_owner(ranked)
    sums = np.bincount(owner, weights=order / (ranked.ranks + 1.0), minlength=len(ranked.counts))
    result = np.full(len(ranked.counts), np.nan)
    valid = normaliser > 0
    result[valid] = sums[valid] / normaliser[valid]
    return result


def average_precision_trapezoid(ranked: RankedPositives) -> npt.NDArray[np.float64]:
    """The revisited protocol's AP: trapezoids of precision just before and at each positive, / R.

    For the i-th positive (0-based i) at position r: ``(i / r if r > 0 else 1) + (i + 1) / (r + 1)``,
    halved, times the recall step ``1 / R``. NaN for queries without positives.
    """
    order, owner = _hits_and_owner(ranked)
    ranks = ranked.ranks.astype(np.float64)
    before = np.ones_like(ranks)
    np.divide(order - 1.0, ranks, out=before, where=ranks > 0)
    at = order / (ranks + 1.0)
    sums = np.bincount(owner, weights=(before + at) / 2.0, minlength=len(ranked.counts))
    result = np.full(len(ranked.counts), np.nan)
    valid = ranked.counts > 0
    result[valid] = sums[valid] / ranked.counts[valid]
    return result


def interpolated_one(
    ranks: np.ndarray, count: int, levels: npt.NDArray[np.float64] = PR_LEVELS
) -> npt.NDArray[np.float64]:
    """One query's interpolated precision at ``levels``: ``max {P@j : recall@j ≥ level}``.

    The maximum is reached at a positive, where ``P = i / (r_i + 1)`` and ``recall = i / R``
    (1-based i); a level the ranked positives never reach scores 0.
    """
    precision = np.arange(1, ranks.size + 1) / (ranks + 1.0)
    best_after = np.maximum.accumulate(precision[::-1])[::-1] if ranks.size else precision
    padded = np.concatenate([best_after, [0.0]])
    # The first positive whose recall i / R reaches the level (a small tolerance for j / 20).
    first = np.ceil(levels * count - 1e-9).astype(np.int64) - 1
    result: npt.NDArray[np.float64] = padded[np.clip(first, 0, ranks.size)]
    return result


def interpolated_pr(
    ranked: RankedPositives, levels: npt.NDArray[np.float64] = PR_LEVELS
) -> npt.NDArray[np.float64]:
    """Mean of :func:`interpolated_one` over the queries with positives (all of them ranked)."""
    valid = np.flatnonzero(ranked.counts > 0)
    curve = np.zeros(len(levels), dtype=np.float64)
    if valid.size == 0:
        return curve
    for query in valid:
        curve += interpolated_one(ranked.of(int(query)), int(ranked.counts[query]), levels)
    result: npt.NDArray[np.float64] = curve / valid.size
    return result
