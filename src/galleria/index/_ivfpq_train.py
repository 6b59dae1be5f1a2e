"""Training an IVF-PQ index phase by phase under a bounded budget: the optional OPQ rotation, the
coarse k-means of the lists, and the PQ codebooks on a sample of residuals (exact one-dimensional
k-means when every sub-vector is one dimension, faiss's k-means otherwise), each timed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import faiss as _faiss
import numpy as np

from galleria.index._faiss import omp_threads
from galleria.index._faiss_rules import precomputed_table_bytes
from galleria.index._ivfpq_params import choose_shape

faiss: Any = _faiss  # its bundled stubs miss much of the SWIG API

__all__ = ["FAISS_DEFAULT_BUDGET", "TrainingBudget", "scalar_codebooks", "train_ivfpq"]


@dataclass(frozen=True)
class TrainingBudget:
    """How much work training may do: k-means iterations and sample sizes (faiss's cluster sizes).

    The defaults bound the PQ codebooks' k-means (``M`` clusterings of ``2**bits`` centroids, the
    bulk of training when sub-vectors are short) to ``pq_points_per_centroid`` residuals per
    centroid and ``pq_iterations`` rounds: a third of the work of faiss's own defaults (256 and
    25) for codes within a few per cent of their reconstruction error (``tests/index/test_ivfpq_build.py``,
    ``benchmarks/experiments/bench_ivfpq_build.py``). ``transposed_codebooks``
    encodes through faiss's transposed centroid layout, vectorised across the centroids (much
    faster for one- and two-dimensional sub-vectors). ``stop_at_plateau``: the probe search stops
    once doubling the probes no longer raises recall (:func:`tune_probes`). ``scalar_codebooks``:
    one-dimensional sub-vectors (``subquantizers == dim``) get exact 1-D k-means
    (:func:`scalar_codebooks`) instead of faiss's general one; an iteration costs O(2**bits · log n)
    there, so they get ``scalar_iterations`` rounds on ``scalar_points_per_centroid`` residuals per
    centroid (faiss's sample size).
    """

    coarse_iterations: int = 10
    coarse_points_per_list: int = 256
    pq_iterations: int = 15
    pq_points_per_centroid: int = 128
    transposed_codebooks: bool = True
    stop_at_plateau: bool = True
    scalar_codebooks: bool = True
    scalar_iterations: int = 100
    scalar_points_per_centroid: int = 256


#: faiss's own settings, before the budget was bounded (kept for the build benchmark's comparison).
FAISS_DEFAULT_BUDGET = TrainingBudget(10, 256, 25, 256, False, False, False, 0, 0)


def train_ivfpq(
    vectors: np.ndarray,
    params: dict[str, Any],
    metric: int,
    budget: TrainingBudget = TrainingBudget(),
    seconds: dict[str, float] | None = None,
) -> tuple[Any, Any]:
    """Create and train a faiss IVF-PQ (behind OPQ if asked) on a seeded sample of ``vectors``
    (already prepared); the shape is chosen where ``params`` leaves it unset and written back into
    them. Returns the index and its IVF part (a non-owning view). The phases run one by one
    (OPQ rotation, coarse k-means, PQ codebooks on a bounded sample of residuals), each timed into
    ``seconds`` when given."""
    count, dim = vectors.shape
    shape = choose_shape(count, dim, params)
    lists, bits, subquantizers = shape.lists, shape.bits, shape.subquantizers
    if dim % subquantizers:
        raise ValueError(f"index parameter 'subquantizers' ({subquantizers}) must divide the dimension {dim}")
    needed = max(lists, 1 << bits)
    sample_size = min(count, params["train_size"])
    if sample_size < needed:
        raise ValueError(
            f"the ivfpq index trains on its first batch and needs at least max(lists, 2**bits) = "
            f"{needed} vectors (lists={lists}, bits={bits}); got {sample_size} "
            f"(train_size={params['train_size']}, batch of {count}). Add more vectors at once or "
            "lower lists/bits"
        )
    rng = np.random.default_rng(params["seed"])
    sample = (
        vectors if sample_size == count else vectors[np.sort(rng.choice(count, sample_size, replace=False))]
    )
    sample = np.ascontiguousarray(sample, dtype=np.float32)
    description = f"IVF{lists},PQ{subquantizers}x{bits}"
    if params["opq"]:
        description = f"OPQ{subquantizers}," + description
    index = faiss.index_factory(dim, description, metric)
    ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    ivf.do_polysemous_training = False  # only serves Hamming pre-filtering, which is not used
    codes = count * (math.ceil(subquantizers * bits / 8) + 8)
    if precomputed_table_bytes(lists, subquantizers, bits) > codes:
        # An L2 table (lists × M × 2**bits floats) bigger than the codes it speeds up: searches
        # compute the same distances per query instead (faiss would build up to 2 GiB of it).
        ivf.use_precomputed_table = -1
    ivf.cp.seed = params["seed"]
    ivf.cp.min_points_per_centroid = 1
    ivf.cp.niter = budget.coarse_iterations
    ivf.cp.max_points_per_centroid = budget.coarse_points_per_list
    ivf.pq.cp.seed = params["seed"] + 1
    ivf.pq.cp.min_points_per_centroid = 1
    ivf.pq.cp.niter = budget.pq_iterations
    ivf.pq.cp.max_points_per_centroid = budget.pq_points_per_centroid
    timings = {} if seconds is None else seconds
    with omp_threads(params["num_threads"]):
        _train_phases(index, ivf, sample, metric, rng, budget, timings)
        if budget.transposed_codebooks:
            ivf.pq.sync_transposed_centroids()
    params.update(lists=lists, subquantizers=subquantizers, bits=bits)
    return index, ivf


def _train_phases(
    index: Any,
    ivf: Any,
    sample: np.ndarray,
    metric: int,
    rng: np.random.Generator,
    budget: TrainingBudget,
    seconds: dict[str, float],
) -> None:
    """Train ``index`` (IVF-PQ, or OPQ + IVF-PQ) phase by phase on ``sample``, timing each."""
    start = time.perf_counter()
    if isinstance(index, faiss.IndexPreTransform):  # the OPQ rotation, trained on the sample
        transform = faiss.downcast_VectorTransform(index.chain.at(0))
        transform.train(sample)
        sample = np.ascontiguousarray(transform.apply(sample), dtype=np.float32)
        seconds["opq rotation"] = time.perf_counter() - start
        start = time.perf_counter()
    count = sample.shape[0]
    ivf.train_q1(count, faiss.swig_ptr(sample), False, metric)
    seconds["coarse k-means"] = time.perf_counter() - start
    start = time.perf_counter()
    scalar = budget.scalar_codebooks and int(ivf.pq.dsub) == 1
    per_centroid = budget.scalar_points_per_centroid if scalar else budget.pq_points_per_centroid
    pq_sample = min(count, per_centroid * int(ivf.pq.ksub))
    residuals = sample if pq_sample == count else sample[np.sort(rng.choice(count, pq_sample, replace=False))]
    residuals = np.ascontiguousarray(residuals)
    assign = np.ascontiguousarray(ivf.quantizer.assign(residuals, 1)[:, 0], dtype=np.int64)
    if ivf.by_residual:
        residuals = residuals - ivf.quantizer.reconstruct_batch(assign)
    residuals = np.ascontiguousarray(residuals, dtype=np.float32)
    if scalar:
        codebooks = scalar_codebooks(residuals, int(ivf.pq.ksub), budget.scalar_iterations)
        faiss.copy_array_to_vector(codebooks.ravel(), ivf.pq.centroids)
        ivf.precompute_table()  # what faiss's own training ends with (a no-op unless l2 allows one)
    else:
        # Many small k-means (one per sub-quantizer): OpenMP barriers cost more than they share.
        with omp_threads(1):
            ivf.train_encoder(pq_sample, faiss.swig_ptr(residuals), faiss.swig_ptr(assign))
    ivf.is_trained = True
    index.is_trained = True
    seconds["PQ codebooks"] = time.perf_counter() - start


def scalar_codebooks(residuals: np.ndarray, levels: int, iterations: int) -> np.ndarray:
    """Codebooks of one-dimensional sub-quantizers: for each column of ``residuals`` (n × M), the
    ``levels`` centroids of Lloyd's k-means in one dimension, (M, levels) float32, each sorted.

    In one dimension every cluster is an interval between midpoints of consecutive centroids, so an
    iteration is a binary search of the midpoints into the sorted column and differences of its
    prefix sums: O(levels · log n) after one sort, instead of n × levels distances. Starts from the
    column's quantiles; a centroid whose interval is empty stays where it is (order is kept).

    Examples
    --------
    >>> column = np.array([[0.0], [0.1], [0.2], [5.0], [5.2], [9.0]], dtype=np.float32)
    >>> [round(float(c), 2) for c in scalar_codebooks(column, 3, 10)[0]]
    [0.1, 5.1, 9.0]
    """
    count, columns = residuals.shape
    books = np.empty((columns, levels), dtype=np.float32)
    quantiles = (np.arange(levels) + 0.5) / levels
    for column in range(columns):
        values = np.sort(residuals[:, column].astype(np.float64))
        prefix = np.concatenate(([0.0], np.cumsum(values)))
        squares = np.concatenate(([0.0], np.cumsum(values * values)))
        centres = np.quantile(values, quantiles)
        for _ in range(iterations):
            cuts = np.concatenate(([0], np.searchsorted(values, (centres[1:] + centres[:-1]) / 2), [count]))
            sizes = np.diff(cuts)
            filled = sizes > 0
            moved = centres.copy()
            sums = prefix[cuts[1:]] - prefix[cuts[:-1]]
            moved[filled] = sums[filled] / sizes[filled]
            empty = np.flatnonzero(~filled)
            if empty.size:
                _split_widest(moved, empty, sizes, sums, squares[cuts[1:]] - squares[cuts[:-1]])
            if np.array_equal(moved, centres):
                break
            centres = np.sort(moved)
        books[column] = centres
    return books


def _split_widest(
    centres: np.ndarray, empty: np.ndarray, sizes: np.ndarray, sums: np.ndarray, squares: np.ndarray
) -> None:
    """Move the centroids of ``empty`` clusters into the clusters of largest squared error, each of
    those split at its mean ± half its spread (faiss splits a large cluster the same way)."""
    spread = np.zeros(sizes.size)
    filled = sizes > 0
    spread[filled] = np.maximum(squares[filled] - sums[filled] ** 2 / sizes[filled], 0.0)
    widest = np.argsort(-spread, kind="stable")[: empty.size]
    for target, source in zip(empty, widest, strict=False):
        if spread[source] <= 0:
            break
        offset = 0.5 * np.sqrt(spread[source] / sizes[source])
        centres[target] = centres[source] + offset
        centres[source] -= offset
