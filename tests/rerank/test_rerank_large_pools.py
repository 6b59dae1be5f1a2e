"""Large pools: the sparse pool core equals the dense cores bit for bit, and big pools are routed to it.

Re-ranking runs its BLAS products on one thread (counted, thread-safe limit) — checked by behaviour,
never by timing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from galleria import Candidate, InMemoryImageEmbeddingStore, KReciprocalReranker, _blas
from galleria._blas import one_blas_thread
from galleria.distances import pairwise_distances, prepare_vectors
from galleria.rerank import _common, rerank_pool, rerank_pools, sparse_pool
from galleria.rerank import batched as batched_module
from galleria.rerank import pool as pool_module
from galleria.rerank import reranker as reranker_module
from galleria.rerank.pool import pool_core
from galleria.rerank.sparse_pool import MatrixRows, VectorRows, sparse_pool_core


def clustered_pool(rng: np.random.Generator, size: int, duplicates: bool) -> np.ndarray:
    """A cosine distance matrix of ``size`` members around a few centres, with exact duplicates if asked."""
    centres = rng.normal(size=(max(2, size // 20), 8))
    vectors = centres[rng.integers(0, len(centres), size=size)] + 0.4 * rng.normal(size=(size, 8))
    if duplicates:
        vectors[rng.integers(0, size, size=size // 4)] = vectors[0]
    unit = prepare_vectors(vectors.astype(np.float32), "cosine")
    return pairwise_distances(unit, unit, "cosine").astype(np.float64)


def integer_store(space: str, count: int = 400, dim: int = 12, seed: int = 0) -> InMemoryImageEmbeddingStore:
    """Small-integer vectors: every distance is exact in float32, whatever the shape of the product."""
    rng = np.random.default_rng(seed)
    centres = rng.integers(-3, 4, size=(count // 25, dim))
    noise = rng.integers(-1, 2, size=(count, dim))
    vectors = (centres[rng.integers(0, len(centres), size=count)] + noise).astype(np.float32)
    paths = [f"v{i:04d}.png" for i in range(count)]
    return InMemoryImageEmbeddingStore.from_embeddings(paths, vectors, space=space)


def spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Count the calls of ``module.name`` (the sizes of their sources), still calling it."""
    calls: list[int] = []
    original: Callable[..., np.ndarray] = getattr(module, name)

    def wrapper(source: Any, *args: Any) -> np.ndarray:
        calls.append(source.size)
        return original(source, *args)

    monkeypatch.setattr(module, name, wrapper)
    return calls


# ---------------------------------------------------------------------------- the core itself


@pytest.mark.parametrize(("k1", "k2"), [(20, 6), (20, 1), (7, 7), (300, 6), (3, 2)])
@pytest.mark.parametrize(("block", "cache"), [(1 << 22, 1 << 23), (3, 5), (7, 30), (9, 1), (2, 10**6)])
def test_sparse_core_equals_the_dense_core_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, k1: int, k2: int, block: int, cache: int
) -> None:
    """One block, many blocks (rows per block = block·n / n), nearest-distance caches that miss."""
    rng = np.random.default_rng(k1 * 100 + k2 * 10 + block)
    for size, duplicates in [(2, False), (3, True), (30, False), (129, True), (301, False)]:
        matrix = clustered_pool(rng, size, duplicates)
        monkeypatch.setattr(sparse_pool, "_BLOCK_ELEMENTS", block * size)
        monkeypatch.setattr(sparse_pool, "_CACHE_ELEMENTS", cache * size)
        expected = pool_core(matrix.copy(), k1, k2, 0.3)
        np.testing.assert_array_equal(sparse_pool_core(MatrixRows(matrix), k1, k2, 0.3), expected)


