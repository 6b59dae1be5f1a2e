"""Precision@1, R-precision and MAP@R against a literal transcription, hand-computed cases and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from galleria.metrics import map_at_r, metric_learning_evaluate, precision_at_1, r_precision
from galleria.metrics import metric_learning as ml_module


def literal_metric_learning(
    queries: np.ndarray,
    labels: list[object],
    reference: np.ndarray,
    reference_labels: list[object],
    metric: str,
    exclude_self: bool,
) -> dict[str, object]:
    """Musgrave et al.'s definitions word for word: rank everything, look at the first R."""
    p1, rp, mapr = [], [], []
    for i, query in enumerate(queries):
        order = []
        for j, item in enumerate(reference):
            if exclude_self and j == i:
                continue
            if metric == "euclidean":
                key = float(np.sqrt(np.sum((query - item) ** 2)))
            else:
                key = -float(query @ item / (np.linalg.norm(query) * np.linalg.norm(item)))
            order.append((key, j))
        order.sort()
        relevant = [reference_labels[j] == labels[i] for _, j in order]
        r = sum(relevant)
        if r == 0:
            continue
        p1.append(float(relevant[0]))
        rp.append(sum(relevant[:r]) / r)
        found, total = 0, 0.0
        for position in range(r):
            if relevant[position]:
                found += 1
                total += found / (position + 1)
        mapr.append(total / r)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else math.nan

    return {"p1": mean(p1), "rp": mean(rp), "mapr": mean(mapr), "valid": len(p1)}


def _close(value: float, expected: object) -> None:
    if isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(value)
    else:
        assert value == pytest.approx(expected)


@st.composite
def integer_embeddings(draw: st.DrawFn, size: int | None = None) -> tuple[np.ndarray, list[int]]:
    n = size if size is not None else draw(st.integers(1, 9))
    d = draw(st.integers(1, 3))
    # Small integer coordinates: exact squared distances, many ties (and duplicate points).
    values = draw(st.lists(st.integers(-2, 2), min_size=n * d, max_size=n * d))
    labels = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    return np.array(values, dtype=np.float64).reshape(n, d), labels


@given(integer_embeddings())
def test_self_reference_matches_the_literal_definitions(case) -> None:  # type: ignore[no-untyped-def]
    embeddings, labels = case
    expected = literal_metric_learning(embeddings, labels, embeddings, labels, "euclidean", True)
    result = metric_learning_evaluate(embeddings, labels, metric="euclidean")
    _close(result.precision_at_1, expected["p1"])
    _close(result.r_precision, expected["rp"])
    _close(result.map_at_r, expected["mapr"])
    assert result.valid_queries == expected["valid"]
    assert result.skipped_queries == len(labels) - expected["valid"]
    # The whole-ranking mode gives the same three figures.
    full = metric_learning_evaluate(embeddings, labels, metric="euclidean", full_ranking=True)
    _close(full.precision_at_1, result.precision_at_1)
    assert full.valid_queries == result.valid_queries
    np.testing.assert_allclose(full.per_query_map_at_r, result.per_query_map_at_r, equal_nan=True)


