"""Alpha query expansion against a literal, per-query transcription of docs/reranking.md."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from galleria import alpha_query_expansion


def literal_expansion(
    queries: np.ndarray, neighbors: np.ndarray, alpha: float, mask: np.ndarray
) -> np.ndarray:
    """One query at a time, one neighbour at a time, in float64, straight from the text."""
    out = []
    for i in range(queries.shape[0]):
        q = [float(x) for x in queries[i]]
        q_norm = math.sqrt(sum(x * x for x in q))
        q_hat = [x / q_norm if q_norm > 0 else 0.0 for x in q]
        total = list(q_hat)
        for j in range(neighbors.shape[1]):
            if not mask[i, j]:
                continue
            v = [float(x) for x in neighbors[i, j]]
            v_norm = math.sqrt(sum(x * x for x in v))
            v_hat = [x / v_norm if v_norm > 0 else 0.0 for x in v]
            cosine = sum(a * b for a, b in zip(q_hat, v_hat, strict=True))
            weight = cosine**alpha if cosine > 0 else 0.0
            total = [t + weight * x for t, x in zip(total, v_hat, strict=True)]
        norm = math.sqrt(sum(x * x for x in total))
        out.append([x / norm if norm > 0 else 0.0 for x in total])
    return np.array(out, dtype=np.float64).reshape(queries.shape)


finite = st.floats(-4.0, 4.0, allow_nan=False, width=32)


@st.composite
def expansion_inputs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    q = draw(st.integers(1, 4))
    m = draw(st.integers(0, 6))
    d = draw(st.integers(1, 5))
    queries = draw(arrays(np.float32, (q, d), elements=finite))
    neighbors = draw(arrays(np.float32, (q, m, d), elements=finite))
    mask = draw(arrays(np.bool_, (q, m)))
    alpha = draw(st.sampled_from([0.0, 0.5, 1.0, 3.0])) if draw(st.booleans()) else draw(st.floats(0.0, 8.0))
    return queries, neighbors, alpha, mask


@given(expansion_inputs())
def test_matches_literal_loop(case: tuple[np.ndarray, np.ndarray, float, np.ndarray]) -> None:
    queries, neighbors, alpha, mask = case
    # cos ** alpha jumps at cos = 0 when alpha < 1 (0 below, ≥ 0.5 just above for small alpha): keep
    # float32-vs-float64 rounding of near-orthogonal pairs out of the comparison.
    q64 = queries.astype(np.float64)
    n64 = neighbors.astype(np.float64)
    qn = q64 / np.maximum(np.linalg.norm(q64, axis=1, keepdims=True), 1e-300)
    nn = n64 / np.maximum(np.linalg.norm(n64, axis=2, keepdims=True), 1e-300)
    cosines = np.einsum("qd,qmd->qm", qn, nn)
    assume(alpha >= 1 or not np.any(mask & (np.abs(cosines) < 1e-3) & (np.linalg.norm(n64, axis=2) > 0)))
    got = alpha_query_expansion(queries, neighbors, alpha=alpha, mask=mask)
    expected = literal_expansion(queries, neighbors, alpha, mask)
    assert got.dtype == np.float32
    assert got.shape == queries.shape
    np.testing.assert_allclose(got, expected, atol=2e-4)


@given(expansion_inputs())
def test_default_mask_means_all_valid(case: tuple[np.ndarray, np.ndarray, float, np.ndarray]) -> None:
    queries, neighbors, alpha, _ = case
    full = np.ones(neighbors.shape[:2], dtype=bool)
    np.testing.assert_array_equal(
        alpha_query_expansion(queries, neighbors, alpha=alpha),
        alpha_query_expansion(queries, neighbors, alpha=alpha, mask=full),
    )


def test_padding_values_are_ignored() -> None:
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(3, 4)).astype(np.float32)
    neighbors = rng.normal(size=(3, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=bool)
    garbage = neighbors.copy()
    garbage[~mask] = np.nan
    np.testing.assert_array_equal(
        alpha_query_expansion(queries, neighbors, alpha=2.0, mask=mask),
        alpha_query_expansion(queries, garbage, alpha=2.0, mask=mask),
    )
    # Fewer matches = the same as dropping the padded columns.
    np.testing.assert_allclose(
        alpha_query_expansion(queries[:1], neighbors[:1, :2], alpha=2.0),
        alpha_query_expansion(queries, neighbors, alpha=2.0, mask=mask)[:1],
        rtol=1e-6,
    )


def test_no_matches_returns_normalised_query() -> None:
    queries = np.array([[3.0, 4.0]], dtype=np.float32)
    out = alpha_query_expansion(queries, np.zeros((1, 0, 2), dtype=np.float32), alpha=3.0)
    np.testing.assert_allclose(out, [[0.6, 0.8]], rtol=1e-6)


def test_alpha_zero_weighs_positive_matches_one() -> None:
    q = np.array([[1.0, 0.0]], dtype=np.float32)
    matches = np.array([[[0.1, 1.0], [0.0, -1.0], [-1.0, 0.0]]], dtype=np.float32)
    # Only the first match has a positive cosine; it counts fully at alpha = 0.
    v = matches[0, 0] / np.linalg.norm(matches[0, 0])
    expected = (q[0] + v) / np.linalg.norm(q[0] + v)
    np.testing.assert_allclose(alpha_query_expansion(q, matches, alpha=0.0)[0], expected, rtol=1e-6)


def test_unit_norm_output() -> None:
    rng = np.random.default_rng(1)
    out = alpha_query_expansion(rng.normal(size=(5, 8)), rng.normal(size=(5, 7, 8)), alpha=3.0)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"alpha": -1.0}, ValueError, r"alpha .*got -1\.0"),
        ({"alpha": float("nan")}, ValueError, "alpha .*got nan"),
        ({"alpha": float("inf")}, ValueError, "alpha .*got inf"),
        ({"alpha": True}, TypeError, "alpha .*got True"),
        ({"alpha": "3"}, TypeError, "alpha .*got '3'"),
        ({"alpha": 1.0, "mask": np.ones((2, 3), dtype=int)}, TypeError, "mask .*int"),
        ({"alpha": 1.0, "mask": np.ones((2, 2), dtype=bool)}, ValueError, r"mask .*\(2, 3\).*\(2, 2\)"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    queries, neighbors = np.ones((2, 4)), np.ones((2, 3, 4))
    with pytest.raises(error, match=match):
        alpha_query_expansion(queries, neighbors, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("queries", "neighbors", "error", "match"),
    [
        (np.ones(4), np.ones((1, 3, 4)), ValueError, r"queries must be a 2-D array.*got shape \(4,\)"),
        (np.ones((2, 4)), np.ones((2, 4)), ValueError, r"neighbor_vectors must be a 3-D array"),
        (np.ones((2, 4)), np.ones((3, 3, 4)), ValueError, r"neighbor_vectors of shape \(3, 3, 4\)"),
        (np.ones((2, 4)), np.ones((2, 3, 5)), ValueError, r"neighbor_vectors of shape \(2, 3, 5\)"),
        (np.full((2, 4), np.nan), np.ones((2, 3, 4)), ValueError, "queries must contain only finite"),
        (np.ones((2, 4)), np.full((2, 3, 4), np.inf), ValueError, "neighbor_vectors must contain only fin"),
        (np.array([["a"]]), np.ones((1, 1, 1)), TypeError, "queries must be a numeric array"),
        (np.ones((2, 4), dtype=bool), np.ones((2, 3, 4)), TypeError, "queries must be a numeric array"),
        (np.ones((1, 1)), np.array([[["a"]]]), TypeError, "neighbor_vectors must be a numeric array"),
    ],
)
def test_bad_arrays(queries: np.ndarray, neighbors: np.ndarray, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        alpha_query_expansion(queries, neighbors, alpha=1.0)
