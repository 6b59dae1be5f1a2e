"""Decoupled diffusion's numeric core: parameter checks, the gallery's neighbour lists and normalised
affinity, the truncated rows of the offline system (the whole offline part: :func:`offline_rows`), and
the pool-side walk (on arrays; a store is read only for the neighbour graph it keeps)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria._params import Param
from galleria._validation import check_fraction, check_nonnegative_float, check_positive_int
from galleria.rerank._diffusion_core import conjugate_gradient
from galleria.store import OfflineDiffusion, gallery_state
from galleria.store.graph import neighbor_graph
from galleria.store.store import InMemoryImageEmbeddingStore
from galleria.vectors import stable_smallest

#: Elements of one block of similarity rows while the neighbour lists are gathered (float32: 64 MB).
_BLOCK_ELEMENTS = 1 << 24


#: Unknowns of the truncated systems solved together (the items of a block times ``T``).
_SYSTEM_ELEMENTS = 1 << 16


#: The largest ``k``, ``truncation`` and ``maxiter`` of the offline part.
LARGEST = 1 << 20
#: Decoupled diffusion's own parameter (the walk's are :data:`~galleria.rerank._diffusion_core.WALK_PARAMS`).
TRUNCATION = Param(
    "truncation",
    int,
    1000,
    1,
    LARGEST,
    paper=1000,
    cost=True,
    help="gallery items each offline walk keeps",
)


def check_decoupled_params(
    k: Any, truncation: Any, query_k: Any, alpha: Any, gamma: Any, tol: Any, maxiter: Any
) -> tuple[int, int, int, float, float, float, int]:
    """Validate the decoupled-diffusion parameters; errors name the parameter and the value.

    ``k``, ``truncation``, ``query_k``, ``maxiter`` positive ints (``k``, ``truncation`` and
    ``maxiter`` at most 2**20); ``alpha`` in [0, 1); ``gamma`` and ``tol`` finite and ≥ 0.
    """
    neighbours = check_positive_int("k", k)
    size = check_positive_int("truncation", truncation)
    query_neighbours = check_positive_int("query_k", query_k)
    weight = check_fraction("alpha", alpha)
    if weight >= 1.0:
        raise ValueError(f"alpha must lie in [0, 1) for the system to be solvable, got {alpha!r}")
    power = check_nonnegative_float("gamma", gamma)
    tolerance = check_nonnegative_float("tol", tol)
    iterations = check_positive_int("maxiter", maxiter)
    for name, value in (("k", neighbours), ("truncation", size), ("maxiter", iterations)):
        if value > LARGEST:
            raise ValueError(f"{name} must be at most {LARGEST}, got {value!r}")
    return neighbours, size, query_neighbours, weight, power, tolerance, iterations


def _neighbour_lists(unit: np.ndarray, width: int, graph_k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Truncation lists and graph neighbours of every row (cosine; ties to the lower row).

    Returns ``lists`` (n, width) int32 — the row itself, then its ``width - 1`` most similar other
    rows — and the positions (n, graph_k) int32 and similarities (n, graph_k) float32 of its
    ``graph_k`` most similar other rows.
    """
    size = unit.shape[0]
    others = max(width - 1, graph_k)
    lists = np.empty((size, width), dtype=np.int32)
    lists[:, 0] = np.arange(size, dtype=np.int32)
    graph = np.empty((size, graph_k), dtype=np.int32)
    similarities = np.empty((size, graph_k), dtype=np.float32)
    step = max(1, _BLOCK_ELEMENTS // max(1, size))
    for start in range(0, size if others else 0, step):
        block = unit[start : start + step] @ unit.T
        rows = np.arange(block.shape[0])
        block[rows, start + rows] = -np.inf
        top = stable_smallest(-block, others)
        lists[start : start + step, 1:] = top[:, : width - 1]
        graph[start : start + step] = top[:, :graph_k]
        similarities[start : start + step] = np.take_along_axis(block, top[:, :graph_k], axis=1)
    return lists, graph, similarities


def _normalised_affinity(positions: np.ndarray, similarities: np.ndarray, gamma: float) -> sp.csr_matrix:
    """``S = D^{-1/2} A D^{-1/2}`` of the mutual k-NN graph given by each row's neighbour lists."""
    size, count = positions.shape
    rows = np.repeat(np.arange(size), count)
    columns = positions.ravel().astype(np.int64)
    weights = np.maximum(similarities.astype(np.float64).ravel(), 0.0) ** gamma
    directed = sp.csr_matrix((weights, (rows, columns)), shape=(size, size))
    marks = sp.csr_matrix((np.ones(rows.size), (rows, columns)), shape=(size, size))
    mutual = directed.multiply(marks.T).tocsr()
    affinity = ((mutual + mutual.T) * 0.5).tocsr()  # exactly symmetric despite block rounding
    degree = np.asarray(affinity.sum(axis=1)).ravel()
    scale = np.zeros_like(degree)
    np.divide(1.0, np.sqrt(degree), out=scale, where=degree > 0)
    normalised: sp.csr_matrix = (sp.diags(scale) @ affinity @ sp.diags(scale)).tocsr()
    normalised.sort_indices()
    return normalised


def _truncated_rows(
    normalised: sp.csr_matrix, lists: np.ndarray, alpha: float, tol: float, maxiter: int
) -> np.ndarray:
    """Solve ``(I - α S)[T(i), T(i)] x = e_first`` for every row ``T(i)`` of ``lists``; (n, T) float32.

    A block of items is solved together as one block-diagonal system: the rows of ``S`` of every
    member of every ``T(i)`` are read at once, and a per-item table maps a gallery row to its
    position in ``T(i)`` (-1 outside), so entries leaving ``T(i)`` are dropped without a sort.
    """
    items_total, width = lists.shape  # every gallery row, or a sample of them (the load witness)
    size = normalised.shape[0]
    result = np.empty((items_total, width), dtype=np.float32)
    block = max(1, _SYSTEM_ELEMENTS // width)
    # (item, gallery row) -> the row's column in the block-diagonal system (item · T + position), or -1
    local = np.full(min(block, items_total) * size, -1, dtype=np.int32)
    for start in range(0, items_total, block):
        ids = lists[start : start + block]
        count = ids.shape[0]
        items = np.arange(count, dtype=np.int64)
        flat = (items * size)[:, None] + ids
        local[flat] = np.arange(count * width, dtype=np.int32).reshape(count, width)
        rows = normalised[ids.ravel()]  # CSR rows of every member, in block order
        owner_of_entry = np.repeat(np.repeat(items * size, width), np.diff(rows.indptr))
        targets = local[owner_of_entry + rows.indices]
        kept = targets >= 0
        csum = np.empty(kept.size + 1, dtype=np.int64)
        csum[0] = 0
        np.cumsum(kept, out=csum[1:])
        matrix = sp.csr_matrix(
            (rows.data[kept], targets[kept], csum[rows.indptr]), shape=(count * width, count * width)
        )
        local[flat] = -1
        source = np.zeros((count, width), dtype=np.float64)
        source[:, 0] = 1.0

        def matvec(vectors: np.ndarray, matrix: sp.csr_matrix = matrix, count: int = count) -> np.ndarray:
            product: np.ndarray = vectors - alpha * (matrix @ vectors.ravel()).reshape(count, width)
            return product

        result[start : start + count] = conjugate_gradient(matvec, source, tol=tol, maxiter=maxiter)
    return result


def _graph_lists(
    store: InMemoryImageEmbeddingStore, width: int, graph_k: int, state: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`_neighbour_lists` of a cosine store, from its neighbour graph (galleria.store.graph),
    when that graph is of gallery ``state`` (the store held that state before and after it was
    read); None otherwise (the gallery changed: the caller computes the lists from its snapshot)."""
    if gallery_state(store) != state:
        return None
    ids, distances = neighbor_graph(store, max(width - 1, graph_k, 1))
    if gallery_state(store) != state:
        return None
    lists = np.empty((ids.shape[0], width), dtype=np.int32)
    lists[:, 0] = np.arange(ids.shape[0], dtype=np.int32)
    lists[:, 1:] = ids[:, : width - 1]
    similarities = (np.float32(1.0) - distances[:, :graph_k]).astype(np.float32)
    return lists, np.ascontiguousarray(ids[:, :graph_k]), similarities


def _offline_matrix(positions: np.ndarray, values: np.ndarray) -> sp.csr_matrix:
    """The offline rows as an (n, n) CSR matrix ``F`` (sharing the arrays; indices unsorted)."""
    count, width = positions.shape
    indptr = np.arange(0, count * width + 1, width, dtype=np.int64)
    return sp.csr_matrix((values.ravel(), positions.ravel(), indptr), shape=(count, count))


def _query_weights(similarities: np.ndarray, gamma: float) -> np.ndarray:
    weights: np.ndarray = np.maximum(np.asarray(similarities, dtype=np.float64), 0.0) ** gamma
    return weights


def _pool_diffusion(
    offline: OfflineDiffusion, candidates: np.ndarray, sources: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """``f`` at the gallery rows ``candidates``: ``Σ_j weights_j · F[sources_j, candidate]``."""
    reached = offline.positions[sources].ravel()  # (query_k · T,) gallery rows
    spread = (offline.values[sources].astype(np.float64) * weights[:, None]).ravel()
    order = np.argsort(candidates, kind="stable")
    ranked = candidates[order]
    slots = np.minimum(np.searchsorted(ranked, reached), len(ranked) - 1)
    hit = ranked[slots] == reached
    result: np.ndarray = np.bincount(order[slots[hit]], weights=spread[hit], minlength=len(candidates))
    return result


def offline_rows(
    unit: np.ndarray,
    k: int,
    truncation: int,
    alpha: float,
    gamma: float,
    tol: float,
    maxiter: int,
    store: InMemoryImageEmbeddingStore | None = None,
    state: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The offline part over L2-normalised rows ``unit`` with checked parameters: ``(positions, values)``.

    The graph's neighbour lists are the store's own neighbour graph when ``store`` (a cosine store
    whose gallery is in ``state``) keeps one that fits, else computed from ``unit``.
    """
    count = unit.shape[0]
    width = min(truncation, count)
    graph_k = min(k, count - 1)
    found = None
    if store is not None and state is not None and store.space == "cosine":  # the store's graph
        found = _graph_lists(store, width, graph_k, state)
    lists, graph, similarities = found if found is not None else _neighbour_lists(unit, width, graph_k)
    normalised = _normalised_affinity(graph, similarities, gamma)
    return lists, _truncated_rows(normalised, lists, alpha, tol, maxiter)
