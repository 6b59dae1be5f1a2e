"""GNN re-ranking (Zhang et al., "Understanding Image Retrieval Re-Ranking: A Graph Neural Network
Perspective", 2020): neighbour sets propagated twice over a k-NN graph, compared by cosine, blended
with the original similarity.

On a set of items with similarities ``s(i, j)``, let ``R_i`` be the ranking list of item ``i``
(similarities in descending order, ties to the lower position; the item itself normally first).

1. Adjacency: ``A_ij = 1`` if ``j`` is among the first ``k1`` entries of ``R_i``, else 0.
2. Edge weights: ``W_ij = s(i, j) ** 2`` for the first ``k2`` entries ``j`` of ``R_i``, else 0.
3. Unless ``k2 = 1``, two propagation rounds: ``A ← A + Aᵀ``; ``A ← W A`` (each row becomes the
   weighted sum of the rows of its ``k2`` nearest items); every row divided by its L2 norm (a zero
   row stays zero).
4. The new similarity of a query ``q`` and an item ``j`` is
   ``(1 - λ) · A_q · A_j + λ · s(q, j)``; the re-ranker's distance is one minus it.

``λ`` (``lambda_value``) is the blend the authors' current code applies (``lamb = 0.3`` in the
GPU re-ranking code of their repository, added after the 2020 paper): the propagated similarity
alone is zero for every item outside the query's two-hop neighbourhood, so those items would keep no
order at all; ``λ = 0`` gives the 2020 form. Defaults ``k1 = 26``, ``k2 = 7`` are the published
setting for Market-1501.

* :class:`GnnReranker` — one query's pool: the set is the probe followed by its candidates
  (float32, top-k selections, the propagation a sum over each row's ``k2`` neighbours).
* :func:`gnn_rerank_features` — the full probe×gallery setting on the set of probes then gallery
  items: sparse matrices (scipy) on the CPU, or, on another torch ``device`` (e.g. ``"cuda"``), the
  authors' GPU algorithm — ``topk``, a dense adjacency, an ``n²·k2`` sparse-times-dense propagation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._declare import Component
from galleria._params import Param, Space
from galleria.distances import pairwise_distances_batched
from galleria.rerank._gnn_core import (  # moved there; importable from here as before
    DEFAULT_LAMBDA as DEFAULT_LAMBDA,
)
from galleria.rerank._gnn_core import (
    ROUNDS as ROUNDS,
)
from galleria.rerank._gnn_core import (
    _normalise_rows_dense as _normalise_rows_dense,
)
from galleria.rerank._gnn_core import (
    _top_members as _top_members,
)
from galleria.rerank._gnn_core import (
    check_gnn_params as check_gnn_params,
)
from galleria.rerank._gnn_core import (
    gnn_pools as gnn_pools,
)
from galleria.rerank._gnn_features import (  # moved there; importable from here as before
    _sparse_features as _sparse_features,
)
from galleria.rerank._gnn_features import (
    _torch_device as _torch_device,
)
from galleria.rerank._gnn_features import (
    _torch_features as _torch_features,
)
from galleria.rerank._gnn_features import (
    gnn_rerank_features as gnn_rerank_features,
)
from galleria.rerank.base import PoolReranker, check_store
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = [
    "DEFAULT_LAMBDA",
    "ROUNDS",
    "GnnReranker",
    "check_gnn_params",
    "gnn_pools",
    "gnn_rerank_features",
]


class GnnReranker(PoolReranker):
    """Re-rank a store's retrieved candidates with GNN re-ranking (Zhang et al. 2020).

    For one query, the set is the probe (similarity 1 to itself) followed by its candidates; the
    probe's similarities come from the candidates' scores, those among candidates from the store's
    vectors (see :mod:`galleria.rerank.base`). Each returned candidate is scored by
    ``1 - ((1 - λ) · A_probe · A_candidate + λ · s(probe, candidate))`` (lower is better).

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        The store the candidates come from (not one on an ``ExternalSearchIndex``).
    k1 : int, default 26
        Neighbours in the initial adjacency (capped at the set size).
    k2 : int, default 7
        Neighbours each propagation sums over (``k2 <= k1``; 1 skips the propagation).
    lambda_value : float, default 0.3
        Weight ``λ`` of the original similarity in the final one, in [0, 1]: 0.3 as the authors'
        current code, 0 for the 2020 paper's propagated similarity alone.

    Raises
    ------
    TypeError
        ``store`` is not an ``InMemoryImageEmbeddingStore``; ``k1`` / ``k2`` not integers;
        ``lambda_value`` not a number.
    ValueError
        The store searches an ``ExternalSearchIndex``; ``k1`` / ``k2`` below 1; ``k2 > k1``;
        ``lambda_value`` outside [0, 1].

    Examples
    --------
    >>> vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c", "d"], vectors)
    >>> candidates = store.retrieve_by_vector([1.0, 0.05], k=4)[0]
    >>> [c.path for c in GnnReranker(store, k1=2, k2=2).rerank(candidates, top_k=2)]
    ['a', 'b']
    """

    def __init__(
        self,
        store: InMemoryImageEmbeddingStore,
        *,
        k1: int = 26,
        k2: int = 7,
        lambda_value: float = DEFAULT_LAMBDA,
    ) -> None:
        self._store = check_store(store, "GNN re-ranking")
        self._k1, self._k2, self._lambda = check_gnn_params(k1, k2, lambda_value)

    def __repr__(self) -> str:
        return (
            f"GnnReranker(k1={self._k1}, k2={self._k2}, lambda_value={self._lambda}, store={self._store!r})"
        )

    def params(self) -> dict[str, Any]:
        """The re-ranker's parameters, as its constructor takes them."""
        return {"k1": self._k1, "k2": self._k2, "lambda_value": self._lambda}

    def _scores_from_vectors(self, probe: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """As the base class, with the similarities among candidates kept in float32."""
        space = self._store.space
        among = pairwise_distances_batched(vectors, vectors, space)
        sims = 1.0 - (among * np.float32(0.5) if space == "l2" else among)
        return self._pool_scores(probe, sims)

    def _pool_scores(self, probe: np.ndarray, among: np.ndarray) -> np.ndarray:
        count, size = probe.shape
        sims = np.empty((count, size + 1, size + 1), dtype=np.float32)
        sims[:, 1:, 1:] = among
        sims[:, 0, 1:] = probe
        sims[:, 1:, 0] = probe
        sims[:, 0, 0] = 1.0
        features = gnn_pools(sims, k1=self._k1, k2=self._k2)
        propagated = np.einsum("bj,bij->bi", features[:, 0], features[:, 1:]).astype(np.float64)
        result: np.ndarray = 1.0 - ((1.0 - self._lambda) * propagated + self._lambda * probe)
        return result


def _adaptive(stats: Any) -> dict[str, Any]:
    """k1 = clip(2m, 4, 26); k2 and λ as k-reciprocal's at a majority of mutual neighbors, else 2 and 0.9."""
    from galleria.rerank.adaptive import GNN_MINORITY_LAMBDA
    from galleria.statistics import clip_round, read_statistics

    reading = read_statistics(stats)
    k1 = reading.capped(2 * reading.mutual, 4, 26)
    return {
        "k1": k1,
        "k2": min(k1, clip_round(reading.reach, 1, 7)) if reading.majority else 2,
        "lambda_value": reading.lam if reading.majority or reading.flat else GNN_MINORITY_LAMBDA,
    }


#: The declaration of GNN re-ranking (:mod:`galleria._declare`): the registry finds it here.
COMPONENT = Component(
    kind="reranker",
    name="gnn",
    label="GNN",
    summary="GNN re-ranking (Zhang et al. 2020): neighbor similarities aggregated over a kNN graph",
    params=(
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
            DEFAULT_LAMBDA,
            0.0,
            1.0,
            paper=0.3,
            space=Space("float", 0.0, 1.0),
            help="weight of the original similarity",
        ),
    ),
    build=GnnReranker,
    adaptive=_adaptive,
    pool_power=2,  # every pair of the pool is compared
    order=20,
)
