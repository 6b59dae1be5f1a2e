"""The gallery's neighbour graph: every item's ``k`` nearest *other* items, computed blockwise.

A pure core over a (n, d) float32 array of vectors as an index of ``space`` stores them (unit rows
for cosine). Row ``i`` of the result holds the ids (rows of ``vectors``) of ``i``'s ``k`` nearest
other rows and their distances in ``space`` (:mod:`galleria.distances`), sorted by distance, ties
to the lower id; ``i`` itself is never among them (another row equal to it may be).

Three ways to build it, all in blocks so that memory stays O(n·k) plus one block (and, for
``hnsw``, the HNSW graph with its copy of the vectors):

* ``exact``: every row against every row, :data:`BLOCK_ELEMENTS` distances at a time. Cost n²·d.
* ``hnsw``: a faiss HNSW graph (M=32, efConstruction=80) is built over the vectors and searched for
  every item's ``k + 1`` candidates (efSearch=128); the candidates' distances are recomputed exactly
  and sorted by (distance, id). The approximation is a true neighbour HNSW did not return. At
  1M × 128 clustered vectors, k = 30: recall@30 0.998 in 291 s on 2 cores, 1.68 GB peak
  (``benchmarks/experiments/bench_graph.py``; M=16 / efConstruction=40 gave 0.924 in 229 s).
* ``ivf``: an inverted-file pass. A k-means coarse quantiser (faiss) cuts the gallery into cells
  of about ``cell_size`` items; the items of a cell are compared, exactly, with the items of the
  ``probes`` cells whose centroids lie nearest the cell's own centroid (more when those hold fewer
  than ``k + 1`` items). The candidates' distances are the exact ones, so the only approximation
  is a true neighbour lying outside the probed cells. Cost about n·probes·cell_size·d.

Each builder takes an optional ``on_progress(phase, done, total)``, given the rows done: phase
:data:`GRAPH_PHASE` for ``exact`` and ``ivf``; for ``hnsw``, :data:`HNSW_BUILD` (once, when every row
is added: faiss adds them in one call), then :data:`HNSW_SEARCH`.

``auto`` takes ``exact`` up to :data:`EXACT_LIMIT` items and ``hnsw`` above. ``ivf`` is cheaper per
item but misses more neighbours of items near a cell's border (benchmarks/experiments/bench_graph.py
measures it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from galleria._progress import Progress, counter
from galleria._validation import check_choice, check_positive_int
from galleria.distances import pairwise_distances
from galleria.index.exact_blocks import BLOCK_ELEMENTS, neighbours_among, smallest_sorted

__all__ = [
    "CELL_SIZE",
    "EXACT_LIMIT",
    "MAX_GRAPH_K",
    "METHODS",
    "PROBES",
    "approximate_graph",
    "build_graph",
    "check_graph_arrays",
    "check_graph_input",
    "exact_graph",
    "graph_recall",
    "hnsw_graph",
]

#: Galleries up to this size get the exact graph from ``method="auto"``.
EXACT_LIMIT = 100_000
#: The most neighbours a graph may keep per item (a file claiming more is refused).
MAX_GRAPH_K = 4096
#: The ways a graph can be built.
METHODS: tuple[str, ...] = ("auto", "exact", "hnsw", "ivf")
#: The phases the builders report to ``on_progress`` (rows, each).
GRAPH_PHASE, HNSW_BUILD, HNSW_SEARCH = "neighbour graph", "HNSW build", "HNSW search"
#: Items per cell and cells probed per cell in the ``ivf`` method (defaults).
CELL_SIZE = 512
PROBES = 16


def check_graph_input(vectors: Any, k: Any, space: str) -> tuple[np.ndarray, int]:
    """``vectors`` as a float32 matrix and the ``k`` a graph of them can hold (ValueError naming the
    argument otherwise)."""
    array = np.ascontiguousarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError(f"vectors must be a 2-D array, got shape {array.shape}")
    wanted = check_positive_int("k", k)
    if wanted > MAX_GRAPH_K:
        raise ValueError(f"k must be at most {MAX_GRAPH_K}, got {k!r}")
    check_choice("space", space, ("cosine", "ip", "l2"))
    return array, min(wanted, max(array.shape[0] - 1, 0))


def exact_graph(
    vectors: Any,
    k: Any,
    space: str,
    *,
    rows: np.ndarray | None = None,
    block_elements: int = BLOCK_ELEMENTS,
    on_progress: Progress | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The exact k-NN graph of ``vectors`` (or only of the given ``rows``, each among all rows).

    Returns ``(ids, distances)``: (m, k') int32 and float32, k' = min(k, n - 1).

    Examples
    --------
    >>> ids, distances = exact_graph(np.array([[0.0], [1.0], [3.0]]), 1, "l2")
    >>> ids.ravel().tolist(), distances.ravel().tolist()
    ([1, 0, 1], [1.0, 1.0, 4.0])
    """
    array, wanted = check_graph_input(vectors, k, space)
    size = array.shape[0]
    chosen = np.arange(size, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    everything = np.arange(size, dtype=np.int64)
    tick = counter(on_progress, GRAPH_PHASE, chosen.size)
    return neighbours_among(array, chosen, everything, wanted, space, block_elements, tick)


def approximate_graph(
    vectors: Any,
    k: Any,
    space: str,
    *,
    cell_size: int = CELL_SIZE,
    probes: int = PROBES,
    seed: int = 0,
    block_elements: int = BLOCK_ELEMENTS,
    on_progress: Progress | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The k-NN graph through an inverted file (module docstring): exact distances, probed cells.

    Same result layout as :func:`exact_graph`; deterministic for a given ``seed``. Computed in the
    shards of :mod:`galleria.index.ivf_graph`, one after the other (Ray tasks compute the same shards:
    :func:`galleria.engines.ray_graph.ray_ivf_graph`).
    """
    array, wanted = check_graph_input(vectors, k, space)
    size = array.shape[0]
    count = max(1, min(size // max(1, check_positive_int("cell_size", cell_size)), 1 << 16))
    probed = min(count, check_positive_int("probes", probes))
    if wanted == 0 or count <= probed:
        if not wanted:
            return np.empty((size, 0), dtype=np.int32), np.empty((size, 0), dtype=np.float32)
        return exact_graph(array, wanted, space, block_elements=block_elements, on_progress=on_progress)
    from galleria.index.ivf_graph import compute_shards, plan_ivf_graph

    plan = plan_ivf_graph(array, wanted, space, count, probed, seed)
    return compute_shards(array, plan, counter(on_progress, GRAPH_PHASE, size))


def _refined(
    vectors: np.ndarray, rows: np.ndarray, found: np.ndarray, k: int, space: str
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest of each row's candidates ``found`` (-1: none) by exact distance, ties by id."""
    size = vectors.shape[0]
    ordered = np.sort(np.where((found < 0) | (found == rows[:, None]), size, found), axis=1)
    real = ordered < size
    safe = np.where(real, ordered, 0)
    left = vectors[rows]
    gathered = vectors[safe]  # (b, c, d)
    gram = np.einsum("bd,bcd->bc", left, gathered)
    if space == "l2":
        squared = np.einsum("bd,bd->b", left, left)[:, None] + np.einsum("bcd,bcd->bc", gathered, gathered)
        distances = np.maximum(squared - np.float32(2.0) * gram, np.float32(0.0))
    else:
        distances = np.float32(1.0) - gram
        if space == "cosine":
            distances = np.maximum(distances, np.float32(0.0))
    distances = np.where(real, distances, np.inf).astype(np.float32)
    positions, values = smallest_sorted(distances, k)
    return np.take_along_axis(ordered, positions, axis=1).astype(np.int32), values


def hnsw_graph(
    vectors: Any,
    k: Any,
    space: str,
    *,
    m: int = 32,
    ef_construction: int = 80,
    ef_search: int = 128,
    block_rows: int = 8192,
    report: Callable[[str], None] | None = None,
    on_progress: Progress | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The k-NN graph through a faiss HNSW graph over the vectors, its candidates refined exactly.

    Each item's ``k + 1`` HNSW candidates get their exact distances (as :func:`exact_graph` computes
    them, up to float32 rounding) and are sorted by (distance, id), the item itself left out. Same
    result layout as :func:`exact_graph`. HNSW is built by several threads, so two builds may differ
    in a few neighbours. ``report`` (optional) gets a line after the build and as the search goes,
    ``on_progress`` the rows added (all at once), then the rows searched."""
    import faiss

    array, wanted = check_graph_input(vectors, k, space)
    size, dim = array.shape
    ids = np.empty((size, wanted), dtype=np.int32)
    distances = np.empty((size, wanted), dtype=np.float32)
    if wanted == 0:
        return ids, distances
    metric = faiss.METRIC_L2 if space == "l2" else faiss.METRIC_INNER_PRODUCT
    index = faiss.IndexHNSWFlat(dim, check_positive_int("m", m), metric)
    index.hnsw.efConstruction = check_positive_int("ef_construction", ef_construction)
    added = counter(on_progress, HNSW_BUILD, size)
    # In one call: added 65,536 rows at a time (for a finer progress bar), the 10⁶ duplicates benchmark
    # lost 47 of 10,000 planted pairs instead of 12 (faiss orders one call's insertions by level).
    index.add(array)
    added(size)
    if report is not None:
        report("hnsw built")
    tick = counter(on_progress, HNSW_SEARCH, size)
    index.hnsw.efSearch = max(check_positive_int("ef_search", ef_search), wanted + 1)
    for begin in range(0, size, block_rows):
        rows = np.arange(begin, min(size, begin + block_rows), dtype=np.int64)
        _, found = index.search(array[rows], min(size, wanted + 1))
        ids[rows], distances[rows] = _refined(array, rows, found, wanted, space)
        tick(rows.size)
        if report is not None and (begin // block_rows) % 16 == 15:
            report(f"searched {rows[-1] + 1} of {size}")
    return ids, distances


def build_graph(
    vectors: Any, k: Any, space: str, method: str = "auto", *, on_progress: Progress | None = None
) -> tuple[np.ndarray, np.ndarray, str]:
    """``(ids, distances, method used)``: ``auto`` is exact up to :data:`EXACT_LIMIT` items, HNSW above.

    ``on_progress(phase, done, total)`` (optional) follows the build (module docstring)."""
    chosen = check_choice("method", method, METHODS)
    size = np.shape(vectors)[0]
    if chosen == "auto":
        chosen = "exact" if size <= EXACT_LIMIT else "hnsw"
    if chosen == "exact":
        return (*exact_graph(vectors, k, space, on_progress=on_progress), chosen)
    if chosen == "hnsw":
        return (*hnsw_graph(vectors, k, space, on_progress=on_progress), chosen)
    return (*approximate_graph(vectors, k, space, on_progress=on_progress), chosen)


def graph_recall(ids: np.ndarray, exact_ids: np.ndarray) -> float:
    """Mean fraction of each row's exact neighbours found in the same row of ``ids``."""
    if exact_ids.size == 0:
        return 1.0
    hits = sum(np.intersect1d(found, truth).size for found, truth in zip(ids, exact_ids, strict=True))
    return float(hits / exact_ids.size)


def check_graph_arrays(
    ids: Any,
    distances: Any,
    size: int,
    what: str,
    *,
    vectors: np.ndarray | None = None,
    space: str = "l2",
    sample: int = 64,
    seed: int = 0,
) -> None:
    """Refuse a graph that is not one of ``size`` items (a file is untrusted): ValueError naming ``what``.

    Checks dtypes, shapes, id ranges, no item among its own neighbours, no repeated neighbour, rows
    sorted by (distance, id), finite distances; with ``vectors``, recomputes the distances of a
    sample of rows and compares them.
    """
    if not (isinstance(ids, np.ndarray) and ids.dtype == np.int32 and ids.ndim == 2):
        raise ValueError(f"{what}: the neighbour ids must be a 2-D int32 array")
    if not (
        isinstance(distances, np.ndarray) and distances.dtype == np.float32 and distances.shape == ids.shape
    ):
        raise ValueError(f"{what}: the distances must be a float32 array shaped like the ids {ids.shape}")
    count, k = ids.shape
    if count != size or k > max(size - 1, 0) or k > MAX_GRAPH_K:
        raise ValueError(f"{what}: a graph of shape {ids.shape} does not fit a store of {size} items")
    if k == 0:
        return
    if ids.min() < 0 or ids.max() >= size:
        raise ValueError(f"{what}: neighbour ids must lie in [0, {size}), got {ids.min()}..{ids.max()}")
    if not np.isfinite(distances).all():
        raise ValueError(f"{what}: the distances must be finite")
    if (ids == np.arange(size, dtype=np.int32)[:, None]).any():
        raise ValueError(f"{what}: an item is listed among its own neighbours")
    if k > 1 and (np.diff(np.sort(ids, axis=1), axis=1) == 0).any():
        raise ValueError(f"{what}: a neighbour is listed twice in one row")
    step, same = np.diff(distances, axis=1), np.diff(ids.astype(np.int64), axis=1)
    if (step < 0).any() or ((step == 0) & (same <= 0)).any():
        raise ValueError(f"{what}: rows must be sorted by distance, ties by increasing id, without repeats")
    if vectors is not None:
        rows = np.random.default_rng(seed).choice(size, size=min(size, sample), replace=False)
        left = vectors[rows][:, None, :]
        recomputed = np.stack(
            [pairwise_distances(left[i], vectors[ids[r]], space)[0] for i, r in enumerate(rows)]
        )
        if not np.allclose(recomputed, distances[rows], rtol=1e-4, atol=1e-4 * math.sqrt(vectors.shape[1])):
            raise ValueError(f"{what}: the distances do not match the store's vectors")
