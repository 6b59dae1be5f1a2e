"""The inverted-file neighbour graph (``method="ivf"``), cut into shards that any process can compute.

:func:`plan_ivf_graph` does what needs every vector once: a k-means coarse quantiser (faiss, seeded)
cuts the gallery into cells of about ``cell_size`` items, and each cell is given the ``probes``
cells whose centroids lie nearest its own (more when those hold fewer than ``k + 1`` items). It
then cuts the cells, in cell order, into shards of about :data:`SHARD_ITEMS` items — fixed by the
plan, never by the number of workers. :func:`ivf_shard` computes one shard: each cell's items
compared exactly with the items of its probed cells, every row's ``k`` nearest by (distance, id).
A row's result depends on its cell's members and candidates only, so a shard computed anywhere (one
process: :func:`galleria.index.neighbor_graph.approximate_graph`; Ray tasks:
:func:`galleria.engines.ray_graph.ray_ivf_graph`) gives the same bits.

The only approximation is a true neighbour outside the probed cells: every distance is exact.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from galleria._blas import one_blas_thread
from galleria.distances import pairwise_distances
from galleria.index.exact_blocks import BLOCK_ELEMENTS, neighbours_among

__all__ = [
    "SHARD_ITEMS",
    "IvfPlan",
    "assemble",
    "compute_shards",
    "ivf_shard",
    "plan_ivf_graph",
    "shard_inputs",
]

#: Items a shard holds at least (its last cell completes it), the last shard excepted.
SHARD_ITEMS = 1 << 16
#: Centroid rows compared at once while choosing each cell's probes.
_CENTROID_BLOCK = 1024


@dataclass(frozen=True)
class IvfPlan:
    """The cells of an inverted-file graph and what each compares with: everything but the vectors."""

    size: int
    k: int
    space: str
    #: Rows sorted by cell, and each cell's slice of them (``starts[c]:starts[c + 1]``).
    order: np.ndarray
    starts: np.ndarray
    #: Each non-empty cell's probed cells (itself first), in cell order.
    probes: tuple[np.ndarray, ...]
    cells: np.ndarray
    #: The shards: ``shards[s]:shards[s + 1]`` is a range of positions in ``cells``.
    shards: np.ndarray

    @property
    def shard_count(self) -> int:
        return int(self.shards.size) - 1


def _centroids(array: np.ndarray, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """k-means centroids (count, d) of ``array`` and each row's cell (nearest centroid)."""
    import faiss

    size, dim = array.shape
    sample = np.random.default_rng(seed).choice(size, size=min(size, count * 64), replace=False)
    kmeans = faiss.Kmeans(dim, count, niter=12, seed=seed, verbose=False)
    kmeans.train(np.ascontiguousarray(array[np.sort(sample)]))
    centroids = np.asarray(kmeans.centroids, dtype=np.float32).reshape(count, dim)
    cells = np.empty(size, dtype=np.int64)
    step = max(1, BLOCK_ELEMENTS // count)
    for begin in range(0, size, step):
        cells[begin : begin + step] = np.argmin(
            pairwise_distances(array[begin : begin + step], centroids, "l2"), 1
        )
    return centroids, cells


def plan_ivf_graph(array: np.ndarray, k: int, space: str, count: int, probes: int, seed: int) -> IvfPlan:
    """The plan of the graph of ``array`` ((n, d) float32) over ``count`` cells, ``probes`` probed each."""
    size = array.shape[0]
    centroids, assigned = _centroids(array, count, seed)
    order = np.argsort(assigned, kind="stable")
    starts = np.searchsorted(assigned[order], np.arange(count + 1))
    sizes = np.diff(starts)
    cells = np.flatnonzero(sizes)
    chosen: list[np.ndarray] = []
    for begin in range(0, cells.size, _CENTROID_BLOCK):
        part = cells[begin : begin + _CENTROID_BLOCK]
        between = pairwise_distances(centroids[part], centroids, "l2")
        between[np.arange(part.size), part] = -1.0  # a cell probes itself first
        for row in range(part.size):
            nearest = np.argsort(between[row], kind="stable")
            enough = int(np.searchsorted(np.cumsum(sizes[nearest]), k + 1)) + 1
            chosen.append(nearest[: max(probes, enough)].astype(np.int64))
    totals = np.cumsum(sizes[cells])
    bounds = [0]
    while bounds[-1] < cells.size:  # each shard ends at the first cell that brings it to SHARD_ITEMS
        done = int(totals[bounds[-1] - 1]) if bounds[-1] else 0
        bounds.append(min(cells.size, int(np.searchsorted(totals, done + SHARD_ITEMS)) + 1))
    return IvfPlan(size, k, space, order, starts, tuple(chosen), cells, np.asarray(bounds, dtype=np.int64))


def shard_inputs(plan: IvfPlan, shard: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Shard ``shard``'s cells as (members, candidates) row arrays (candidates ascending)."""
    order, starts = plan.order, plan.starts
    work = []
    for position in range(int(plan.shards[shard]), int(plan.shards[shard + 1])):
        cell = plan.cells[position]
        members = order[starts[cell] : starts[cell + 1]]
        probed = plan.probes[position]
        candidates = np.sort(np.concatenate([order[starts[c] : starts[c + 1]] for c in probed]))
        work.append((members, candidates))
    return work


def ivf_shard(
    vectors: np.ndarray,
    work: list[tuple[np.ndarray, np.ndarray]],
    k: int,
    space: str,
    tick: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One shard: ``(rows, ids, distances)``, each member row's ``k`` nearest among its candidates."""
    rows = np.concatenate([members for members, _ in work]) if work else np.empty(0, np.int64)
    ids = np.empty((rows.size, k), dtype=np.int32)
    distances = np.empty((rows.size, k), dtype=np.float32)
    at = 0
    for members, candidates in work:
        with one_blas_thread():  # the same bits in any process (2 BLAS threads may round otherwise)
            found = neighbours_among(vectors, members, candidates, k, space, BLOCK_ELEMENTS, tick)
        ids[at : at + members.size], distances[at : at + members.size] = found
        at += members.size
    return rows, ids, distances


def assemble(
    size: int, k: int, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """The graph (n, k) from every shard's ``(rows, ids, distances)``."""
    ids = np.empty((size, k), dtype=np.int32)
    distances = np.empty((size, k), dtype=np.float32)
    for rows, part_ids, part_distances in parts:
        ids[rows], distances[rows] = part_ids, part_distances
    return ids, distances


def compute_shards(
    array: np.ndarray, plan: IvfPlan, tick: Callable[[int], None] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Every shard of ``plan`` in this process, on a thread per core (each shard's products on one
    BLAS thread, so the bits are those of any other process), and the graph they make."""
    lock = threading.Lock()

    def counted(done: int) -> None:
        if tick is not None:
            with lock:
                tick(done)

    def one(shard: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return ivf_shard(array, shard_inputs(plan, shard), plan.k, plan.space, counted)

    workers = max(1, min(os.cpu_count() or 1, plan.shard_count, 4))
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(one, range(plan.shard_count)))
    return assemble(plan.size, plan.k, parts)
