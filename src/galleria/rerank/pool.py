r"""k-reciprocal re-ranking of one candidate pool (Zhong et al., CVPR 2017), as defined in docs/reranking.md.

The pool is the probe (index 0) followed by its N candidates. From the (N+1)×(N+1) matrix of
original distances among them, :func:`rerank_pool` returns the final distance

.. math:: d^*(p, g_i) = (1 - \lambda)\, d_J(p, g_i) + \lambda\, d(p, g_i)

of every candidate, following Eqs. 2, 3, 4, 7, 11, 10 and 12 of the paper with these rules:

* negative distances are floored at 0, the diagonal is exactly 0, and every row is divided by its
  own maximum (rows whose maximum is 0 stay as they are); this scaled ``d`` is used everywhere;
* ranking lists are stable sorts of the scaled rows; ``N(i, k)`` is the first ``k + 1`` entries
  (the element itself, then its ``k`` nearest);
* ``R(i, k) = {j ∈ N(i, k) : i ∈ N(j, k)}``; the expansion adds ``R(q, round(k1/2))`` (half to even)
  for every ``q ∈ R(i, k1)`` with ``|R(i, k1) ∩ R(q, k1/2)| ≥ 2/3 |R(q, k1/2)|``;
* features ``V[i, j] = exp(-d(i, j))`` on the expanded set, scaled to unit L1 norm; Eq. 11 replaces
  each by the mean over the first ``k2`` entries of its ranking list (skipped when ``k2 = 1``);
* the Jaccard sums run over all N + 1 members of the pool, ``Σ max`` through the exact identity
  ``Σ max(a, b) = Σ a + Σ b - Σ min(a, b)`` (each feature sums to 1, or is 0 for a member whose
  expanded set is empty); ``d_J = 1`` where both features are 0;
* with N candidates, ``k1`` is capped at N and ``k2`` at the capped ``k1``.

The core here is pure numpy and keeps every intermediate as a dense (N+1)×(N+1) array, which is
right for pools of a few hundred candidates; :func:`rerank_pool` hands pools of
``_common.SPARSE_POOL_SIZE`` candidates or more to :mod:`galleria.rerank.sparse_pool` (same results,
memory near O(N·k1)). :mod:`galleria.rerank.batched` does many pools at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._blas import one_blas_thread
from galleria.rerank import _common
from galleria.rerank._common import (
    K1,
    K2,
    LAMBDA,
    as_float_matrix,
    check_hyperparameters,
    check_mode,
    effective_ks,
    ordered_sum,
)
from galleria.rerank.sparse_pool import MatrixRows, sparse_pool_core
from galleria.vectors import stable_smallest

__all__ = ["rerank_pool", "scale_rows"]


def scale_rows(distances: np.ndarray) -> np.ndarray:
    """The pinned original distance ``d``: floored at 0, zero diagonal, each row divided by its maximum.

    Parameters
    ----------
    distances : ndarray, shape (n, n)
        Raw distances among the members of a set.

    Returns
    -------
    ndarray, shape (n, n), float64
        A new array; rows whose maximum is 0 are left at 0.

    Examples
    --------
    >>> scale_rows(np.array([[0.0, 2.0], [4.0, 1.0]])).tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    """
    scaled = np.maximum(np.asarray(distances, dtype=np.float64), 0.0)
    np.fill_diagonal(scaled, 0.0)
    peak = scaled.max(axis=1, keepdims=True)
    np.divide(scaled, peak, out=scaled, where=peak > 0)
    return scaled


def rerank_pool(
    distances: Any,
    *,
    k1: int = K1.default,
    k2: int = K2.default,
    lambda_value: float = LAMBDA.default,
    mode: str = "paper",
) -> np.ndarray:
    """Re-rank one pool: the final k-reciprocal distances ``d*`` of its N candidates.

    Parameters
    ----------
    distances : array_like, shape (N + 1, N + 1)
        Original distances among the probe (row and column 0) and the N candidates, in pool order.
        Row 0 holds ``d(p, g_i)``; any non-negative dissimilarity works (it is scaled per row).
    k1 : int, default 20
        Neighbourhood size of the k-reciprocal sets (capped at N).
    k2 : int, default 6
        Neighbourhood size of the local query expansion (capped at the effective ``k1``); must not
        exceed ``k1``.
    lambda_value : float, default 0.3
        Weight of the original distance in ``d*``, in [0, 1].
    mode : {"paper", "reference"}, default "paper"
        ``"paper"``: the pinned rules above. ``"reference"``: the authors' published algorithm on
        the pool's set (squared distances, column-max scaling, the strict ``> 2/3`` test, Jaccard
        ``1 - m / (2 - m)``), as :func:`~galleria.rerank.k_reciprocal_rerank` with the probe as the
        one probe — so a pool's result equals torchreid's and fast-reid's re-ranking on the same
        distances.

    Returns
    -------
    ndarray, shape (N,), float64
        ``d*`` of each candidate in pool order, in [0, 1]; lower is better.

    Raises
    ------
    TypeError
        ``distances`` is not numeric, or ``k1`` / ``k2`` / ``lambda_value`` of the wrong kind.
    ValueError
        ``distances`` not square, smaller than 2×2 or not finite; ``k2 > k1``; ``lambda_value``
        outside [0, 1].

    Examples
    --------
    >>> points = np.array([0.0, 0.1, 0.2, 5.0, 5.1])
    >>> d = np.abs(points[:, None] - points[None, :])
    >>> np.argsort(rerank_pool(d, k1=2, k2=1), kind="stable").tolist()
    [0, 1, 2, 3]
    """
    matrix = as_float_matrix("distances", distances, square=True)
    if matrix.shape[0] < 2:
        raise ValueError(
            f"distances must hold the probe and at least one candidate, got shape {matrix.shape}"
        )
    first, second, weight = check_hyperparameters(k1, k2, lambda_value)
    if check_mode(mode) == "reference":
        return reference_pool(matrix, first, second, weight)
    if matrix.shape[0] - 1 >= _common.SPARSE_POOL_SIZE:
        return sparse_pool_core(MatrixRows(matrix), first, second, weight)
    return pool_core(matrix, first, second, weight)


def reference_pool(distances: np.ndarray, k1: int, k2: int, lambda_value: float) -> np.ndarray:
    """``mode="reference"`` of :func:`rerank_pool` (inputs trusted): the full reference on the pool."""
    from galleria.rerank.full import k_reciprocal_rerank

    result = k_reciprocal_rerank(
        distances[:1, 1:],
        distances[:1, :1],
        distances[1:, 1:],
        k1=k1,
        k2=k2,
        lambda_value=lambda_value,
        mode="reference",
    )
    return np.asarray(result[0], dtype=np.float64)


def pool_core(distances: np.ndarray, k1: int, k2: int, lambda_value: float) -> np.ndarray:
    """:func:`rerank_pool` without argument checks (inputs trusted)."""
    size = distances.shape[0]
    first, second, half = effective_ks(k1, k2, size - 1)
    scaled = scale_rows(distances)
    ranking = stable_smallest(scaled, first + 1)  # N(i, k1) for every member i
    rows = np.arange(size)[:, None]

    near = np.zeros((size, size), dtype=bool)
    near[rows, ranking] = True
    near_half = np.zeros((size, size), dtype=bool)
    near_half[rows, ranking[:, : half + 1]] = True
    reciprocal = near & near.T  # R(i, k1) as row i
    reciprocal_half = near_half & near_half.T  # R(q, k1/2) as row q

    # Eq. 4: |R(i, k1) ∩ R(q, k1/2)| for every pair (i, q), compared with 2/3 |R(q, k1/2)|.
    as_float = reciprocal_half.astype(np.float32)
    sizes = reciprocal_half.sum(axis=1)
    with one_blas_thread():  # small products: threads would only compete for the cores
        shared = reciprocal.astype(np.float32) @ as_float.T
        accepted = reciprocal & (3 * shared >= 2 * sizes[None, :])
        expanded = reciprocal | ((accepted.astype(np.float32) @ as_float) > 0)

    # Eq. 7 with unit L1 norm, then Eq. 11.
    features = np.zeros_like(scaled)
    np.exp(np.negative(scaled, out=features, where=expanded), out=features, where=expanded)
    totals = ordered_sum(features)[:, None]
    np.divide(features, totals, out=features, where=totals > 0)
    mass = (totals[:, 0] > 0).astype(np.float64)  # each feature sums to 1 (or is 0)
    if second > 1:
        averaged = features[ranking[:, 0]]
        summed = mass[ranking[:, 0]]
        for position in range(1, second):
            averaged += features[ranking[:, position]]
            summed += mass[ranking[:, position]]
        features = averaged / second
        mass = summed / second

    # Eq. 10 for the probe against every member, over all N + 1 columns, with
    # Σ max(V_p, V_g) = Σ V_p + Σ V_g - Σ min(V_p, V_g) (each V sums to its mass); then Eq. 12.
    smallest = ordered_sum(np.minimum(features[0], features))
    largest = mass[0] + mass - smallest
    jaccard = np.ones(size)
    np.subtract(1.0, smallest / np.where(largest > 0, largest, 1.0), out=jaccard, where=largest > 0)
    final = (1.0 - lambda_value) * jaccard + lambda_value * scaled[0]
    return np.asarray(final[1:], dtype=np.float64)
