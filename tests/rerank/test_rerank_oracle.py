"""The fast pool re-ranker against a literal, set-based transcription of the spec (rerank_oracle.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _support.rerank_oracle import oracle_rerank, scaled_distances
from galleria.distances import pairwise_distances, prepare_vectors
from galleria.rerank import rerank_pool, rerank_pools, scale_rows
from galleria.rerank._common import effective_ks, half_of, stable_smallest


@st.composite
def pools(draw: st.DrawFn, max_candidates: int = 24) -> tuple[np.ndarray, int, int, float]:
    """A pool's distance matrix (probe first) built as the re-ranker builds it, plus k1, k2, λ."""
    candidates = draw(st.integers(1, max_candidates))
    dim = draw(st.integers(1, 4))
    space = draw(st.sampled_from(["cosine", "ip", "l2"]))
    # A few distinct vectors drawn with repetition: exact duplicates give zero distances and ties.
    distinct = draw(st.integers(1, candidates + 1))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):
        base = rng.integers(-2, 3, size=(distinct, dim)).astype(np.float32)
    else:
        base = rng.normal(size=(distinct, dim)).astype(np.float32)
    picks = rng.integers(0, distinct, size=candidates + 1)
    vectors = prepare_vectors(base[picks], space)
    matrix = pairwise_distances(vectors, vectors, space).astype(np.float64)
    np.fill_diagonal(matrix, 0.0)
    k1 = draw(st.integers(1, 26))
    k2 = draw(st.integers(1, k1))
    lambda_value = draw(st.one_of(st.sampled_from([0.0, 1.0, 0.3]), st.floats(0.0, 1.0)))
    return matrix, k1, k2, lambda_value


@settings(max_examples=150)
@given(pools())
def test_pool_matches_oracle(pool: tuple[np.ndarray, int, int, float]) -> None:
    matrix, k1, k2, lambda_value = pool
    fast = rerank_pool(matrix, k1=k1, k2=k2, lambda_value=lambda_value)
    slow = oracle_rerank(matrix, k1=k1, k2=k2, lambda_value=lambda_value)[0]
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-9)


@settings(max_examples=60)
@given(st.lists(pools(max_candidates=16), min_size=1, max_size=5), st.integers(1, 20), st.integers(1, 20))
def test_batched_pools_match_oracle(
    batch: list[tuple[np.ndarray, int, int, float]], k1: int, k2_raw: int
) -> None:
    k2 = min(k2_raw, k1)
    lambda_value = batch[0][3]
    results = rerank_pools([matrix for matrix, *_ in batch], k1=k1, k2=k2, lambda_value=lambda_value)
    for (matrix, *_), fast in zip(batch, results, strict=True):
        slow = oracle_rerank(matrix, k1=k1, k2=k2, lambda_value=lambda_value)[0]
        np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-9)


def test_asymmetric_matrix_matches_oracle() -> None:
    rng = np.random.default_rng(5)
    matrix = rng.random((15, 15))  # any non-negative dissimilarity, not symmetric
    fast = rerank_pool(matrix, k1=5, k2=3, lambda_value=0.2)
    slow = oracle_rerank(matrix, k1=5, k2=3, lambda_value=0.2)[0]
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12)


def test_negative_distances_are_floored_and_diagonal_ignored() -> None:
    rng = np.random.default_rng(6)
    matrix = rng.random((10, 10)) - 0.2
    cleaned = np.maximum(matrix, 0.0)
    np.fill_diagonal(cleaned, 0.0)
    np.fill_diagonal(matrix, 3.0)
    np.testing.assert_array_equal(rerank_pool(matrix, k1=4, k2=2), rerank_pool(cleaned, k1=4, k2=2))


def test_lambda_one_gives_the_scaled_original_distance() -> None:
    matrix = np.array(
        [[0.0, 2.0, 4.0, 1.0], [2.0, 0.0, 1.0, 3.0], [4.0, 1.0, 0.0, 2.0], [1.0, 3.0, 2.0, 0.0]]
    )
    np.testing.assert_allclose(rerank_pool(matrix, k1=2, k2=1, lambda_value=1.0), [0.5, 1.0, 0.25])


def test_result_lies_in_unit_interval_and_has_one_entry_per_candidate() -> None:
    rng = np.random.default_rng(7)
    points = rng.normal(size=(41, 3))
    matrix = pairwise_distances(points, points, "l2")
    result = rerank_pool(matrix)
    assert result.shape == (40,)
    assert result.dtype == np.float64
    assert np.all((result >= 0) & (result <= 1))


def test_scale_rows_follows_the_pinned_rules() -> None:
    matrix = np.array([[5.0, 2.0, -1.0], [0.0, 0.0, 0.0], [3.0, 6.0, 9.0]])
    expected = [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1 / 2, 1.0, 0.0]]
    np.testing.assert_allclose(scale_rows(matrix), expected)
    np.testing.assert_allclose(scale_rows(matrix), scaled_distances(matrix.tolist()))


def test_half_of_rounds_half_to_even() -> None:
    assert [half_of(k) for k in (1, 2, 3, 4, 5, 6, 7, 20)] == [0, 1, 2, 2, 2, 3, 4, 10]


def test_effective_ks_cap_at_pool_size() -> None:
    assert effective_ks(20, 6, 200) == (20, 6, 10)
    assert effective_ks(20, 6, 5) == (5, 5, 2)
    assert effective_ks(3, 1, 1) == (1, 1, 0)


