"""Approximate diffusion of many probes against a large gallery: the gallery graph from the graph machinery.

:func:`iter_diffusion_rerank_approximate` streams what
:func:`galleria.rerank.diffusion_rerank_features` returns (``-f`` of Iscen et al.'s diffusion, a
block of probes at a time) with one step changed: each gallery item's ``k - 1`` neighbours come
from the approximate re-ranking's graph (``graph="auto"``: the exact symmetric lists up to
:data:`~galleria.rerank.approximate.SYMMETRIC_LIMIT` items, HNSW refined exactly above; or ids you
built), not from an exact pass over all gallery pairs. Their similarities are recomputed exactly, so
with an exact graph only the last bits of the affinities differ from the exact function (its
similarities come from block products, these from one dot product per pair). Each probe's
``query_k`` gallery neighbours are still found exactly (probe × gallery, blockwise). Memory: the
sparse affinity, O(G·k), and a block of probes × G for conjugate gradient — never P × G.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria._validation import check_bool
from galleria.rerank._approximate_graph import GRAPH_METHODS, SYMMETRIC_LIMIT
from galleria.rerank._diffusion_core import (
    COUNT_SELF,
    WALK_PARAMS,
    check_diffusion_params,
    conjugate_gradient,
    graph_neighbors,
)
from galleria.rerank.base import check_features, top_similar

__all__ = ["iter_diffusion_rerank_approximate"]

#: Probes solved together (as the exact function), fewer when the gallery is large.
_PROBE_BLOCK = 256
#: Entries of a (probes, G) conjugate-gradient array at most (float64: 32 MB).
_BLOCK_ELEMENTS = 1 << 22


def iter_diffusion_rerank_approximate(
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
    graph: Any = "auto",
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(probe_rows, block)``: ``block`` the (len(probe_rows), G) float64 ``-f`` of those probes.

    Arguments as :func:`galleria.rerank.diffusion_rerank_features`, plus ``graph``: ``"auto"``,
    ``"symmetric"``, ``"hnsw"``, ``"exact"`` or ``"ivf"`` (as for
    :func:`galleria.rerank.approximate.iter_k_reciprocal_rerank_approximate`, over the gallery
    alone), or a (G, >= k - 1) integer array of each gallery item's nearest other items in order.
    Arguments are checked at the call; the work starts at the first ``next``.
    :func:`galleria.metrics.reid_evaluate` consumes the pairs directly.
    """
    neighbours, query_neighbours, weight, power, tolerance, iterations = check_diffusion_params(
        k, query_k, alpha, gamma, tol, maxiter
    )
    others = graph_neighbors(neighbours, check_bool("count_self", count_self))
    probes = check_features("probe_features", probe_features)
    gallery = check_features("gallery_features", gallery_features, probes.shape[1])
    graph_k = min(others, gallery.shape[0] - 1)
    ids = _graph_ids(gallery, graph, graph_k)
    settings = (query_neighbours, weight, power, tolerance, iterations)
    return _stream(probes, gallery, ids, graph_k, settings)


def _graph_ids(gallery: np.ndarray, graph: Any, wanted: int) -> Any:
    """A method name checked, or given ids checked and cut to ``wanted`` columns."""

    if isinstance(graph, str):
        if graph not in GRAPH_METHODS:
            raise ValueError(f"graph must be one of {GRAPH_METHODS} or an array of ids, got {graph!r}")
        return graph
    array = np.asarray(graph)
    if array.dtype.kind not in "iu" or array.ndim != 2:
        raise TypeError(
            f"graph must be a method name or a 2-D array of integer ids, got {array.dtype} {array.shape}"
        )
    size = gallery.shape[0]
    if array.shape[0] != size or array.shape[1] < wanted:
        raise ValueError(
            f"graph ids must have shape ({size}, >= {wanted}) (gallery, k - 1), got {array.shape}"
        )
    kept = array[:, :wanted].astype(np.int64)
    if kept.size and (kept.min() < 0 or kept.max() >= size):
        raise ValueError(f"graph ids must lie in [0, {size}), got {kept.min()}..{kept.max()}")
    return kept


def _built(gallery: np.ndarray, method: str, wanted: int) -> np.ndarray:
    from galleria.index.neighbor_graph import build_graph
    from galleria.rerank._approximate_graph import symmetric_graph

    if method == "auto":
        method = "symmetric" if gallery.shape[0] <= SYMMETRIC_LIMIT else "hnsw"
    if method == "symmetric":
        return symmetric_graph(gallery, wanted, "cosine")
    ids, _, _ = build_graph(gallery, wanted, "cosine", method)
    return np.asarray(ids[:, :wanted], dtype=np.int64)


def _system(gallery: np.ndarray, ids: np.ndarray, alpha: float, power: float) -> sp.csr_matrix:
    """``I - α·D^-½ A D^-½`` of the mutual graph of ``ids`` (exact similarities, made symmetric)."""
    size, graph_k = ids.shape
    if graph_k == 0:
        affinity = sp.csr_matrix((size, size), dtype=np.float64)
    else:
        rows = np.repeat(np.arange(size), graph_k)
        columns = ids.ravel()
        values = np.empty(rows.size, dtype=np.float32)
        step = max(1, _BLOCK_ELEMENTS // max(1, gallery.shape[1]))
        for begin in range(0, rows.size, step):
            r, c = rows[begin : begin + step], columns[begin : begin + step]
            values[begin : begin + step] = np.einsum("ij,ij->i", gallery[r], gallery[c])
        weights = np.maximum(values.astype(np.float64), 0.0) ** power
        directed = sp.csr_matrix((weights, (rows, columns)), shape=(size, size))
        marks = sp.csr_matrix((np.ones(rows.size), (rows, columns)), shape=(size, size))
        mutual = directed.multiply(marks.T).tocsr()
        affinity = ((mutual + mutual.T) * 0.5).tocsr()
    degree = np.asarray(affinity.sum(axis=1)).ravel()
    scale = np.zeros_like(degree)
    np.divide(1.0, np.sqrt(degree), out=scale, where=degree > 0)
    normalised = (sp.diags(scale) @ affinity @ sp.diags(scale)).tocsr()
    return (sp.identity(size, format="csr") - alpha * normalised).tocsr()


def _stream(
    probes: np.ndarray,
    gallery: np.ndarray,
    graph: Any,
    graph_k: int,
    settings: tuple[int, float, float, float, int],
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The blocks (the graph and the system are built at the first ``next``)."""
    query_neighbours, alpha, power, tolerance, iterations = settings
    size = gallery.shape[0]
    if isinstance(graph, np.ndarray):
        ids = graph
    else:
        ids = _built(gallery, graph, graph_k) if graph_k > 0 else np.empty((size, 0), dtype=np.int64)
    system = _system(gallery, ids, alpha, power)
    del ids
    chosen_k = min(query_neighbours, size)
    block = max(1, min(_PROBE_BLOCK, _BLOCK_ELEMENTS // size))

    def matvec(vectors: np.ndarray) -> np.ndarray:
        product: np.ndarray = np.ascontiguousarray(np.asarray(system @ vectors.T).T)
        return product

    for begin in range(0, probes.shape[0], block):
        stop = min(probes.shape[0], begin + block)
        chosen, similarities = top_similar(probes[begin:stop], gallery, chosen_k)
        query = np.zeros((stop - begin, size), dtype=np.float64)
        values = np.maximum(similarities.astype(np.float64), 0.0) ** power
        np.put_along_axis(query, chosen, values, axis=1)
        yield np.arange(begin, stop), -conjugate_gradient(matvec, query, tol=tolerance, maxiter=iterations)