@given(integer_embeddings(), integer_embeddings(), st.booleans())
def test_separate_reference_matches_the_literal_definitions(queries, reference, strings) -> None:  # type: ignore[no-untyped-def]
    (q, q_labels), (ref, ref_labels) = queries, reference
    if q.shape[1] != ref.shape[1]:
        ref = np.resize(ref, (len(ref), q.shape[1]))
    if strings:
        q_labels = [f"class-{label}" for label in q_labels]
        ref_labels = [f"class-{label}" for label in ref_labels]
    expected = literal_metric_learning(q, q_labels, ref, ref_labels, "euclidean", False)
    kwargs = {"reference": ref, "reference_labels": ref_labels, "metric": "euclidean"}
    _close(precision_at_1(q, q_labels, **kwargs), expected["p1"])
    _close(r_precision(q, q_labels, **kwargs), expected["rp"])
    _close(map_at_r(q, q_labels, **kwargs), expected["mapr"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cosine_matches_the_literal_definitions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    embeddings = rng.normal(size=(40, 5))
    labels = rng.integers(0, 6, 40).tolist()
    labels[0] = 99  # a one-item class: left out and counted
    expected = literal_metric_learning(embeddings, labels, embeddings, labels, "cosine", True)
    result = metric_learning_evaluate(embeddings, labels)
    _close(result.precision_at_1, expected["p1"])
    _close(result.r_precision, expected["rp"])
    _close(result.map_at_r, expected["mapr"])
    assert result.skipped_queries == 1 + (40 - 1 - expected["valid"])
    assert np.isnan(result.per_query_map_at_r[0])


def test_blocks_do_not_change_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    embeddings = rng.normal(size=(60, 4)).astype(np.float32)
    labels = rng.integers(0, 5, 60)
    whole = metric_learning_evaluate(embeddings, labels, full_ranking=True, top_k=4)
    monkeypatch.setattr(ml_module, "_BLOCK_BYTES", 60 * 4 * 7)  # blocks of 7 queries
    blocked = metric_learning_evaluate(embeddings, labels, full_ranking=True, top_k=4)
    for name in ("per_query_map_at_r", "average_precision", "first_positive_rank", "top", "pr_precision"):
        np.testing.assert_array_equal(getattr(blocked, name), getattr(whole, name))


def test_hand_computed_case() -> None:
    points = [[0.0], [1.0], [1.5], [3.0], [3.2]]
    labels = [0, 0, 1, 0, 1]
    result = metric_learning_evaluate(points, labels, metric="euclidean", full_ranking=True, top_k=2)
    # Query 0 → 1 (rel), 1.5, 3 (rel), 3.2: R = 2, first two hold one relevant item at position 1.
    assert result.per_query_map_at_r[0] == pytest.approx(0.5)
    assert result.average_precision[0] == pytest.approx((1 + 2 / 3) / 2)
    # Query 1 → 1.5, 0 (rel), 3 (rel): MAP@R = (1/2)(1/2).
    assert result.per_query_map_at_r[1] == pytest.approx(0.25)
    assert result.first_positive_rank.tolist() == [0, 1, 3, 2, 1]
    assert result.top[:2].tolist() == [[1, 2], [2, 0]]
    assert result.map_at_r == pytest.approx(0.15)
    assert result.precision_at_1 == pytest.approx(0.2)


def test_ties_go_to_the_lower_reference_index() -> None:
    # Query 0 at 0; items 1 and 2 both at distance 1; only item 2 shares its label.
    points = [[0.0], [1.0], [-1.0]]
    assert precision_at_1(points, [0, 1, 0], metric="euclidean") == pytest.approx(1 / 2)
    # Query 0 sees item 1 (wrong) first; query 2 (at -1) sees item 0 (right) first; query 1 has R = 0.


def test_exclude_self_with_a_reference() -> None:
    points = np.array([[0.0], [0.1], [0.2]])
    labels = [0, 1, 0]
    kwargs = {"reference": points, "reference_labels": labels, "metric": "euclidean"}
    # Each query finds itself first when it is not excluded; excluded, the wrong neighbour comes first.
    assert precision_at_1(points, labels, **kwargs) == 1.0
    assert precision_at_1(points, labels, **kwargs, exclude_self=True) == 0.0
    assert precision_at_1(points, labels, metric="euclidean") == 0.0
    # Self included: query 0's R = 2 (itself and item 2), first two = itself and item 1.
    assert r_precision(points, labels, metric="euclidean", exclude_self=False) == pytest.approx(
        (0.5 + 1 + 0.5) / 3
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"embeddings": [[np.nan]]}, ValueError, "embeddings must be finite"),
        ({"labels": [0, 1]}, ValueError, "labels must have 1 entries"),
        ({"labels": [0.5]}, TypeError, "labels"),
        ({"metric": "manhattan"}, ValueError, "metric"),
        ({"reference": [[0.0]]}, ValueError, "reference needs reference_labels"),
        ({"reference_labels": [0]}, ValueError, "reference_labels needs reference"),
        ({"reference": [[0.0, 1.0]], "reference_labels": [0]}, ValueError, "same dimension"),
        ({"reference": [[0.0]], "reference_labels": ["a"]}, TypeError, "same kind"),
        (
            {"reference": [[0.0], [1.0]], "reference_labels": [0, 0], "exclude_self": True},
            ValueError,
            "same length",
        ),
        ({"exclude_self": "yes"}, TypeError, "exclude_self"),
    ],
)
def test_errors_name_the_argument(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    arguments: dict[str, object] = {"embeddings": [[0.0]], "labels": [0]}
    arguments.update(kwargs)
    embeddings, labels = arguments.pop("embeddings"), arguments.pop("labels")
    with pytest.raises(error, match=match):
        map_at_r(embeddings, labels, **arguments)  # type: ignore[arg-type]