def test_support_columns_processed_in_chunks_sum_left_to_right(monkeypatch: pytest.MonkeyPatch) -> None:
    """A support wider than one chunk of columns: the running sum goes on across chunks."""
    rng = np.random.default_rng(5)
    matrix = clustered_pool(rng, 200, duplicates=False)
    monkeypatch.setattr(sparse_pool, "_BLOCK_ELEMENTS", 201 * 3)  # chunks of 3 support columns
    expected = pool_core(matrix.copy(), 30, 10, 0.2)
    np.testing.assert_array_equal(sparse_pool_core(MatrixRows(matrix), 30, 10, 0.2), expected)


# ---------------------------------------------------------------------------- routing


def test_rerank_pool_sends_large_pools_to_the_sparse_core(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    small, large = clustered_pool(rng, 40, duplicates=True), clustered_pool(rng, 90, duplicates=False)
    expected = [rerank_pool(matrix, k1=10, k2=4) for matrix in (small, large)]  # dense: under the threshold
    calls = spy(monkeypatch, pool_module, "sparse_pool_core")
    monkeypatch.setattr(_common, "SPARSE_POOL_SIZE", 60)
    results = [rerank_pool(matrix, k1=10, k2=4) for matrix in (small, large)]
    assert calls == [90]
    for result, reference in zip(results, expected, strict=True):
        np.testing.assert_array_equal(result, reference)


def test_rerank_pools_sends_only_the_large_pools_to_the_sparse_core(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    matrices = [clustered_pool(rng, size, duplicates=size % 2 == 0) for size in (70, 20, 130, 61, 2)]
    expected = rerank_pools(matrices, k1=12, k2=5, lambda_value=0.4)
    calls = spy(monkeypatch, batched_module, "sparse_pool_core")
    monkeypatch.setattr(_common, "SPARSE_POOL_SIZE", 60)
    results = rerank_pools(matrices, k1=12, k2=5, lambda_value=0.4)
    assert sorted(calls) == [61, 70, 130]
    for result, reference in zip(results, expected, strict=True):
        np.testing.assert_array_equal(result, reference)


@pytest.mark.parametrize("space", ["cosine", "ip", "l2"])
def test_reranker_gives_the_same_candidates_above_and_below_the_threshold(
    monkeypatch: pytest.MonkeyPatch, space: str
) -> None:
    """Clustered float vectors; pools of one block compute their distances in one product, as dense."""
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(12, 24))
    vectors = (centres[rng.integers(0, 12, size=500)] + 0.5 * rng.normal(size=(500, 24))).astype(np.float32)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"c{i}.png" for i in range(500)], vectors, space=space
    )
    queries = (centres[rng.integers(0, 12, size=6)] + 0.5 * rng.normal(size=(6, 24))).astype(np.float32)
    lists = [
        store.retrieve_by_vector(q, k=k)[0]
        for q, k in zip(queries, [30, 150, 99, 100, 260, 150], strict=True)
    ]
    reranker = KReciprocalReranker(store, k1=15, k2=5, lambda_value=0.25)
    expected = reranker.rerank_batch(lists, top_k=300)  # every pool through the dense core
    calls = spy(monkeypatch, reranker_module, "sparse_pool_core")
    monkeypatch.setattr(_common, "SPARSE_POOL_SIZE", 100)
    routed = reranker.rerank_batch(lists, top_k=300)
    assert sorted(calls) == [101, 151, 151, 261]
    assert routed == expected  # same paths, same order, same d* (Candidate equality)
    assert [reranker.rerank(candidates, top_k=7) for candidates in lists] == [r[:7] for r in expected]


@pytest.mark.parametrize("space", ["ip", "l2"])
def test_reranker_large_pools_in_many_blocks_equal_the_dense_core(
    monkeypatch: pytest.MonkeyPatch, space: str
) -> None:
    """Many blocks of distance rows and cache misses; integer vectors make every distance exact."""
    store = integer_store(space)
    reranker = KReciprocalReranker(store, k1=10, k2=4, lambda_value=0.3)
    lists = [store.retrieve_by_vector(store.embeddings_of([f"v{i:04d}.png"])[0], k=250)[0] for i in (0, 7)]
    expected = reranker.rerank_batch(lists, top_k=250)
    monkeypatch.setattr(_common, "SPARSE_POOL_SIZE", 200)
    monkeypatch.setattr(sparse_pool, "_BLOCK_ELEMENTS", 251 * 16)
    monkeypatch.setattr(sparse_pool, "_CACHE_ELEMENTS", 251 * 12)
    assert reranker.rerank_batch(lists, top_k=250) == expected


