"""The batched pool core's fast paths: large and mixed pools, integer-key ranking, batched distances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from galleria.distances import pairwise_distances, pairwise_distances_batched, prepare_vectors
from galleria.rerank import rerank_pool, rerank_pools
from galleria.rerank._common import ranked_members, stable_smallest
from galleria.rerank.batched import _CHUNK_ELEMENTS, chunk_counts


def clustered_pool(rng: np.random.Generator, size: int, duplicates: bool) -> np.ndarray:
    """A cosine distance matrix of ``size`` members around a few centres, with exact duplicates if asked."""
    centres = rng.normal(size=(max(2, size // 20), 8))
    vectors = centres[rng.integers(0, len(centres), size=size)] + 0.4 * rng.normal(size=(size, 8))
    if duplicates:
        vectors[rng.integers(0, size, size=size // 4)] = vectors[0]
    unit = prepare_vectors(vectors.astype(np.float32), "cosine")
    return pairwise_distances(unit, unit, "cosine").astype(np.float64)


@pytest.mark.parametrize(("k1", "k2"), [(20, 6), (20, 1), (7, 7), (300, 6)])
def test_large_and_mixed_pools_equal_the_single_pool_core(k1: int, k2: int) -> None:
    """Several bit-set words (n > 64, > 128), 64-bit keys (n > 256), ties, and padding to a common width."""
    rng = np.random.default_rng(k1 * 10 + k2)
    sizes = [70, 130, 3, 129, 301, 2, 65]
    matrices = [clustered_pool(rng, size, duplicates=i % 2 == 0) for i, size in enumerate(sizes)]
    results = rerank_pools(matrices, k1=k1, k2=k2, lambda_value=0.3)
    for matrix, result in zip(matrices, results, strict=True):
        np.testing.assert_array_equal(result, rerank_pool(matrix, k1=k1, k2=k2, lambda_value=0.3))


def test_many_equal_pools_are_chunked_and_equal_the_single_pool_core() -> None:
    rng = np.random.default_rng(3)
    count = 2 * max(1, _CHUNK_ELEMENTS // 41**2) + 3  # three chunks
    matrices = np.stack([clustered_pool(rng, 41, duplicates=False) for _ in range(count)])
    results = rerank_pools(matrices, k1=10, k2=3, lambda_value=0.5)
    for matrix, result in zip(matrices, results, strict=True):
        np.testing.assert_array_equal(result, rerank_pool(matrix, k1=10, k2=3, lambda_value=0.5))


@settings(max_examples=80)
@given(
    st.integers(2, 300),
    st.integers(1, 40),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["random", "ties", "near ties", "padded"]),
)
def test_ranked_members_equal_a_stable_sort(width: int, ranks: int, seed: int, kind: str) -> None:
    rng = np.random.default_rng(seed)
    ranks = min(ranks, width)
    values = rng.random((3, 4, width))
    if kind == "ties":
        values = np.round(values, 1)
    elif kind == "near ties":  # closer than the fixed point's step: must be told apart by the fallback
        values[..., 1::2] = np.nextafter(values[..., 0::2][..., : values[..., 1::2].shape[-1]], 2.0)
    values /= values.max(axis=-1, keepdims=True)
    if kind == "padded":
        values[..., width // 2 + 1 :] = np.inf
    expected = stable_smallest(values, ranks)
    np.testing.assert_array_equal(ranked_members(values, ranks, kind == "padded"), expected)


@pytest.mark.parametrize("space", ["cosine", "ip", "l2"])
def test_batched_distances_equal_the_pairwise_ones_bit_for_bit(space: str) -> None:
    rng = np.random.default_rng(7)
    left = prepare_vectors(rng.normal(size=(4 * 30, 16)), space).reshape(4, 30, 16)
    right = prepare_vectors(rng.normal(size=(4 * 12, 16)), space).reshape(4, 12, 16)
    same = pairwise_distances_batched(left, left, space)
    other = pairwise_distances_batched(left, right, space)
    assert same.dtype == np.float32 and same.shape == (4, 30, 30) and other.shape == (4, 30, 12)
    for index in range(4):
        np.testing.assert_array_equal(same[index], pairwise_distances(left[index], left[index], space))
        np.testing.assert_array_equal(other[index], pairwise_distances(left[index], right[index], space))


def test_batched_distances_reject_an_unknown_space() -> None:
    with pytest.raises(ValueError, match="'manhattan'"):
        pairwise_distances_batched(np.ones((1, 2, 2)), np.ones((1, 2, 2)), "manhattan")


@pytest.mark.parametrize(("count", "width"), [(1, 2), (100, 101), (7, 2000), (500, 201)])
def test_chunk_counts_cover_every_pool_in_bounded_chunks(count: int, width: int) -> None:
    chunks = chunk_counts(count, width)
    assert sum(chunks) == count and all(chunk >= 1 for chunk in chunks)
    assert all(chunk * width * width <= _CHUNK_ELEMENTS for chunk in chunks if chunk > 1)
