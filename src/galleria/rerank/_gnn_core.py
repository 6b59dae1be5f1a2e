"""The GNN re-ranker's numeric core: its parameters' checks and the pool aggregation (pure, on arrays)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria._params import Param, Space

#: Propagation rounds of the published method.
ROUNDS = 2


#: The GNN's parameters, declared once (:data:`galleria.rerank.gnn.COMPONENT` lists them; the
#: constructor, the feature function and :func:`check_gnn_params` read them from here).
PARAMS: tuple[Param, ...] = (
    Param(
        "k1",
        int,
        26,
        1,
        10_000,
        paper=26,
        cost=True,
        space=Space("int", 3, 60),
        help="neighbors of each item in the graph",
    ),
    Param(
        "k2",
        int,
        7,
        1,
        10_000,
        paper=7,
        at_most="k1",
        space=Space("int", 1, 10),
        help="neighbors aggregated (at most k1)",
    ),
    Param(
        "lambda_value",
        float,
        0.3,  # the authors' current code: ``lamb=0.3``
        0.0,
        1.0,
        paper=0.3,
        space=Space("float", 0.0, 1.0),
        help="weight of the original similarity",
        key="lambda",
        trial="lambda",
    ),
)
K1, K2, LAMBDA = PARAMS
#: Weight of the original similarity in the final one (the declared default of ``lambda_value``).
DEFAULT_LAMBDA: float = LAMBDA.default


def check_gnn_params(k1: Any, k2: Any, lambda_value: Any = DEFAULT_LAMBDA) -> tuple[int, int, float]:
    """Validate ``k1``, ``k2`` (``k2 <= k1``) and ``lambda_value`` against their declarations."""
    first, second = K1.check(k1), K2.check(k2)
    if second > first:
        raise ValueError(f"k2 must not exceed k1, got k2={k2!r} > k1={k1!r}")
    return int(first), int(second), float(LAMBDA.check(lambda_value))


def _normalise_rows_dense(matrix: np.ndarray) -> np.ndarray:
    norms = np.sqrt(np.einsum("...ij,...ij->...i", matrix, matrix))[..., None]
    result: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return result


def _top_members(values: np.ndarray, k: int) -> np.ndarray:
    """Mask of every row's ``k`` largest entries, ties to the lower position (a top-k, no row sort)."""
    size = values.shape[-1]
    if k >= size:
        return np.ones(values.shape, dtype=bool)
    kth = -np.partition(-values, k - 1, axis=-1)[..., k - 1 : k]
    mask: np.ndarray = values >= kth
    flat = mask.reshape(-1, size)
    over = np.flatnonzero(np.count_nonzero(flat, axis=1) > k)  # a tie at the k-th value: rare
    if over.size:
        rows = values.reshape(-1, size)[over]
        edge = kth.reshape(-1, 1)[over]
        above = rows > edge
        tied = rows == edge
        room = k - np.count_nonzero(above, axis=1, keepdims=True)
        flat[over] = above | (tied & (np.cumsum(tied, axis=1) <= room))
    return mask


def gnn_pools(similarities: np.ndarray, *, k1: int, k2: int) -> np.ndarray:
    """The propagated neighbour features ``A`` of ``B`` sets of ``n`` items, from (B, n, n) similarities.

    ``k1`` is capped at ``n`` and ``k2`` at the capped ``k1``. Works in float32 with top-k
    selections (a partition per row, not a sort); each propagation is one sparse-times-dense
    product with ``k2`` non-zeros per row (``n²·k2`` work per set). Returns (B, n, n) float32.
    """
    count, size, _ = similarities.shape
    first = min(k1, size)
    second = min(k2, first)
    sims = np.asarray(similarities, dtype=np.float32)
    members = _top_members(sims, first)
    adjacency = members.astype(np.float32)
    if second == 1:
        return adjacency
    # W's non-zeros: the k2 nearest among each row's k1 (stable on -s over ascending positions).
    chosen = np.nonzero(members)[2].reshape(count, size, first)
    values = np.take_along_axis(sims, chosen, axis=2)
    order = np.argsort(-values, axis=2, kind="stable")[:, :, :second]
    near = np.take_along_axis(chosen, order, axis=2)
    weights = np.take_along_axis(values, order, axis=2) ** 2  # (B, n, k2)
    # Block-diagonal W over all sets: row (b, i) has its k2 non-zeros at columns (b, near_bij).
    columns = (near + (np.arange(count) * size)[:, None, None]).ravel()
    total = count * size
    propagation = sp.csr_matrix(
        (weights.ravel(), columns, np.arange(0, total * second + 1, second)), shape=(total, total)
    )
    for _ in range(ROUNDS):
        adjacency = adjacency + adjacency.transpose(0, 2, 1)
        adjacency = _normalise_rows_dense(
            np.asarray(propagation @ adjacency.reshape(total, size)).reshape(count, size, size)
        )
    return adjacency
