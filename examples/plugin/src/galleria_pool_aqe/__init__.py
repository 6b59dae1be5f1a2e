"""An example galleria plugin: αQE inside the re-ranking pool (``--rerank-method pool-aqe``).

The whole plugin is this module: the re-ranker, and its declaration :data:`COMPONENT`, which the
package's entry point (group ``galleria.rerankers``) names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria.components import PLUGIN_API_VERSION, Component, Param, PoolReranker, Space, read_statistics

__all__ = ["COMPONENT", "PoolAqeReranker", "pool_aqe_scores"]


def pool_aqe_scores(probe: np.ndarray, among: np.ndarray, neighbors: int, alpha: float) -> np.ndarray:
    """Scores (lower is better) of each pool: ``1 - (s_j + Σ_i w_i S_ij) / (1 + Σ_i w_i)``.

    ``probe`` (B, N) are the query's similarities to its N candidates (best first), ``among``
    (B, N, N) the candidates' similarities among themselves; the sum runs over the ``neighbors``
    most similar candidates, ``w_i = max(0, s_i) ** alpha``.

    Examples
    --------
    >>> probe = np.array([[0.9, 0.5, 0.4]])
    >>> among = np.array([[[1.0, 0.1, 0.9], [0.1, 1.0, 0.0], [0.9, 0.0, 1.0]]])
    >>> np.argsort(pool_aqe_scores(probe, among, neighbors=1, alpha=1.0)[0]).tolist()
    [0, 2, 1]
    """
    count = min(neighbors, probe.shape[1])
    best = np.argsort(-probe, axis=1, kind="stable")[:, :count]  # (B, n)
    weights = np.maximum(np.take_along_axis(probe, best, axis=1), 0.0) ** alpha  # (B, n)
    rows = np.take_along_axis(among, best[:, :, None], axis=1)  # (B, n, N)
    expanded = probe + np.einsum("bi,bij->bj", weights, rows)
    result: np.ndarray = 1.0 - expanded / (1.0 + weights.sum(axis=1, keepdims=True))
    return result


class PoolAqeReranker(PoolReranker):
    """Re-rank a store's candidates by their similarity to the query expanded within the pool."""

    def __init__(self, store: Any, *, neighbors: int = 3, alpha: float = 3.0) -> None:
        super().__init__(store, "pool αQE")  # checks the store: one whose distances it can read
        checked = COMPONENT.check({"neighbors": neighbors, "alpha": alpha})
        self._neighbors, self._alpha = checked["neighbors"], checked["alpha"]

    def params(self) -> dict[str, Any]:
        """The re-ranker's parameters, as its constructor takes them."""
        return {"neighbors": self._neighbors, "alpha": self._alpha}

    def pool_scores(self, probe: np.ndarray, among: np.ndarray) -> np.ndarray:
        """Scores of each pool (PoolReranker calls it with pools of one size at once)."""
        return pool_aqe_scores(probe, among, self._neighbors, self._alpha)


def _adaptive(stats: Any) -> dict[str, Any]:
    """One neighbor on a gallery without reciprocal structure, else two; α 3."""
    return {"neighbors": 1 if read_statistics(stats).flat else 2, "alpha": 3.0}


#: The declaration galleria reads through the entry point.
COMPONENT = Component(
    kind="reranker",
    name="pool-aqe",
    label="pool αQE",
    summary="αQE inside the pool: re-order it by similarity to the query expanded with its best candidates",
    params=(
        Param(
            "neighbors",
            int,
            3,
            1,
            1000,
            cost=True,
            space=Space("int", 1, 20, log=True),
            help="best candidates averaged into the query",
        ),
        Param(
            "alpha",
            float,
            3.0,
            0.0,
            100.0,
            space=Space("float", 0.0, 5.0),
            help="exponent of their weights max(0, cos)^alpha",
        ),
    ),
    build=PoolAqeReranker,
    adaptive=_adaptive,
    pool_power=2,
    api_version=PLUGIN_API_VERSION,
)
