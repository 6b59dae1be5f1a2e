"""Recall@K with the tie rule of ``docs/metrics.md`` ("Recall@K: the tie rule")."""

from __future__ import annotations

from typing import Any

from galleria.metrics._checks import Positives, as_index_vector, as_ks, as_score_matrix
from galleria.metrics.ranks import ranks_of_matrix

__all__ = ["recall_at_k"]


def recall_at_k(sim_matrix: Any, ground_truth: Any, ks: Any) -> list[float]:
    """Share of queries whose ground-truth gallery item ranks among the top K, for every K in ``ks``.

    Each row of ``sim_matrix`` is ranked by descending score, ties broken by the lower gallery
    index; the ground truth's 0-indexed position is its rank, and Recall@K is the fraction of
    queries with ``rank < K``, rounded with ``round(x, 4)``.

    Parameters
    ----------
    sim_matrix : array_like, shape (n, m)
        Similarity of every query (row) to every gallery item (column); higher is better. Nested
        lists, numpy arrays and CPU torch tensors of ints or floats are accepted; ±inf is an
        ordinary score, NaN is an error.
    ground_truth : sequence of int, length n
        The gallery index of each query's correct item, in ``[0, m)``.
    ks : sequence of int
        Cut-offs, each ≥ 1. Duplicates are allowed and K larger than the gallery gives 1.0.

    Returns
    -------
    list of float
        Recall@K for each K, in the order of ``ks``, rounded to 4 decimals.

    Raises
    ------
    TypeError
        ``sim_matrix`` not numeric; a ``ground_truth`` entry or a K not an integer (bools are
        rejected, numpy integers accepted); ``ks`` not a sequence.
    ValueError
        ``sim_matrix`` not 2-D, empty or holding NaN; ``ground_truth`` of the wrong length or out of
        range; ``ks`` empty or holding a K ≤ 0.

    Notes
    -----
    No row is sorted: ``rank = #(score > g) + #(score == g and index < gt)`` with ``g`` the
    ground truth's score, counted in cache-sized row blocks, so the extra memory is a few MB
    whatever the matrix size. See :func:`galleria.metrics.retrieval_ranks` for several positives
    per query.

    Examples
    --------
    >>> sims = [[0.9, 0.1, 0.5],
    ...         [0.3, 0.3, 0.2],
    ...         [0.0, 0.8, 0.8]]
    >>> recall_at_k(sims, [0, 1, 1], [1, 2, 5])
    [0.6667, 1.0, 1.0]
    >>> recall_at_k(sims, [2, 0, 2], [1, 1, 2])
    [0.3333, 0.3333, 1.0]
    """
    scores = as_score_matrix("sim_matrix", sim_matrix)
    n, m = scores.shape
    truth = as_index_vector("ground_truth", ground_truth, n, m)
    cutoffs = as_ks("ks", ks)
    ranks = ranks_of_matrix("sim_matrix", scores, Positives(n, m, single=truth))
    return [round(int((ranks < k).sum()) / n, 4) for k in cutoffs]
