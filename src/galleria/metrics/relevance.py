"""Summary metrics over ranked relevance: ``hits[i, j]`` says whether the j-th result of query i
is relevant (results best first, padded with False when a list is shorter).

With ``R`` the number of relevant gallery items of a query, ``rel_j`` its hits and
``P@j = (rel_1 + … + rel_j) / j``:

=======================  ================================================================
function                 value
=======================  ================================================================
hit_rate                 share of queries with a relevant result among the first K
mean_reciprocal_rank     mean of ``1 / j`` for the first relevant position j (0 if none)
average_precision        ``AP@K = Σ_{j ≤ K} P@j · rel_j / min(R, K)`` per query
mean_average_precision   mean of AP@K over queries (mAP@K)
interpolated_pr_curve    mean over queries of ``max_{j : recall@j ≥ r} P@j`` at recall levels r
=======================  ================================================================

Normalising AP by ``min(R, K)`` makes a perfect top-K list score 1 even when a query has more
than K relevant items. Positions beyond the depth of ``hits`` count as not relevant.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from galleria._validation import check_positive_int
from galleria.metrics._checks import as_array, as_bool_matrix, as_ks, as_relevant_counts

__all__ = [
    "average_precision",
    "hit_rate",
    "interpolated_pr_curve",
    "mean_average_precision",
    "mean_reciprocal_rank",
]

#: Recall levels of the classic 11-point curve: 0, 0.1, …, 1.0 (built as j / 10).
DEFAULT_RECALL_LEVELS: npt.NDArray[np.float64] = np.arange(11) / 10


def hit_rate(hits: Any, ks: Any) -> list[float]:
    """Share of queries with at least one relevant result among their first K, for every K.

    Parameters
    ----------
    hits : array_like of bool, shape (n, depth)
        Relevance of each ranked result, best first.
    ks : sequence of int
        Cut-offs ≥ 1 (K beyond ``depth`` uses the whole depth); order and duplicates kept.

    Returns
    -------
    list of float
        Not rounded.

    Examples
    --------
    >>> hit_rate([[False, True, False], [False, False, False]], [1, 2])
    [0.0, 0.5]
    """
    matrix = as_bool_matrix("hits", hits)
    cutoffs = as_ks("ks", ks)
    return [float(matrix[:, :k].any(axis=1).mean()) for k in cutoffs]


def mean_reciprocal_rank(hits: Any) -> float:
    """Mean over queries of ``1 / j``, j the 1-indexed position of the first relevant result.

    A query with no relevant result within the depth of ``hits`` contributes 0 (MRR@depth).

    Examples
    --------
    >>> mean_reciprocal_rank([[True, False], [False, True], [False, False]])
    0.5
    """
    matrix = as_bool_matrix("hits", hits)
    if matrix.shape[1] == 0:
        return 0.0
    found = matrix.any(axis=1)
    first = matrix.argmax(axis=1)
    return float(np.where(found, 1.0 / (first + 1.0), 0.0).mean())


def _precision_at_each_depth(matrix: npt.NDArray[np.bool_]) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative hit counts and P@j for j = 1 … depth, both (n, depth)."""
    cumulative = np.cumsum(matrix, axis=1, dtype=np.int64)
    precision = cumulative / np.arange(1, matrix.shape[1] + 1)
    return cumulative, precision