@settings(max_examples=100)
@given(
    st.integers(1, 3),
    st.integers(1, 40),
    st.integers(1, 5),
    st.integers(0, 2**32 - 1),
    st.data(),
)
def test_stable_smallest_equals_stable_argsort(
    rows: int, size: int, levels: int, seed: int, data: st.DataObject
) -> None:
    k = data.draw(st.integers(1, size))
    values = np.random.default_rng(seed).integers(0, levels, size=(rows, 2, size)).astype(np.float64)
    expected = np.argsort(values, axis=-1, kind="stable")[..., :k]
    np.testing.assert_array_equal(stable_smallest(values, k), expected)


@pytest.mark.parametrize("levels", [2, 50, 0])
def test_stable_smallest_long_rows(levels: int) -> None:
    rng = np.random.default_rng(levels)
    values = rng.integers(0, levels, size=(6, 3000)).astype(np.float64) if levels else rng.random((6, 3000))
    values[0] = 0.0  # a row that is all ties
    for k in (1, 21, 150):
        np.testing.assert_array_equal(
            stable_smallest(values, k), np.argsort(values, axis=-1, kind="stable")[:, :k]
        )


def test_pool_validation() -> None:
    good = np.zeros((3, 3))
    with pytest.raises(ValueError, match="distances"):
        rerank_pool(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="distances"):
        rerank_pool(np.zeros((1, 1)))
    with pytest.raises(ValueError, match="distances"):
        rerank_pool(np.zeros(3))
    with pytest.raises(ValueError, match="finite"):
        rerank_pool(np.full((3, 3), np.nan))
    with pytest.raises(TypeError, match="distances"):
        rerank_pool(np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(TypeError, match="distances"):
        rerank_pool(np.ones((2, 2), dtype=bool))
    with pytest.raises(TypeError, match="k1"):
        rerank_pool(good, k1=2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="k1"):
        rerank_pool(good, k1=True)
    with pytest.raises(ValueError, match="k1"):
        rerank_pool(good, k1=0)
    with pytest.raises(ValueError, match="k2"):
        rerank_pool(good, k1=3, k2=4)
    with pytest.raises(ValueError, match="lambda_value"):
        rerank_pool(good, lambda_value=1.5)
    with pytest.raises(TypeError, match="lambda_value"):
        rerank_pool(good, lambda_value=True)
    with pytest.raises(TypeError, match="distances"):
        rerank_pools(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="distances"):
        rerank_pools(good)
    with pytest.raises(ValueError, match="at least one pool"):
        rerank_pools([])
    with pytest.raises(ValueError, match=r"distances\[1\]"):
        rerank_pools([good, np.zeros((2, 3))])


BOUNDARY_POINTS = [
    [-0.132, 0.64],
    [0.105, -0.536],
    [0.362, 1.304],
    [0.947, -0.704],
    [-1.265, -0.623],
    [0.041, -2.325],
    [-0.219, -1.246],
    [-0.732, -0.544],
    [-0.316, 0.412],
    [1.043, -0.129],
]


def test_two_thirds_boundary_is_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool where some |R ∩ R(q, k/2)| is exactly 2/3 |R(q, k/2)|: the paper test is ≥."""
    from _support import rerank_oracle as rerank_oracle

    points = np.array(BOUNDARY_POINTS)
    matrix = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(axis=2))
    inclusive = oracle_rerank(matrix, k1=5, k2=1, lambda_value=0.0)[0]
    np.testing.assert_allclose(rerank_pool(matrix, k1=5, k2=1, lambda_value=0.0), inclusive, atol=1e-12)
    np.testing.assert_allclose(rerank_pools([matrix], k1=5, k2=1, lambda_value=0.0)[0], inclusive, atol=1e-12)

    def strict(rankings: list[list[int]], i: int, k: int) -> set[int]:
        base = rerank_oracle.k_reciprocal(rankings, i, k)
        result = set(base)
        for q in base:
            candidate = rerank_oracle.k_reciprocal(rankings, q, round(k / 2))
            if len(base & candidate) > 2 / 3 * len(candidate):
                result |= candidate
        return result

    monkeypatch.setattr(rerank_oracle, "expanded_reciprocal", strict)
    exclusive = oracle_rerank(matrix, k1=5, k2=1, lambda_value=0.0)[0]
    assert not np.allclose(inclusive, exclusive)


@pytest.mark.parametrize("space", ["cosine", "ip", "l2"])
@pytest.mark.parametrize(
    ("candidates", "k1", "k2", "lambda_value"),
    [(30, 20, 1, 0.3), (30, 20, 6, 0.0), (30, 20, 6, 1.0), (7, 20, 6, 0.3), (1, 20, 6, 0.3), (12, 3, 3, 0.5)],
)
def test_named_corner_cases_match_oracle(
    space: str, candidates: int, k1: int, k2: int, lambda_value: float
) -> None:
    """k2 = 1, λ = 0 and 1, pools smaller than k1 (and a single candidate), with duplicate vectors."""
    rng = np.random.default_rng(candidates * 7 + k1)
    base = rng.normal(size=(max(2, candidates // 2), 5)).astype(np.float32)
    vectors = prepare_vectors(base[rng.integers(0, len(base), size=candidates + 1)], space)
    matrix = pairwise_distances(vectors, vectors, space).astype(np.float64)
    fast = rerank_pool(matrix, k1=k1, k2=k2, lambda_value=lambda_value)
    slow = oracle_rerank(matrix, k1=k1, k2=k2, lambda_value=lambda_value)[0]
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(rerank_pools([matrix], k1=k1, k2=k2, lambda_value=lambda_value)[0], fast)
