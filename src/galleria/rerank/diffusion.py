"""Diffusion on the k-NN graph (Iscen et al., "Efficient Diffusion on Region Manifolds", CVPR 2017).

The items of a set are the nodes of a graph. With ``s(i, j)`` the similarity of two items, the
affinity of two *mutual* k nearest neighbours is ``a_ij = max(s(i, j), 0) ** γ`` (0 otherwise and on
the diagonal): ``j`` is among the ``k`` nearest items of ``i`` and ``i`` among those of ``j``. As
in the authors' code, **``k`` counts the item itself** (its own nearest neighbour), so each item has
``k - 1`` other neighbours (ties to the lower position); ``count_self=False`` reads ``k`` as the
number of *other* items instead (``k=49, count_self=False`` is ``k=50``). The affinity is
normalised symmetrically, ``S = D^{-1/2} A D^{-1/2}`` with ``D`` the degrees (a node without
neighbours keeps a zero row). A query is the vector ``y`` with ``y_i = max(s(q, i), 0) ** γ`` on its
``query_k`` most similar items and 0 elsewhere; its ranking scores ``f`` solve

    ``(I - α S) f = y``

by conjugate gradient (the system is symmetric positive definite for ``0 ≤ α < 1``), started at 0,
run until the residual falls to ``tol · ‖y‖`` or for ``maxiter`` iterations, and — as MATLAB's
``pcg``, which the authors use — answering the iterate with the smallest residual. Items are
ranked by ``f``, highest first; the re-ranker's score of a candidate is ``-f`` (lower is better).

Defaults follow the paper: ``α = 0.99``, ``γ = 3``, ``k = 50`` (the item and 49 others), and up to
20 iterations; the query is represented by its ``query_k = 10`` nearest items.

* :class:`DiffusionReranker` — re-ranks one query's pool on the gallery's graph truncated to the
  pool (the authors' truncation: the rows and columns of the pool's items, normalised anew). The
  gallery graph — each item's ``k - 1`` nearest others, O(n·k) — is built once per store, on first
  use, and kept beside the store while it does not change; ``graph="pool"`` builds the graph over
  the pool's candidates alone instead.
* :func:`diffusion_rerank_features` — the full probe×gallery setting: one graph over the gallery
  (scipy.sparse, built in row blocks), every probe diffused on it.
* :func:`solve_conjugate_gradient` / :func:`conjugate_gradient` — the batched solver, with the
  iterations it ran.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._declare import Component
from galleria._params import Param
from galleria._validation import (
    check_bool,
)
from galleria.distances import pairwise_distances_batched
from galleria.rerank._consistent import Prepare, Prepared
from galleria.rerank._diffusion_core import (
    COUNT_SELF,
    MAX_ITERATIONS,
    WALK_PARAMS,
    ConjugateGradientResult,
    check_diffusion_params,
    conjugate_gradient,
    diffuse_probes,
    diffusion_pools,
    gallery_system,
    graph_neighbors,
    solve_conjugate_gradient,
)
from galleria.rerank._diffusion_graph import (
    _GalleryGraph,
    gallery_graph,
    truncated_neighbors,
)
from galleria.rerank.base import (
    PoolReranker,
    check_features,
    check_store,
    declared_params,
    similarities_from_distances,
    top_similar,
)
from galleria.statistics import read_statistics
from galleria.store import GallerySnapshot
from galleria.store.store import InMemoryImageEmbeddingStore

#: The graphs a pool can be diffused on: the gallery's truncated to the pool, or the pool's own.
GRAPHS: tuple[str, ...] = ("gallery", "pool")
#: Diffusion's own parameters besides the walk's (:data:`WALK_PARAMS`), declared once.
_GRAPH = Param("graph", str, "gallery", choices=GRAPHS, help="the graph: the whole gallery or each pool")

__all__ = [
    "GRAPHS",
    "MAX_ITERATIONS",
    "ConjugateGradientResult",
    "DiffusionReranker",
    "check_diffusion_params",
    "conjugate_gradient",
    "diffusion_pools",
    "diffusion_rerank_features",
    "gallery_graph",
    "graph_neighbors",
    "graph_neighbours",
    "solve_conjugate_gradient",
    "truncated_neighbors",
    "truncated_neighbours",
]


class DiffusionReranker(PoolReranker):
    """Re-rank a store's retrieved candidates by diffusion on the mutual k-NN graph (Iscen et al. 2017).

    For one query, the graph is the store's gallery graph truncated to its candidates (the
    authors' truncation; ``graph="pool"``: a graph built over the candidates alone); affinities come
    from the similarities of the stored vectors (see :mod:`galleria.rerank.base` for how distances
    become similarities), and the query is represented by its ``query_k`` most similar candidates.
    Each returned candidate is scored by ``-f`` (lower is better).

    The gallery graph (each item's ``k - 1`` nearest others: ``4·n·(k - 1)`` bytes) is computed on
    the first re-ranking, in row blocks of the store's vectors, and kept with the store until its
    gallery changes.

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        The store the candidates come from (not one on an ``ExternalSearchIndex``).
    k : int, default 50
        Nearest neighbours per node, the node itself included as in the authors' code (so 49 others;
        capped at the gallery or pool size).
    query_k : int, default 10
        Candidates that represent the query (capped at the pool size).
    alpha : float, default 0.99
        The diffusion's weight, in [0, 1).
    gamma : float, default 3.0
        Exponent applied to the similarities.
    tol : float, default 1e-6
        Relative residual at which conjugate gradient stops.
    maxiter : int, default 20
        Most conjugate-gradient iterations (the paper's 20; the answer is the smallest-residual iterate).
    count_self : bool, default True
        Whether ``k`` counts the node itself (the authors' reading); False: ``k`` other neighbours.
    graph : {"gallery", "pool"}, default "gallery"
        The gallery's graph truncated to the pool, or a graph of the pool's candidates alone.

    Raises
    ------
    TypeError
        ``store`` is not an ``InMemoryImageEmbeddingStore``; a parameter of the wrong kind.
    ValueError
        The store searches an ``ExternalSearchIndex``; a parameter out of range.

    Examples
    --------
    >>> vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c", "d"], vectors)
    >>> candidates = store.retrieve_by_vector([1.0, 0.05], k=4)[0]
    >>> [c.path for c in DiffusionReranker(store, k=2, query_k=1).rerank(candidates, top_k=2)]
    ['a', 'b']
    """

    def __init__(
        self,
        store: InMemoryImageEmbeddingStore,
        *,
        k: int | None = None,
        query_k: int | None = None,
        alpha: float | None = None,
        gamma: float | None = None,
        tol: float | None = None,
        maxiter: int | None = None,
        count_self: bool | None = None,
        graph: str | None = None,
    ) -> None:
        self._store = check_store(store, "diffusion")
        values = declared_params(
            COMPONENT,
            "DiffusionReranker",
            k=k,
            query_k=query_k,
            alpha=alpha,
            gamma=gamma,
            tol=tol,
            maxiter=maxiter,
            count_self=count_self,
            graph=graph,
        )
        self._k, self._query_k, self._alpha, self._gamma, self._tol, self._maxiter = check_diffusion_params(
            values["k"], values["query_k"], values["alpha"], values["gamma"], values["tol"], values["maxiter"]
        )
        self._count_self = values["count_self"]
        self._graph = values["graph"]

    def __repr__(self) -> str:
        return (
            f"DiffusionReranker(k={self._k}, query_k={self._query_k}, alpha={self._alpha}, "
            f"gamma={self._gamma}, count_self={self._count_self}, graph={self._graph!r}, "
            f"store={self._store!r})"
        )

    def params(self) -> dict[str, Any]:
        """The re-ranker's parameters, as its constructor takes them."""
        return {
            "k": self._k,
            "query_k": self._query_k,
            "alpha": self._alpha,
            "gamma": self._gamma,
            "tol": self._tol,
            "maxiter": self._maxiter,
            "count_self": self._count_self,
            "graph": self._graph,
        }

    def _gallery_structure(self) -> Prepare | None:
        return None if self._graph == "pool" else self._prepare_graph

    def _prepare_graph(
        self, store: InMemoryImageEmbeddingStore, snapshot: GallerySnapshot | None
    ) -> Prepared[_GalleryGraph]:
        graph = gallery_graph(store, graph_neighbors(self._k, self._count_self), snapshot)
        return Prepared(int(graph.rows.token), graph)

    def _scores_for_pools(
        self, probe: np.ndarray, vectors: np.ndarray, rows: np.ndarray, structure: Any = None
    ) -> np.ndarray:
        if structure is None:
            return self._scores_from_vectors(probe, vectors)
        store, graph = self._store, structure
        among = pairwise_distances_batched(vectors, vectors, store.space)
        return self._diffuse(
            probe, similarities_from_distances(among, store.space), truncated_neighbors(graph, rows)
        )

    def _pool_scores(self, probe: np.ndarray, among: np.ndarray) -> np.ndarray:
        return self._diffuse(probe, among, None)

    def _diffuse(self, probe: np.ndarray, among: np.ndarray, neighbours: np.ndarray | None) -> np.ndarray:
        scores = diffusion_pools(
            probe,
            among,
            k=self._k,
            query_k=self._query_k,
            alpha=self._alpha,
            gamma=self._gamma,
            tol=self._tol,
            maxiter=self._maxiter,
            count_self=self._count_self,
            neighbours=neighbours,
        )
        return -scores


def diffusion_rerank_features(
    probe_features: Any,
    gallery_features: Any,
    *,
    k: int = WALK_PARAMS["k"].default,
    query_k: int = WALK_PARAMS["query_k"].default,
    alpha: float = WALK_PARAMS["alpha"].default,
    gamma: float = WALK_PARAMS["gamma"].default,
    tol: float = WALK_PARAMS["tol"].default,
    maxiter: int = WALK_PARAMS["maxiter"].default,
    count_self: bool = COUNT_SELF.default,
) -> np.ndarray:
    """Diffusion distances of every probe to every gallery item, on one k-NN graph of the gallery.

    Features are L2-normalised and compared by cosine. The mutual k-NN affinity of the gallery is a
    scipy.sparse matrix built in row blocks (made exactly symmetric by averaging it with its
    transpose, so rounding in the block products cannot break conjugate gradient); each probe is
    represented by its ``query_k`` most similar gallery items, and all probes are solved together.

    Parameters
    ----------
    probe_features : array_like, shape (P, d)
    gallery_features : array_like, shape (G, d)
    k, query_k, alpha, gamma, tol, maxiter, count_self
        As :class:`DiffusionReranker` (the ``k - 1`` other neighbours capped at ``G - 1``,
        ``query_k`` at ``G``).

    Returns
    -------
    numpy.ndarray
        (P, G) float64: ``-f`` for every probe (lower is closer).

    Raises
    ------
    TypeError
        Non-numeric features; a parameter of the wrong kind.
    ValueError
        Features empty, not 2-D, not finite or of different dimensions; a parameter out of range.

    Examples
    --------
    >>> gallery = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> distances = diffusion_rerank_features([[1.0, 0.05]], gallery, k=2, query_k=1)
    >>> np.argsort(distances[0], kind="stable")[:2].tolist()
    [0, 1]
    """
    neighbours, query_neighbours, weight, power, tolerance, iterations = check_diffusion_params(
        k, query_k, alpha, gamma, tol, maxiter
    )
    others = graph_neighbors(neighbours, check_bool("count_self", count_self))
    probes = check_features("probe_features", probe_features)
    gallery = check_features("gallery_features", gallery_features, probes.shape[1])
    size = gallery.shape[0]
    graph_k = min(others, size - 1)
    nearest = top_similar(gallery, gallery, graph_k, exclude_self=True) if graph_k > 0 else None
    system = gallery_system(size, nearest, weight, power)
    chosen, similarities = top_similar(probes, gallery, min(query_neighbours, size))
    return diffuse_probes(system, chosen, similarities, power, tolerance, iterations)


#: The diffusions' α (weight of the walk against the query's own similarities) when they diffuse.
DIFFUSION_ALPHA = 0.9


def _adaptive(stats: Any) -> dict[str, Any]:
    """query_k 1, k = clip(2m, 10, 30), α 0.9, γ 3 (docs/reranking.md); α 0 (the original order) where
    αQE does not trust an item's first matches: the walk starts at the best match, so where that is
    too often of another class it orders the rest by their ties to the wrong class."""
    from galleria.expansion import trusts_first_matches

    reading = read_statistics(stats)
    walk = DIFFUSION_ALPHA if trusts_first_matches(stats) else 0.0
    return {"k": reading.capped(2 * reading.mutual, 10, 30), "query_k": 1, "alpha": walk, "gamma": 3.0}


#: The declaration of diffusion (:mod:`galleria._declare`): the registry finds it here.
COMPONENT = Component(
    kind="reranker",
    name="diffusion",
    summary="diffusion on the kNN graph (Iscen et al., CVPR 2017), solved by conjugate gradient",
    params=(
        *WALK_PARAMS.values(),
        COUNT_SELF,
        _GRAPH,
    ),
    build=DiffusionReranker,
    adaptive=_adaptive,
    prepared=True,
    pools=(100, 200, 400, 1000),
    order=10,
)


#: Deprecated spellings (public names spell "neighbor"); kept working.
graph_neighbours = graph_neighbors
truncated_neighbours = truncated_neighbors