def test_vector_rows_follow_the_pool_layout() -> None:
    rng = np.random.default_rng(4)
    vectors = prepare_vectors(rng.normal(size=(9, 5)).astype(np.float32), "cosine")
    scores = rng.random(9)
    source = VectorRows(vectors, scores, "cosine")
    assert source.size == 10
    matrix = np.zeros((10, 10))
    matrix[1:, 1:] = pairwise_distances(vectors, vectors, "cosine")
    matrix[0, 1:] = matrix[1:, 0] = scores
    np.testing.assert_array_equal(np.vstack([source.rows(0, 4), source.rows(4, 10)]), matrix)
    assert source.rows(0, 1).dtype == np.float64


# ---------------------------------------------------------------------------- BLAS threads


def blas_threads() -> list[int]:
    """Thread counts of numpy's BLAS (the one the re-ranking products run on), else of every BLAS.

    Other libraries may bundle their own (old OpenBLAS builds report a per-thread count).
    """
    infos = [info for info in threadpool_info() if info["user_api"] == "blas"]
    site = Path(np.__file__).resolve().parent.parent
    own = [info for info in infos if Path(info["filepath"]).resolve().is_relative_to(site / "numpy.libs")]
    return [info["num_threads"] for info in (own or infos)]


@pytest.fixture(autouse=True)
def fresh_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit finds the BLAS libraries on first use; let it see every one loaded by now."""
    monkeypatch.setattr(_blas._ONE_BLAS_THREAD, "_controller", None)


def test_one_blas_thread_limits_and_restores() -> None:
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        with one_blas_thread():
            assert set(blas_threads()) == {1}
            with one_blas_thread():  # re-entrant
                assert set(blas_threads()) == {1}
            assert set(blas_threads()) == {1}
        assert blas_threads() == before
        with pytest.raises(RuntimeError), one_blas_thread():
            raise RuntimeError("inside")
        assert blas_threads() == before


def test_one_blas_thread_is_counted_across_threads() -> None:
    """Overlapping users in several threads: the last one out restores the setting."""
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        barrier = threading.Barrier(4)
        seen: list[set[int]] = []
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for _ in range(25):
                    with one_blas_thread():
                        barrier.wait(timeout=10)  # all four inside at once
                        seen.append(set(blas_threads()))
                        barrier.wait(timeout=10)
            except BaseException as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        assert len(seen) == 100 and all(value == {1} for value in seen)
        assert blas_threads() == before


@pytest.mark.parametrize("threshold", [10**9, 50])
def test_reranker_runs_its_products_on_one_blas_thread(
    monkeypatch: pytest.MonkeyPatch, threshold: int
) -> None:
    """Inside the dense path's batched product and the sparse path's row blocks, BLAS has one thread."""
    store = integer_store("ip", count=200)
    lists = [store.retrieve_by_vector(store.embeddings_of([f"v{i:04d}.png"])[0], k=80)[0] for i in (1, 2)]
    monkeypatch.setattr(_common, "SPARSE_POOL_SIZE", threshold)
    observed: list[list[int]] = []
    for module, name in (
        (reranker_module, "pairwise_distances_batched"),
        (sparse_pool, "pairwise_distances"),
    ):
        original = getattr(module, name)

        def recording(*args: Any, _original: Any = original) -> np.ndarray:
            observed.append(blas_threads())
            result: np.ndarray = _original(*args)
            return result

        monkeypatch.setattr(module, name, recording)
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        result = KReciprocalReranker(store, k1=8, k2=3).rerank_batch(lists, top_k=5)
        assert blas_threads() == before
    assert observed and all(set(threads) == {1} for threads in observed)
    assert all(isinstance(c, Candidate) for candidates in result for c in candidates)
