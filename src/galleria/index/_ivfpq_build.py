"""Building an IVF-PQ index: encoding shards in worker processes, and measuring its recall
at build time to choose ``probe_lists`` (what :class:`~galleria.index.ivfpq.IvfPqIndex` trains and adds with).

Recall is measured on the gallery itself: up to :data:`SAMPLE_QUERIES` of its vectors (a seeded
sample) are searched exactly (in blocks) and through the index; each query's own row is left out of
both lists, and recall@10 is the mean share of the exact ten the index finds.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import faiss as _faiss
import numpy as np

from galleria._warnings import RecallTargetWarning
from galleria.index._ivfpq_params import DEFAULT_RECALL_TARGET
from galleria.index.exact import exact_search

faiss: Any = _faiss  # its bundled stubs miss much of the SWIG API

__all__ = [
    "FAISS_ADD_BLOCK",
    "MIN_MEASURED_ROWS",
    "SAMPLE_QUERIES",
    "SHARD_ROWS",
    "add_in_threads",
    "add_parallel",
    "list_ids",
    "measure_recall",
    "merge_shards",
    "shard_bounds",
    "trained_bytes",
    "tune_probes",
]

#: Gallery vectors searched to measure recall at build time.
SAMPLE_QUERIES = 300
#: Smaller first batches are not measured (every list is probed instead).
MIN_MEASURED_ROWS = 1_000
_K = 10
#: Rows each shard holds, in Ray tasks, worker processes and this process's threads (a multiple of
#: :data:`FAISS_ADD_BLOCK`; the last shard may differ).
SHARD_ROWS = 2 * 65_536
#: The rows faiss's IVF-PQ add encodes at once (``IndexIVFPQ::add_core_o``), a multiple of the rows
#: its coarse assignment multiplies at once (``distance_compute_blas_query_bs``, 4,096).
FAISS_ADD_BLOCK = 65_536


def list_ids(ivf: Any) -> np.ndarray:
    """All ids stored in the inverted lists of ``ivf`` (any order)."""
    lists = ivf.invlists
    chunks = []
    for number in range(ivf.nlist):
        size = lists.list_size(number)
        if size:
            chunks.append(faiss.rev_swig_ptr(lists.get_ids(number), size).copy())
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def shard_bounds(count: int, shard_rows: int) -> list[tuple[int, int]]:
    """Rows ``start:stop`` of each shard of a batch of ``count`` rows: starts at multiples of
    ``shard_rows`` (a multiple of :data:`FAISS_ADD_BLOCK`, raised to faiss's matrix-product
    threshold), and a last shard below that threshold folded into the one before it.

    Examples
    --------
    >>> shard_bounds(300_000, 131_072)  # a tail of 37,856 rows joins the shard before it
    [(0, 131072), (131072, 300000)]
    >>> shard_bounds(530_000, 131_072)
    [(0, 131072), (131072, 262144), (262144, 393216), (393216, 530000)]
    >>> shard_bounds(50_000, 131_072)
    [(0, 50000)]
    """
    if shard_rows < 1 or shard_rows % FAISS_ADD_BLOCK:
        raise ValueError(f"shard_rows must be a positive multiple of {FAISS_ADD_BLOCK}, got {shard_rows}")
    threshold = int(faiss.cvar.distance_compute_blas_threshold)
    shard_rows = max(shard_rows, -(-threshold // FAISS_ADD_BLOCK) * FAISS_ADD_BLOCK)
    bounds = [(start, min(start + shard_rows, count)) for start in range(0, count, shard_rows)]
    if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < threshold:
        bounds[-2:] = [(bounds[-2][0], count)]
    return bounds


def merge_shards(index: Any, ivf: Any, shards: list[bytes], first: int) -> None:
    """Merge the serialised shard indexes ``shards`` (row order; ids from 0 of the batch) into the
    trained faiss ``index`` (whose IVF part is ``ivf``) as rows ``first ..``."""
    if ivf.direct_map.type != faiss.DirectMap.NoMap:
        ivf.set_direct_map_type(faiss.DirectMap.NoMap)  # faiss merges only without one
    for data in shards:
        shard = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8).copy())
        # The shard's ids count from the start of the batch; merge_from shifts them to the index's ids.
        ivf.merge_from(faiss.extract_index_ivf(shard), first)
        del shard
    index.ntotal = ivf.ntotal  # an OPQ wrapper counts its rows itself (merge_from fills the IVF part)


def trained_bytes(index: Any) -> bytes:
    """The trained ``index`` without its rows, serialised (what every shard starts from)."""
    empty = faiss.clone_index(index)
    empty.reset()
    return bytes(faiss.serialize_index(empty))


def add_in_threads(index: Any, ivf: Any, array: np.ndarray, first: int, threads: int) -> None:
    """Encode ``array`` (ids from ``first``) in this process: the shards of :func:`shard_bounds`, each
    by :func:`_add_shard` on one OpenMP thread, ``threads`` shards at a time (faiss releases the GIL),
    merged in row order. The same shards on the same single thread as the Ray tasks and the worker
    processes, so every engine gives the same bytes whatever the thread or worker count."""
    from concurrent.futures import ThreadPoolExecutor

    trained = trained_bytes(index)
    bounds = shard_bounds(array.shape[0], SHARD_ROWS)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(bounds)))) as pool:
        shards = list(
            pool.map(lambda bound: _add_shard(trained, array[bound[0] : bound[1]], bound[0]), bounds)
        )
    merge_shards(index, ivf, shards, first)


def _add_shard(trained: bytes, vectors: np.ndarray, first_id: int) -> bytes:
    """Worker: encode ``vectors`` (ids from ``first_id``) into a copy of the trained index; its bytes."""
    faiss.omp_set_num_threads(1)
    index = faiss.deserialize_index(np.frombuffer(trained, dtype=np.uint8).copy())
    faiss.downcast_index(faiss.extract_index_ivf(index)).pq.sync_transposed_centroids()
    ids = np.arange(first_id, first_id + vectors.shape[0], dtype=np.int64)
    index.add_with_ids(vectors, ids)
    return bytes(faiss.serialize_index(index))


def _add_shard_shared(
    trained: bytes, memory_name: str, shape: tuple[int, int], start: int, stop: int
) -> bytes:
    """Worker entry point: read rows ``start:stop`` of a shared-memory block and encode them."""
    from multiprocessing import shared_memory

    block = shared_memory.SharedMemory(name=memory_name)
    try:
        vectors = np.ndarray(shape, dtype=np.float32, buffer=block.buf)[start:stop]
        return _add_shard(trained, np.ascontiguousarray(vectors), start)
    finally:
        block.close()


def add_parallel(index: Any, ivf: Any, array: np.ndarray, first: int, workers: int) -> None:
    """Encode ``array`` (ids from ``first``) in ``workers`` processes into the trained faiss ``index``
    (whose IVF part is ``ivf``): each encodes a shard into a copy of it; the lists are merged."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import shared_memory

    trained = trained_bytes(index)
    count = array.shape[0]
    block = shared_memory.SharedMemory(create=True, size=array.nbytes)
    try:
        np.ndarray(array.shape, dtype=np.float32, buffer=block.buf)[:] = array
        bounds = shard_bounds(count, SHARD_ROWS)  # the Ray shards: the same bytes on every engine
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            futures = [
                pool.submit(_add_shard_shared, trained, block.name, array.shape, int(a), int(b))
                for a, b in bounds
            ]
            shards = [future.result() for future in futures]
    finally:
        block.close()
        block.unlink()
    merge_shards(index, ivf, shards, first)


