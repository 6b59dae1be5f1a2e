"""Diffusion on the k-NN graph (Iscen et al., "Efficient Diffusion on Region Manifolds", CVPR 2017).

The items of a set are the nodes of a graph. With ``s(i, j)`` the similarity of two items, the
affinity of two *mutual* k nearest neighbours is ``a_ij = max(s(i, j), 0) ** γ`` (0 otherwise and on
the diagonal): ``j`` is among the ``k`` most similar items to ``i`` (itself excluded; ties to the
lower position) and ``i`` among those of ``j``. The affinity is normalised symmetrically,
``S = D^{-1/2} A D^{-1/2}`` with ``D`` the degrees (a node without neighbours keeps a zero row).
A query is the vector ``y`` with ``y_i = max(s(q, i), 0) ** γ`` on its ``query_k`` most similar
items and 0 elsewhere; its ranking scores ``f`` solve

    ``(I - α S) f = y``

by conjugate gradient (the system is symmetric positive definite for ``0 ≤ α < 1``), started at 0
and stopped when the residual falls to ``tol · ‖y‖`` or after ``maxiter`` iterations. Items are
ranked by ``f``, highest first; the re-ranker's score of a candidate is ``-f`` (lower is better).

Defaults follow the paper: ``α = 0.99``, ``γ = 3``, ``k = 50`` neighbours in the graph, and up to
20 iterations; the query is represented by its ``query_k = 10`` nearest items.

* :class:`DiffusionReranker` — re-ranks one query's pool: the graph is built over the candidates.
* :func:`diffusion_rerank_features` — the full probe×gallery setting: one graph over the gallery
  (scipy.sparse, built in row blocks), every probe diffused on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria._validation import check_fraction, check_nonnegative_float, check_positive_int
from galleria.rerank._common import stable_smallest
from galleria.rerank.base import PoolReranker, check_features, check_store, top_similar
from galleria.store.store import InMemoryImageEmbeddingStore

#: Probes diffused together in the full setting (their CG arrays are (block, G) float64).
_PROBE_BLOCK = 256

__all__ = [
    "DiffusionReranker",
    "check_diffusion_params",
    "conjugate_gradient",
    "diffusion_pools",
    "diffusion_rerank_features",
]


def check_diffusion_params(
    k: Any, query_k: Any, alpha: Any, gamma: Any, tol: Any, maxiter: Any
) -> tuple[int, int, float, float, float, int]:
    """Validate the diffusion parameters; errors name the parameter and the value.

    ``k``, ``query_k``, ``maxiter`` positive ints; ``alpha`` in [0, 1); ``gamma`` finite and ≥ 0;
    ``tol`` finite and ≥ 0.
    """
    neighbours = check_positive_int("k", k)
    query_neighbours = check_positive_int("query_k", query_k)
    weight = check_fraction("alpha", alpha)
    if weight >= 1.0:
        raise ValueError(f"alpha must lie in [0, 1) for the system to be solvable, got {alpha!r}")
    power = check_nonnegative_float("gamma", gamma)
    tolerance = check_nonnegative_float("tol", tol)
    iterations = check_positive_int("maxiter", maxiter)
    return neighbours, query_neighbours, weight, power, tolerance, iterations


def conjugate_gradient(
    matvec: Callable[[np.ndarray], np.ndarray], b: np.ndarray, *, tol: float, maxiter: int
) -> np.ndarray:
    """Solve many symmetric positive definite systems at once; row ``i`` of ``b`` is one right-hand side.

    ``matvec`` maps an (m, n) array of row vectors to their products with the system's matrix (each
    row with its own matrix, or all with one). Every row runs plain conjugate gradient from zero with
    its own step sizes, and stops once its residual norm is at most ``tol · ‖b_i‖`` (a zero
    right-hand side gives zero) or after ``maxiter`` iterations.

    Examples
    --------
    >>> matrix = np.array([[4.0, 1.0], [1.0, 3.0]])
    >>> x = conjugate_gradient(lambda v: v @ matrix, np.array([[1.0, 2.0]]), tol=1e-12, maxiter=10)
    >>> np.round(x, 6).tolist()
    [[0.090909, 0.636364]]
    """
    x = np.zeros_like(b)
    residual = b.copy()
    direction = residual.copy()
    squared = np.einsum("ij,ij->i", residual, residual)
    bound = (tol**2) * squared
    active = squared > bound
    for _ in range(maxiter):
        if not active.any():
            break
        product = matvec(direction)
        curvature = np.einsum("ij,ij->i", direction, product)
        step = np.zeros_like(squared)
        usable = active & (curvature > 0)
        step[usable] = squared[usable] / curvature[usable]
        x += step[:, None] * direction
        residual -= step[:, None] * product
        updated = np.einsum("ij,ij->i", residual, residual)
        active &= updated > bound
        ratio = np.zeros_like(squared)
        moving = squared > 0
        ratio[moving] = updated[moving] / squared[moving]
        direction = residual + ratio[:, None] * direction
        squared = updated
    return x


def _top_positions(similarities: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest entries along the last axis, ties to the lower position."""
    return stable_smallest(-similarities, k)