def average_precision(hits: Any, n_relevant: Any, k: int) -> npt.NDArray[np.float64]:
    """AP@K of every query: ``Σ_{j ≤ K} P@j · rel_j / min(R, K)``.

    Parameters
    ----------
    hits : array_like of bool, shape (n, depth)
        Relevance of each ranked result, best first.
    n_relevant : sequence of int, length n
        R, the number of relevant items in the gallery for each query (≥ 1, and at least the
        number of hits in the row).
    k : int
        The cut-off K ≥ 1 (results beyond ``depth`` count as not relevant).

    Returns
    -------
    numpy.ndarray of float64, shape (n,)
        Values in [0, 1]; 1 when the first ``min(R, K)`` results are all relevant.

    Raises
    ------
    TypeError
        ``hits`` not boolean, ``n_relevant`` or ``k`` not integers.
    ValueError
        Shapes that disagree, ``k ≤ 0``, a query with ``R = 0`` or with more hits than R.

    Examples
    --------
    >>> average_precision([[True, False, True], [False, True, False]], [2, 3], 3).tolist()
    [0.8333333333333333, 0.16666666666666666]
    """
    matrix = as_bool_matrix("hits", hits)
    counts = as_relevant_counts("n_relevant", n_relevant, matrix)
    cutoff = check_positive_int("k", k)
    top = matrix[:, :cutoff]
    _, precision = _precision_at_each_depth(top)
    total = np.where(top, precision, 0.0).sum(axis=1)
    result: npt.NDArray[np.float64] = total / np.minimum(counts, cutoff)
    return result


def mean_average_precision(hits: Any, n_relevant: Any, k: int) -> float:
    """mAP@K: the mean over queries of :func:`average_precision`.

    Examples
    --------
    >>> round(mean_average_precision([[True, False, True], [False, True, False]], [2, 3], 3), 6)
    0.5
    """
    return float(average_precision(hits, n_relevant, k).mean())


def _recall_levels(value: Any) -> npt.NDArray[np.float64]:
    if value is None:
        default: npt.NDArray[np.float64] = DEFAULT_RECALL_LEVELS.copy()
        return default
    levels = as_array("recall_levels", value)
    if levels.dtype.kind not in "iuf":
        raise TypeError(f"recall_levels must hold real numbers, got dtype {levels.dtype}")
    if levels.ndim != 1 or len(levels) == 0:
        raise ValueError(f"recall_levels must be a non-empty 1-D sequence, got shape {levels.shape}")
    levels = levels.astype(np.float64)
    bad = np.flatnonzero(~((levels >= 0) & (levels <= 1)))
    if len(bad):
        raise ValueError(f"recall_levels[{bad[0]}] = {levels[bad[0]]} is not in [0, 1]")
    return levels


def interpolated_pr_curve(
    hits: Any, n_relevant: Any, recall_levels: Any = None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Interpolated precision at fixed recall levels, averaged over queries.

    For a query, ``recall@j = (rel_1 + … + rel_j) / R`` and the interpolated precision at level r
    is ``max {P@j : recall@j ≥ r}`` (0 when the list never reaches recall r within its depth).

    Parameters
    ----------
    hits : array_like of bool, shape (n, depth)
        Relevance of each ranked result, best first.
    n_relevant : sequence of int, length n
        R per query (≥ 1).
    recall_levels : sequence of float, optional
        Levels in [0, 1]; by default the 11 levels 0, 0.1, …, 1.0.

    Returns
    -------
    (levels, precision) : tuple of numpy.ndarray of float64
        The levels and the mean interpolated precision at each, in the order given.

    Examples
    --------
    >>> levels, precision = interpolated_pr_curve([[True, False, True]], [2], [0.0, 0.5, 1.0])
    >>> precision.tolist()
    [1.0, 1.0, 0.6666666666666666]
    """
    matrix = as_bool_matrix("hits", hits)
    counts = as_relevant_counts("n_relevant", n_relevant, matrix)
    levels = _recall_levels(recall_levels)
    n, depth = matrix.shape
    curve = np.zeros(len(levels), dtype=np.float64)
    if depth == 0:
        return levels, curve
    cumulative, precision = _precision_at_each_depth(matrix)
    recall = cumulative / counts[:, None]
    # Best precision at or after each depth; recall only grows with depth, so the depths reaching a
    # level form a suffix that starts at the first depth reaching it.
    best_after = np.maximum.accumulate(precision[:, ::-1], axis=1)[:, ::-1]
    padded = np.concatenate([best_after, np.zeros((n, 1))], axis=1)
    for position, level in enumerate(levels):
        first = (recall < level - 1e-12).sum(axis=1)
        curve[position] = padded[np.arange(n), first].mean()
    return levels, curve
