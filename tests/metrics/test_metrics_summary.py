"""Rank summaries, relevance metrics (hit rate, MRR, AP/mAP, PR curve) and the candidates bridge."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from galleria.metrics import (
    RankedRelevance,
    average_precision,
    hit_rate,
    interpolated_pr_curve,
    mean_average_precision,
    mean_rank,
    mean_reciprocal_rank,
    median_rank,
    mrr_from_ranks,
    ranked_relevance,
    recall_at_k,
    recall_from_ranks,
    retrieval_ranks,
)
from galleria.store.candidate import Candidate

# ---------------------------------------------------------------------------------------------
# Literal oracles


def literal_average_precision(row: list[bool], relevant: int, k: int) -> float:
    found = 0
    total = 0.0
    for position, hit in enumerate(row[:k], start=1):
        if hit:
            found += 1
            total += found / position
    return total / min(relevant, k)


def literal_interpolated_precision(row: list[bool], relevant: int, level: float) -> float:
    best = 0.0
    found = 0
    for position, hit in enumerate(row, start=1):
        found += hit
        if found / relevant >= level:
            best = max(best, found / position)
    return best


@st.composite
def relevance_cases(draw: Any) -> tuple[np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 6))
    depth = draw(st.integers(0, 10))
    hits = np.array(
        draw(st.lists(st.lists(st.booleans(), min_size=depth, max_size=depth), min_size=n, max_size=n)),
        dtype=bool,
    ).reshape(n, depth)
    extra = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    n_relevant = np.maximum(hits.sum(axis=1) + np.array(extra), 1)
    return hits, n_relevant


# ---------------------------------------------------------------------------------------------
# Rank summaries


def test_rank_summaries_by_hand() -> None:
    ranks = [0, 3, 1, 0]
    assert recall_from_ranks(ranks, [1, 2, 4, 1]) == [0.5, 0.75, 1.0, 0.5]
    assert mrr_from_ranks(ranks) == pytest.approx((1 + 1 / 4 + 1 / 2 + 1) / 4)
    assert mrr_from_ranks(ranks, depth=2) == pytest.approx((1 + 0 + 1 / 2 + 1) / 4)
    assert median_rank(ranks) == 1.5  # 1-indexed: median of 1, 4, 2, 1
    assert mean_rank(ranks) == 2.0
    assert median_rank(np.array([4], dtype=np.int32)) == 5.0


def test_recall_from_ranks_agrees_with_recall_at_k_after_rounding() -> None:
    rng = np.random.default_rng(2)
    sims = rng.random((60, 30)).round(1)
    truth = rng.integers(0, 30, size=60)
    ks = [1, 3, 7, 30]
    ranks = retrieval_ranks(sims, truth)
    assert [round(value, 4) for value in recall_from_ranks(ranks, ks)] == recall_at_k(sims, truth, ks)


@pytest.mark.parametrize(
    ("ranks", "error", "match"),
    [
        ([], ValueError, r"ranks must not be empty"),
        ([0, -1], ValueError, r"ranks\[1\] = -1 is negative"),
        (np.array([[0, 1]]), ValueError, r"ranks must be 1-D"),
        ([0, 1.0], TypeError, r"ranks\[1\] must be an integer rank, got 1\.0"),
        ([False], TypeError, r"ranks\[0\] must be an integer rank, got False"),
        (np.array([0.5]), TypeError, r"ranks must hold integer ranks, got dtype float64"),
    ],
)
def test_bad_ranks(ranks: Any, error: type[Exception], match: str) -> None:
    for function in (mrr_from_ranks, median_rank, mean_rank, lambda r: recall_from_ranks(r, [1])):
        with pytest.raises(error, match=match):
            function(ranks)


def test_bad_depth_and_ks_for_rank_summaries() -> None:
    with pytest.raises(ValueError, match=r"depth must be a positive integer, got 0"):
        mrr_from_ranks([0], depth=0)
    with pytest.raises(TypeError, match=r"depth must be a positive integer, got 1\.5"):
        mrr_from_ranks([0], depth=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ks\[0\] must be a positive integer, got 0"):
        recall_from_ranks([0], [0])


# ---------------------------------------------------------------------------------------------
# Relevance metrics


def test_relevance_metrics_by_hand() -> None:
    hits = [[True, False, True, False], [False, False, False, False], [False, True, True, True]]
    n_relevant = [2, 3, 5]
    assert hit_rate(hits, [1, 2, 10, 1]) == [1 / 3, 2 / 3, 2 / 3, 1 / 3]
    assert mean_reciprocal_rank(hits) == pytest.approx((1 + 0 + 1 / 2) / 3)
    ap = average_precision(hits, n_relevant, 4)
    np.testing.assert_allclose(ap, [(1 + 2 / 3) / 2, 0.0, (1 / 2 + 2 / 3 + 3 / 4) / 4])
    # K smaller than R: normalised by K, so a perfect top-K scores 1.
    np.testing.assert_allclose(average_precision([[True, True]], [10], 2), [1.0])
    # K larger than the depth: missing positions are not relevant.
    np.testing.assert_allclose(average_precision([[True]], [3], 100), [1 / 3])
    assert mean_average_precision(hits, n_relevant, 4) == pytest.approx(float(np.mean(ap)))


def test_interpolated_pr_curve_by_hand() -> None:
    hits = [[True, False, True], [False, True, False]]
    levels, precision = interpolated_pr_curve(hits, [2, 2])
    np.testing.assert_array_equal(levels, np.arange(11) / 10)
    # Query 0 reaches recall 0.5 at P = 1 and recall 1 at P = 2/3; query 1 recall 0.5 at P = 1/2 only.
    expected = [(1 + 0.5) / 2] * 6 + [(2 / 3 + 0) / 2] * 5
    np.testing.assert_allclose(precision, expected)
    levels, precision = interpolated_pr_curve(hits, [2, 2], [1.0, 0.0])
    np.testing.assert_allclose(precision, [1 / 3, 0.75])


@settings(max_examples=500)
@given(relevance_cases(), st.integers(1, 12))
def test_average_precision_equals_the_literal_formula(case: tuple[np.ndarray, np.ndarray], k: int) -> None:
    hits, n_relevant = case
    expected = [
        literal_average_precision(row, int(r), k) for row, r in zip(hits.tolist(), n_relevant, strict=True)
    ]
    np.testing.assert_allclose(average_precision(hits, n_relevant, k), expected, rtol=1e-12, atol=1e-15)
    assert 0.0 <= mean_average_precision(hits, n_relevant, k) <= 1.0 + 1e-12


@settings(max_examples=500)
@given(relevance_cases())
def test_pr_curve_hit_rate_and_mrr_equal_literal_definitions(case: tuple[np.ndarray, np.ndarray]) -> None:
    hits, n_relevant = case
    levels, precision = interpolated_pr_curve(hits, n_relevant)
    rows = hits.tolist()
    for level, value in zip(levels, precision, strict=True):
        expected = np.mean(
            [
                literal_interpolated_precision(row, int(r), level)
                for row, r in zip(rows, n_relevant, strict=True)
            ]
        )
        assert value == pytest.approx(expected, abs=1e-12)
    assert np.all(np.diff(precision) <= 1e-12)  # interpolated precision never rises with recall
    for k in (1, 3, 20):
        assert hit_rate(hits, [k]) == [np.mean([any(row[:k]) for row in rows])]
    first = [next((1 / (j + 1) for j, hit in enumerate(row) if hit), 0.0) for row in rows]
    assert mean_reciprocal_rank(hits) == pytest.approx(float(np.mean(first)))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: hit_rate([[1, 0]], [1]), TypeError, r"hits must be a boolean array, got dtype int64"),
        (lambda: hit_rate([True, False], [1]), ValueError, r"hits must be 2-D"),
        (
            lambda: hit_rate(np.zeros((0, 3), dtype=bool), [1]),
            ValueError,
            r"hits must hold at least one query",
        ),
        (lambda: hit_rate([[True]], []), ValueError, r"ks must not be empty"),
        (lambda: hit_rate([[True]], [True]), TypeError, r"ks\[0\] must be a positive integer, got True"),
        (lambda: mean_reciprocal_rank([["x"]]), TypeError, r"hits must be a boolean array"),
        (
            lambda: average_precision([[True]], [0], 1),
            ValueError,
            r"n_relevant\[0\] = 0: query 0 has no relevant",
        ),
        (
            lambda: average_precision([[True, True]], [1], 2),
            ValueError,
            r"n_relevant\[0\] = 1 but hits\[0\] holds 2",
        ),
        (lambda: average_precision([[True]], [1, 1], 1), ValueError, r"n_relevant must have 1 entries"),
        (lambda: average_precision([[True]], [1.0], 1), TypeError, r"n_relevant\[0\] must be an integer"),
        (lambda: average_precision([[True]], [1], 0), ValueError, r"k must be a positive integer, got 0"),
        (lambda: average_precision([[True]], [1], 2.0), TypeError, r"k must be a positive integer, got 2\.0"),
        (lambda: mean_average_precision([[True]], [-1], 1), ValueError, r"n_relevant\[0\] = -1 is negative"),
        (lambda: interpolated_pr_curve([[True]], [0]), ValueError, r"query 0 has no relevant"),
        (lambda: interpolated_pr_curve([[True]], [1], [0.5, 1.5]), ValueError, r"recall_levels\[1\] = 1\.5"),
        (lambda: interpolated_pr_curve([[True]], [1], [math.nan]), ValueError, r"recall_levels\[0\] = nan"),
        (lambda: interpolated_pr_curve([[True]], [1], []), ValueError, r"recall_levels must be a non-empty"),
        (
            lambda: interpolated_pr_curve([[True]], [1], ["a"]),
            TypeError,
            r"recall_levels must hold real numbers",
        ),
    ],
)
def test_bad_relevance_input(call: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_pr_curve_with_no_depth_is_zero() -> None:
    _levels, precision = interpolated_pr_curve(np.zeros((2, 0), dtype=bool), [1, 3], [0.0, 1.0])
    np.testing.assert_array_equal(precision, [0.0, 0.0])


# ---------------------------------------------------------------------------------------------
# ranked_relevance: the bridge from candidate lists and labels


GALLERY = {"a.png": "cat", "b.png": "dog", "c.png": "cat", "d.png": "bird", "e.png": "cat"}


def test_ranked_relevance_marks_same_label_results_and_pads() -> None:
    lists = [
        [Candidate("b.png", 0.1), Candidate("c.png", 0.2), Candidate("a.png", 0.3)],
        [Candidate("d.png", 0.0)],
        [],
    ]
    result = ranked_relevance(lists, ["cat", "bird", "dog"], GALLERY)
    assert isinstance(result, RankedRelevance)
    assert result.hits.dtype == np.bool_
    assert result.hits.tolist() == [[False, True, True], [True, False, False], [False, False, False]]
    assert result.n_relevant.dtype == np.int64
    assert result.n_relevant.tolist() == [3, 1, 1]
    assert hit_rate(result.hits, [1, 2]) == [1 / 3, 2 / 3]
    with pytest.raises(AttributeError):
        result.hits = np.zeros((1, 1), dtype=bool)  # type: ignore[misc]


def test_ranked_relevance_excludes_the_query_itself() -> None:
    lists = [
        [Candidate("a.png", 0.0), Candidate("b.png", 0.1), Candidate("c.png", 0.2)],
        [Candidate("d.png", 0.0), Candidate("e.png", 0.5)],
    ]
    result = ranked_relevance(lists, ["cat", "cat"], GALLERY, exclude_paths=["a.png", None])
    assert result.hits.tolist() == [[False, True], [False, True]]
    assert result.n_relevant.tolist() == [2, 3]  # a.png no longer counts for query 0
    # Excluding a path whose label differs from the query's leaves R unchanged.
    other = ranked_relevance([[Candidate("b.png", 0.0)]], ["cat"], GALLERY, exclude_paths=["b.png"])
    assert other.hits.shape == (1, 0)
    assert other.n_relevant.tolist() == [3]


def test_ranked_relevance_accepts_any_object_with_a_path_and_hashable_labels() -> None:
    class Result:
        def __init__(self, path: str) -> None:
            self.path = path

    gallery = {"x": 1, "y": np.int64(2), "z": 1}
    result = ranked_relevance([(Result("y"), Result("z"))], [np.int64(1)], gallery)
    assert result.hits.tolist() == [[False, True]]
    assert result.n_relevant.tolist() == [2]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"query_labels": ["cat"]}, ValueError, r"query_labels must have 2 entries"),
        ({"exclude_paths": ["a.png"]}, ValueError, r"exclude_paths must have 2 entries"),
        ({"exclude_paths": ["a.png", 3]}, TypeError, r"exclude_paths\[1\] must be a str or None, got 3"),
        ({"exclude_paths": "a.png"}, TypeError, r"exclude_paths must be a sequence of str or None"),
        (
            {"exclude_paths": ["zzz.png", None]},
            KeyError,
            r"exclude_paths\[0\] = 'zzz.png' is not a gallery path",
        ),
        (
            {"candidate_lists": [[Candidate("q.png", 0.0)], []]},
            KeyError,
            r"candidate_lists\[0\]\[0\]\.path = 'q.png'",
        ),
        ({"candidate_lists": [["a.png"], []]}, TypeError, r"candidate_lists\[0\]\[0\] has no str \.path"),
        (
            {"candidate_lists": [Candidate("a.png", 0.0), []]},
            TypeError,
            r"candidate_lists\[0\] must be a sequence",
        ),
        ({"candidate_lists": "ab"}, TypeError, r"candidate_lists must be a sequence of ranked lists"),
        ({"gallery_labels": [("a.png", "cat")]}, TypeError, r"gallery_labels must be a mapping"),
        ({"query_labels": "cc"}, TypeError, r"query_labels must be a sequence"),
    ],
)
def test_bad_ranked_relevance_input(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    arguments: dict[str, Any] = {
        "candidate_lists": [[Candidate("a.png", 0.0)], [Candidate("b.png", 0.0)]],
        "query_labels": ["cat", "dog"],
        "gallery_labels": GALLERY,
    }
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        ranked_relevance(**arguments)