def diffusion_pools(
    probe: np.ndarray,
    among: np.ndarray,
    *,
    k: int,
    query_k: int,
    alpha: float,
    gamma: float,
    tol: float,
    maxiter: int,
) -> np.ndarray:
    """Diffusion scores ``f`` of ``B`` pools of ``N`` candidates (higher is better).

    Parameters
    ----------
    probe : array (B, N)
        Similarity of each pool's probe to its candidates.
    among : array (B, N, N)
        Similarities among each pool's candidates (the diagonal is ignored).
    k, query_k, alpha, gamma, tol, maxiter
        As in the module docstring; ``k`` is capped at ``N - 1`` and ``query_k`` at ``N``.

    Returns
    -------
    numpy.ndarray
        (B, N) float64 scores.
    """
    count, size = probe.shape
    sims = np.array(among, dtype=np.float64)
    diagonal = np.arange(size)
    sims[:, diagonal, diagonal] = -np.inf
    affinity = np.zeros((count, size, size), dtype=np.float64)
    neighbours = min(k, size - 1)
    if neighbours > 0:
        member = np.zeros((count, size, size), dtype=bool)
        top = _top_positions(sims, neighbours)
        member[np.arange(count)[:, None, None], diagonal[None, :, None], top] = True
        mutual = member & member.transpose(0, 2, 1)
        positive = np.maximum(np.where(mutual, sims, 0.0), 0.0)
        affinity = np.where(mutual, positive**gamma, 0.0)
    degree = affinity.sum(axis=2)
    scale = np.zeros_like(degree)
    np.divide(1.0, np.sqrt(degree), out=scale, where=degree > 0)
    normalised = affinity * scale[:, :, None] * scale[:, None, :]
    query = np.zeros((count, size), dtype=np.float64)
    chosen = _top_positions(np.asarray(probe, dtype=np.float64), min(query_k, size))
    values = np.maximum(np.take_along_axis(np.asarray(probe, dtype=np.float64), chosen, axis=1), 0.0)
    np.put_along_axis(query, chosen, values**gamma, axis=1)

    def matvec(vectors: np.ndarray) -> np.ndarray:
        product: np.ndarray = vectors - alpha * np.matmul(normalised, vectors[:, :, None])[:, :, 0]
        return product

    return conjugate_gradient(matvec, query, tol=tol, maxiter=maxiter)