def _without_self(found: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Each query's first ``_K`` results other than its own row."""
    kept = np.empty((found.shape[0], min(_K, found.shape[1])), dtype=np.int64)
    for number, (ids, own) in enumerate(zip(found, rows, strict=True)):
        others = ids[ids != own]
        kept[number] = others[: kept.shape[1]] if others.size >= kept.shape[1] else ids[: kept.shape[1]]
    return kept


def measure_recall(
    search: Callable[[np.ndarray, int, int], np.ndarray],
    vectors: np.ndarray,
    first: int,
    space: str,
    seed: int,
) -> Callable[[int], float]:
    """A function of ``probe_lists`` giving recall@10 on a sample of ``vectors`` (prepared as stored,
    rows ``first ..`` of the index). ``search(queries, k, probes)`` returns the index's row ids."""
    count = vectors.shape[0]
    rng = np.random.default_rng(seed + 2)
    rows = np.sort(rng.choice(count, min(SAMPLE_QUERIES, count), replace=False))
    queries = np.ascontiguousarray(vectors[rows])
    truth = _without_self(exact_search(vectors, queries, _K + 1, space)[0], rows)

    def recall(probes: int) -> float:
        found = _without_self(search(queries, _K + 1, probes) - first, rows)
        hits = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(found, truth, strict=True))
        return hits / truth.size

    return recall


