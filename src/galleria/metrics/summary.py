"""Summary metrics over 0-indexed ranks (one rank per query, as :func:`retrieval_ranks` returns).

=================  =====================================================================
function           value
=================  =====================================================================
recall_from_ranks  share of queries with ``rank < K``, for every K (not rounded)
mrr_from_ranks     mean of ``1 / (rank + 1)``; 0 for ranks ≥ ``depth`` when a depth is given
median_rank        median of ``rank + 1`` (1-indexed, the papers' MdR; lower is better)
mean_rank          mean of ``rank + 1`` (1-indexed, the papers' MnR; lower is better)
=================  =====================================================================
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._validation import check_positive_int
from galleria.metrics._checks import as_ks, as_rank_vector

__all__ = ["mean_rank", "median_rank", "mrr_from_ranks", "recall_from_ranks"]


def recall_from_ranks(ranks: Any, ks: Any) -> list[float]:
    """Recall@K (hit rate) for many K at once: the share of queries whose rank is below K.

    Parameters
    ----------
    ranks : sequence of int
        0-indexed rank of every query's (best) positive, e.g. from ``retrieval_ranks``.
    ks : sequence of int
        Cut-offs, each ≥ 1; order and duplicates are kept.

    Returns
    -------
    list of float
        ``mean(ranks < K)`` for each K, not rounded (``recall_at_k`` rounds, as docs/metrics.md says).

    Raises
    ------
    TypeError
        Ranks or ks not integers (bools rejected).
    ValueError
        Ranks empty, not 1-D or negative; ks empty or ≤ 0.

    Examples
    --------
    >>> recall_from_ranks([0, 3, 1, 0], [1, 2, 10])
    [0.5, 0.75, 1.0]
    """
    values = as_rank_vector("ranks", ranks)
    cutoffs = as_ks("ks", ks)
    return [int((values < k).sum()) / len(values) for k in cutoffs]


def mrr_from_ranks(ranks: Any, depth: int | None = None) -> float:
    """Mean reciprocal rank: the mean of ``1 / (rank + 1)`` over queries.

    Parameters
    ----------
    ranks : sequence of int
        0-indexed ranks.
    depth : int, optional
        Only ranks below ``depth`` count (MRR@depth); a positive ranked deeper contributes 0.

    Examples
    --------
    >>> mrr_from_ranks([0, 1, 3])
    0.5833333333333334
    >>> mrr_from_ranks([0, 1, 3], depth=2)
    0.5
    """
    values = as_rank_vector("ranks", ranks)
    reciprocal = 1.0 / (values + 1.0)
    if depth is not None:
        reciprocal[values >= check_positive_int("depth", depth)] = 0.0
    return float(reciprocal.mean())


def median_rank(ranks: Any) -> float:
    """Median rank, 1-indexed (MdR: 1.0 means the positive is usually first).

    Examples
    --------
    >>> median_rank([0, 0, 4, 9])
    3.0
    """
    values = as_rank_vector("ranks", ranks)
    return float(np.median(values + 1))


def mean_rank(ranks: Any) -> float:
    """Mean rank, 1-indexed (MnR).

    Examples
    --------
    >>> mean_rank([0, 0, 4, 9])
    4.25
    """
    values = as_rank_vector("ranks", ranks)
    return float(np.mean(values + 1))
