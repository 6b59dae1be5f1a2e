"""Database-side augmentation (DBA) + αQE, as in the landmark-retrieval literature.

**DBA** replaces every gallery vector by a weighted mean of itself and its ``neighbors`` most
similar gallery vectors, with the weights of αQE (:mod:`galleria.expansion`): with unit vectors,

    ``x̃_i = normalise(x̂_i + Σ_{j ∈ N(i)} max(cos(x_i, x_j), 0) ** alpha · x̂_j)``

where ``N(i)`` excludes ``i`` itself (ties to the lower row). It is computed once per store:
:func:`augment_store` returns a new store over the augmented vectors, which records
``{"method": "dba", "neighbors": n, "alpha": a}`` in its ``augmentation`` property and keeps it,
with the augmented vectors, in its saved file.

**αQE** then expands each query with its ``aqe_neighbors`` best matches *in the augmented
gallery* and ranks again by cosine. :class:`DBAReranker` does the second ranking on a pool: given
the candidates the augmented store returned (distances ``1 - cos(q̂, x̃_i)``), it scores every
candidate by its exact cosine distance to the expanded query,

    ``q' = q̂ + Σ_{j ≤ m} w_j x̃_j``,  ``w_j = max(cos(q̂, x̃_j), 0) ** aqe_alpha``,
    ``d'_i = 1 - (cos(q̂, x̃_i) + Σ_j w_j cos(x̃_j, x̃_i)) / ‖q'‖``,

which equals a second search with the expanded query restricted to the pool. DBA + αQE works in
the ``cosine`` space only (the query's norm is not known from its distances elsewhere).

:func:`dba_aqe_rerank_features` is the full probe×gallery setting.

**Defaults and their sources.** ``neighbors = 10`` is the DBA default of the PyRetri toolbox
(Hu et al., "PyRetri: A PyTorch-based Library for Unsupervised Image Retrieval by Deep
Convolutional Neural Networks", ACM MM 2020; ``enhance_k = 10`` other items, after Arandjelović &
Zisserman, "Three things everyone should know to improve object retrieval", CVPR 2012); other
codes differ (fast-reid uses 4, and the DBA literature tunes 1–10 per dataset), so it is a
starting point to tune (``galleria tune``), not a value fitted to any data. The weighting and
``alpha = 3`` (DBA's and αQE's exponent) follow the αQE of Radenović et al. ("Fine-tuning CNN
Image Retrieval with No Human Annotation", TPAMI 2018).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._declare import Component
from galleria.rerank import _dba_record as _dba_record  # registers the store record's codec
from galleria.rerank._dba_core import (  # moved there; importable from here as before
    _BLOCK as _BLOCK,
)
from galleria.rerank._dba_core import PARAMS
from galleria.rerank._dba_core import (
    _aqe_from_rows as _aqe_from_rows,
)
from galleria.rerank._dba_core import (
    _augment as _augment,
)
from galleria.rerank._dba_core import (
    aqe_pools as aqe_pools,
)
from galleria.rerank._dba_core import (
    augment_store as augment_store,
)
from galleria.rerank._dba_core import (
    augmented_store_for as augmented_store_for,
)
from galleria.rerank._dba_core import (
    database_augmentation as database_augmentation,
)
from galleria.rerank._dba_core import (
    dba_aqe_rerank_features as dba_aqe_rerank_features,
)
from galleria.rerank.base import PoolReranker, check_store, declared_params
from galleria.statistics import clip_round, read_statistics
from galleria.store.store import InMemoryImageEmbeddingStore
from galleria.vectors import stable_smallest

__all__ = [
    "DBA_ALPHA",
    "DBA_OFF_ALPHA",
    "DBAReranker",
    "aqe_pools",
    "augment_store",
    "augmented_store_for",
    "database_augmentation",
    "dba_aqe_rerank_features",
]


class DBAReranker(PoolReranker):
    """DBA + αQE: a store augmented once, and each query's pool re-scored by the expanded query.

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        A cosine store. If it is not augmented yet, :func:`augment_store` makes the augmented copy
        here (once); if it already is (a saved augmented store), it must have been augmented with
        the same ``neighbors`` and ``alpha``.
    neighbors : int, default 10
        DBA: other gallery vectors averaged into each one (PyRetri's default; see the module).
    alpha : float, default 3.0
        DBA: the weights' exponent.
    aqe_neighbors : int, default 10
        αQE: best matches averaged into the query.
    aqe_alpha : float, default 3.0
        αQE: the weights' exponent.

    Notes
    -----
    Retrieve the candidates from :attr:`store` (the augmented store), not from the original one:
    their distances are the query's cosines to the augmented vectors that the αQE formula needs.

    Raises
    ------
    TypeError, ValueError, RuntimeError
        As :func:`augment_store`; ``ValueError`` also for a store augmented with other settings.

    Examples
    --------
    >>> vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> original = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c", "d"], vectors)
    >>> reranker = DBAReranker(original, neighbors=1, aqe_neighbors=1)
    >>> candidates = reranker.store.retrieve_by_vector([1.0, 0.05], k=4)[0]
    >>> [c.path for c in reranker.rerank(candidates, top_k=2)]
    ['a', 'b']
    """

    def __init__(
        self,
        store: InMemoryImageEmbeddingStore,
        *,
        neighbors: int | None = None,
        alpha: float | None = None,
        aqe_neighbors: int | None = None,
        aqe_alpha: float | None = None,
    ) -> None:
        check_store(store, "DBA + αQE")
        given = {
            "neighbors": neighbors,
            "alpha": alpha,
            "aqe_neighbors": aqe_neighbors,
            "aqe_alpha": aqe_alpha,
        }
        values = declared_params(COMPONENT, "DBAReranker", **given)
        self._neighbors, self._alpha = values["neighbors"], values["alpha"]
        self._aqe_neighbors, self._aqe_alpha = values["aqe_neighbors"], values["aqe_alpha"]
        self._store = augmented_store_for(store, self._neighbors, self._alpha, "DBA + αQE")

    def __repr__(self) -> str:
        return (
            f"DBAReranker(neighbors={self._neighbors}, alpha={self._alpha}, "
            f"aqe_neighbors={self._aqe_neighbors}, aqe_alpha={self._aqe_alpha}, "
            f"store={self._store!r})"
        )

    def params(self) -> dict[str, Any]:
        """The re-ranker's parameters, as its constructor takes them."""
        return {
            "neighbors": self._neighbors,
            "alpha": self._alpha,
            "aqe_neighbors": self._aqe_neighbors,
            "aqe_alpha": self._aqe_alpha,
        }

    def _pool_scores(self, probe: np.ndarray, among: np.ndarray) -> np.ndarray:
        return aqe_pools(probe, among, neighbors=self._aqe_neighbors, alpha=self._aqe_alpha)

    def _scores_from_vectors(self, probe: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        # Only the expansion's matches need their cosines to every candidate: (B, m, N), not (B, N, N).
        chosen = stable_smallest(-probe, min(self._aqe_neighbors, probe.shape[1]))
        matches = np.take_along_axis(vectors, chosen[:, :, None], axis=1)
        rows = np.einsum("bmd,bnd->bmn", matches.astype(np.float64), vectors.astype(np.float64))
        return _aqe_from_rows(probe, chosen, rows, self._aqe_alpha)


#: DBA's exponent of the neighbour weights ``cos ** α`` when it augments (the paper's 3 moves an
#: item by half a neighbour at cos 0.8; 10 by a tenth).
DBA_ALPHA = 10.0
#: DBA's exponent where the gallery does not support augmentation: every weight ``cos ** 1000`` is
#: negligible unless the neighbour is a near copy (0.37 at cos 0.999, 4e-5 at 0.99).
DBA_OFF_ALPHA = 1000.0


def _adaptive(stats: Any) -> dict[str, Any]:
    """Where s ≥ 0.5 and αQE trusts the first matches: n = clip(m·s/3, 1, 10) if spreads, else 1; else off.

    Augmenting, the expansion is αQE's own rule (two matches at α 3) and ``spreads`` as for k-reciprocal's
    k2; off: one neighbor at α 1000 and αQE's still expansion (one match at α 1000), so only near copies
    move anything."""
    from galleria.expansion import STILL_ALPHA, adaptive_expansion, trusts_first_matches

    reading = read_statistics(stats)
    if reading.majority and trusts_first_matches(stats):
        count = clip_round(reading.mutual * reading.share / 3.0, 1, 10) if reading.spreads else 1
        # the expansion as αQE's own rule: at most two matches, so the first cannot be overtaken
        expansion = adaptive_expansion(stats)
        return {
            "neighbors": count,
            "alpha": DBA_ALPHA,
            "aqe_neighbors": expansion["expansion_neighbors"],
            "aqe_alpha": expansion["expansion_alpha"],
        }
    return {"neighbors": 1, "alpha": DBA_OFF_ALPHA, "aqe_neighbors": 1, "aqe_alpha": STILL_ALPHA}


#: The declaration of DBA + αQE (:mod:`galleria._declare`): the registry finds it here.
COMPONENT = Component(
    kind="reranker",
    name="dba",
    label="DBA + αQE",
    summary="database-side augmentation, then αQE, then search again (Radenović et al.)",
    params=PARAMS,
    build=DBAReranker,
    adaptive=_adaptive,
    with_aqe=False,
    order=30,
)