#: When no number of probes reaches the target, the fewest whose recall is within this of the best.
PLATEAU = 0.005
#: A doubling of probes that gains less recall than this means the codes cap it: stop probing more.
PLATEAU_GAIN = 0.001


def tune_probes(
    recall: Callable[[int], float], lists: int, target: float, stop_at_plateau: bool = True
) -> tuple[int, float]:
    """The smallest power of two (or ``lists``) of probes whose recall reaches ``target``, with that
    recall. When none does, the codes cap the recall: the fewest probes within :data:`PLATEAU` of the
    best recall measured (probing more would cost time for nothing). With ``stop_at_plateau`` the
    doubling stops once it gains less than :data:`PLATEAU_GAIN` (the cap is reached), instead of
    going on to probe every list.

    Examples
    --------
    >>> curve = {1: 0.5, 2: 0.7, 4: 0.8, 8: 0.8, 16: 0.8, 32: 0.8}
    >>> tune_probes(curve.__getitem__, 32, 0.75)
    (4, 0.8)
    >>> calls = []
    >>> tune_probes(lambda p: calls.append(p) or curve[p], 32, 0.95), calls
    ((4, 0.8), [1, 2, 4, 8])
    """
    measured: dict[int, float] = {}
    probes = 1
    previous: float | None = None
    while True:
        probes = min(probes, lists)
        measured[probes] = value = recall(probes)
        if value >= target:
            return probes, value
        capped = stop_at_plateau and previous is not None and value - previous < PLATEAU_GAIN
        if probes == lists or capped:
            best = max(measured.values())
            fewest = min(p for p, value in measured.items() if value >= best - PLATEAU)
            return fewest, measured[fewest]
        previous = value
        probes *= 2


def choose_probes(
    search: Callable[[np.ndarray, int, int], np.ndarray],
    array: np.ndarray,
    space: str,
    params: dict[str, Any],
    report: dict[str, Any],
    seconds: dict[str, float] | None = None,
    stop_at_plateau: bool = True,
) -> None:
    """After the first batch (``array``, as stored) is in the index ``search`` queries: measure
    recall@10 on a sample of it, set ``params["probe_lists"]`` (if unset) to meet the target, warn
    when the target is out of reach, and record what was measured in ``report``."""
    automatic = params["probe_lists"] is None
    target = params["recall_target"]
    if target is None and automatic:
        target = DEFAULT_RECALL_TARGET
    measured: float | None = None
    sample = 0
    if array.shape[0] < MIN_MEASURED_ROWS or target is None:
        if automatic:
            params["probe_lists"] = params["lists"]  # a tiny gallery: probe every list
    else:
        start = time.perf_counter()
        recall = measure_recall(search, array, 0, space, params["seed"])
        if seconds is not None:
            seconds["exact sample neighbours"] = time.perf_counter() - start
        start = time.perf_counter()
        sample = min(array.shape[0], SAMPLE_QUERIES)
        if automatic:
            params["probe_lists"], measured = tune_probes(recall, params["lists"], target, stop_at_plateau)
        else:
            measured = recall(params["probe_lists"])
        if seconds is not None:
            seconds["probe search"] = time.perf_counter() - start
        if measured < target:
            warnings.warn(
                RecallTargetWarning(
                    f"the ivfpq index reaches recall@10 {measured:.3f} on {sample} sampled gallery "
                    f"vectors at probe_lists={params['probe_lists']}, below recall_target={target}: "
                    "raise subquantizers (or memory_budget), or keep_vectors=True with "
                    "rerank_candidates"
                ),
                stacklevel=4,
            )
    params["recall_target"] = target
    report.update(
        recall_at_10=None if measured is None else round(float(measured), 4),
        sample_queries=sample,
        probe_lists=int(params["probe_lists"]),
        recall_target=target,
    )