class DiffusionReranker(PoolReranker):
    """Re-rank a store's retrieved candidates by diffusion on their mutual k-NN graph (Iscen et al. 2017).

    For one query, the graph is built over its candidates, from the similarities of their stored
    vectors (see :mod:`galleria.rerank.base` for how distances become similarities), and the query
    is represented by its ``query_k`` most similar candidates. Each returned candidate is scored by
    ``-f`` (lower is better).

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        The store the candidates come from (not one on an ``ExternalSearchIndex``).
    k : int, default 50
        Neighbours per node of the mutual k-NN graph (capped at the pool size minus one).
    query_k : int, default 10
        Candidates that represent the query (capped at the pool size).
    alpha : float, default 0.99
        The diffusion's weight, in [0, 1).
    gamma : float, default 3.0
        Exponent applied to the similarities.
    tol : float, default 1e-6
        Relative residual at which conjugate gradient stops.
    maxiter : int, default 20
        Most conjugate-gradient iterations.

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
    >>> [c.path for c in DiffusionReranker(store, k=1, query_k=1).rerank(candidates, top_k=2)]
    ['a', 'b']
    """

    def __init__(
        self,
        store: InMemoryImageEmbeddingStore,
        *,
        k: int = 50,
        query_k: int = 10,
        alpha: float = 0.99,
        gamma: float = 3.0,
        tol: float = 1e-6,
        maxiter: int = 20,
    ) -> None:
        self._store = check_store(store, "diffusion")
        self._k, self._query_k, self._alpha, self._gamma, self._tol, self._maxiter = check_diffusion_params(
            k, query_k, alpha, gamma, tol, maxiter
        )

    def __repr__(self) -> str:
        return (
            f"DiffusionReranker(k={self._k}, query_k={self._query_k}, alpha={self._alpha}, "
            f"gamma={self._gamma}, store={self._store!r})"
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
        }

    def _pool_scores(self, probe: np.ndarray, among: np.ndarray) -> np.ndarray:
        scores = diffusion_pools(
            probe,
            among,
            k=self._k,
            query_k=self._query_k,
            alpha=self._alpha,
            gamma=self._gamma,
            tol=self._tol,
            maxiter=self._maxiter,
        )
        return -scores


def diffusion_rerank_features(
    probe_features: Any,
    gallery_features: Any,
    *,
    k: int = 50,
    query_k: int = 10,
    alpha: float = 0.99,
    gamma: float = 3.0,
    tol: float = 1e-6,
    maxiter: int = 20,
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
    k, query_k, alpha, gamma, tol, maxiter
        As :class:`DiffusionReranker` (``k`` capped at ``G - 1``, ``query_k`` at ``G``).

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
    >>> distances = diffusion_rerank_features([[1.0, 0.05]], gallery, k=1, query_k=1)
    >>> np.argsort(distances[0], kind="stable")[:2].tolist()
    [0, 1]
    """
    neighbours, query_neighbours, weight, power, tolerance, iterations = check_diffusion_params(
        k, query_k, alpha, gamma, tol, maxiter
    )
    probes = check_features("probe_features", probe_features)
    gallery = check_features("gallery_features", gallery_features, probes.shape[1])
    size = gallery.shape[0]
    graph_k = min(neighbours, size - 1)
    if graph_k > 0:
        top, values = top_similar(gallery, gallery, graph_k, exclude_self=True)
        rows = np.repeat(np.arange(size), graph_k)
        weights = np.maximum(values.astype(np.float64).ravel(), 0.0) ** power
        directed = sp.csr_matrix((weights, (rows, top.ravel())), shape=(size, size))
        marks = sp.csr_matrix((np.ones(rows.size), (rows, top.ravel())), shape=(size, size))
        mutual = directed.multiply(marks.T).tocsr()
        affinity = ((mutual + mutual.T) * 0.5).tocsr()
    else:
        affinity = sp.csr_matrix((size, size), dtype=np.float64)
    degree = np.asarray(affinity.sum(axis=1)).ravel()
    scale = np.zeros_like(degree)
    np.divide(1.0, np.sqrt(degree), out=scale, where=degree > 0)
    normalised = (sp.diags(scale) @ affinity @ sp.diags(scale)).tocsr()
    system = (sp.identity(size, format="csr") - weight * normalised).tocsr()
    chosen_k = min(query_neighbours, size)
    chosen, similarities = top_similar(probes, gallery, chosen_k)

    def matvec(vectors: np.ndarray) -> np.ndarray:
        product: np.ndarray = np.ascontiguousarray(np.asarray(system @ vectors.T).T)
        return product

    result = np.empty((probes.shape[0], size), dtype=np.float64)
    for begin in range(0, probes.shape[0], _PROBE_BLOCK):  # bounds the (block, G) CG arrays
        stop = min(probes.shape[0], begin + _PROBE_BLOCK)
        query = np.zeros((stop - begin, size), dtype=np.float64)
        values = np.maximum(similarities[begin:stop].astype(np.float64), 0.0) ** power
        np.put_along_axis(query, chosen[begin:stop], values, axis=1)
        result[begin:stop] = -conjugate_gradient(matvec, query, tol=tolerance, maxiter=iterations)
    return result
