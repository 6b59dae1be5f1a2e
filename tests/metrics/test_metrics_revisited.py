"""revisited_evaluate against a literal transcription of the protocol, hand-computed cases, junk, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from galleria.metrics import revisited_evaluate


def literal_setting(
    row: list[float], positives: set[int], junk: set[int], kappas: list[int]
) -> tuple[float, list[float]] | None:
    """One query in one setting, word for word: drop junk, sort, trapezoids, capped precision."""
    kept = sorted((j for j in range(len(row)) if j not in junk), key=lambda j: (-row[j], j))
    places = [position for position, j in enumerate(kept) if j in positives]
    if not places:
        return None
    ap = 0.0
    for i, r in enumerate(places):
        before = 1.0 if r == 0 else i / r
        at = (i + 1) / (r + 1)
        ap += (before + at) / 2 / len(places)
    precisions = []
    for k in kappas:
        depth = min(k, places[-1] + 1)
        precisions.append(sum(1 for r in places if r < depth) / depth)
    return ap, precisions


def literal_revisited(
    sims: list[list[float]], truth: list[dict[str, list[int]]], kappas: list[int]
) -> dict[str, dict[str, object]]:
    result: dict[str, dict[str, object]] = {}
    for setting in ("easy", "medium", "hard"):
        aps, precisions, per_query = [], [], []
        for row, entry in zip(sims, truth, strict=True):
            easy, hard, junk = set(entry["easy"]), set(entry["hard"]), set(entry["junk"])
            if setting == "easy":
                positives, removed = easy, junk | hard
            elif setting == "medium":
                positives, removed = easy | hard, junk
            else:
                positives, removed = hard, junk | easy
            scored = literal_setting(row, positives, removed, kappas)
            if scored is None:
                per_query.append(math.nan)
                continue
            aps.append(scored[0])
            precisions.append(scored[1])
            per_query.append(scored[0])
        figures: dict[str, object] = {"mAP": sum(aps) / len(aps) if aps else math.nan, "ap": per_query}
        for position, k in enumerate(kappas):
            figures[f"mP@{k}"] = (
                sum(p[position] for p in precisions) / len(precisions) if precisions else math.nan
            )
        figures["valid_queries"] = len(aps)
        result[setting] = figures
    return result


@st.composite
def revisited_cases(draw: st.DrawFn) -> tuple[list[list[float]], list[dict[str, list[int]]]]:
    n = draw(st.integers(1, 4))
    m = draw(st.integers(1, 12))
    values = st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0])
    sims = draw(st.lists(st.lists(values, min_size=m, max_size=m), min_size=n, max_size=n))
    truth = []
    for _ in range(n):
        labels = draw(st.lists(st.sampled_from(["easy", "hard", "junk", None]), min_size=m, max_size=m))
        truth.append(
            {key: [j for j, label in enumerate(labels) if label == key] for key in ("easy", "hard", "junk")}
        )
    return sims, truth


def _assert_close(value: object, expected: object) -> None:
    if isinstance(expected, float) and math.isnan(expected):
        assert isinstance(value, float) and math.isnan(value)
    else:
        assert value == pytest.approx(expected)


@given(revisited_cases(), st.lists(st.integers(1, 8), min_size=1, max_size=3))
def test_matches_the_literal_protocol(case, kappas) -> None:  # type: ignore[no-untyped-def]
    sims, truth = case
    expected = literal_revisited(sims, truth, kappas)
    result = revisited_evaluate(np.array(sims), truth, kappas=kappas)
    for setting, figures in expected.items():
        got = result[setting]
        _assert_close(got["mAP"], figures["mAP"])
        for k in kappas:
            _assert_close(got[f"mP@{k}"], figures[f"mP@{k}"])
        assert got["valid_queries"] == figures["valid_queries"]
        np.testing.assert_allclose(got["ap"], np.array(figures["ap"], dtype=float), equal_nan=True)


@given(revisited_cases(), st.data())
def test_junk_inserted_anywhere_never_changes_the_ap(case, data) -> None:  # type: ignore[no-untyped-def]
    sims, truth = case
    before = revisited_evaluate(sims, truth)
    matrix = np.array(sims, dtype=float)
    entries = [{key: list(values) for key, values in entry.items()} for entry in truth]
    for _ in range(data.draw(st.integers(1, 4))):
        column = data.draw(st.integers(0, matrix.shape[1]))
        values = data.draw(
            st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=len(sims), max_size=len(sims))
        )
        matrix = np.insert(matrix, column, values, axis=1)
        for entry in entries:
            for key in ("easy", "hard", "junk"):
                entry[key] = [j + 1 if j >= column else j for j in entry[key]]
            entry["junk"].append(column)  # junk for every query
    after = revisited_evaluate(matrix, entries)
    for setting in ("easy", "medium", "hard"):
        np.testing.assert_allclose(after[setting]["ap"], before[setting]["ap"], equal_nan=True)
        for key in ("mAP", "mP@1", "mP@5", "mP@10"):
            _assert_close(after[setting][key], before[setting][key])


def test_hand_computed_case() -> None:
    # Ranking by similarity: g0, g1, g2, g3, g4. Easy: g1, g4; hard: g2; junk: g0.
    sims = [[0.9, 0.8, 0.7, 0.6, 0.5]]
    truth = [{"easy": [1, 4], "hard": [2], "junk": [0], "bbx": [0, 0, 1, 1]}]
    result = revisited_evaluate(sims, truth, kappas=[1, 3])
    # Easy: remove g0, g2 → g1, g3, g4: positives at 0 and 2.
    easy_ap = ((1 + 1) / 2 + (1 / 2 + 2 / 3) / 2) / 2
    assert result["easy"]["mAP"] == pytest.approx(easy_ap)
    assert result["easy"]["mP@3"] == pytest.approx(2 / 3)
    # Medium: remove g0 → g1, g2, g3, g4: positives at 0, 1, 3.
    medium_ap = ((1 + 1) / 2 + (1 + 1) / 2 + (2 / 3 + 3 / 4) / 2) / 3
    assert result["medium"]["mAP"] == pytest.approx(medium_ap)
    # Hard: remove g0, g1, g4 → g2, g3: g2 first; mP@3 capped at depth 1.
    assert result["hard"]["mAP"] == pytest.approx(1.0)
    assert result["hard"]["mP@3"] == pytest.approx(1.0)
    assert result["hard"]["mP@1"] == pytest.approx(1.0)


def test_query_without_positives_is_left_out_of_that_setting() -> None:
    sims = [[0.9, 0.1], [0.2, 0.8]]
    truth = [{"easy": [0], "hard": [], "junk": []}, {"easy": [], "hard": [0], "junk": []}]
    result = revisited_evaluate(sims, truth)
    assert result["easy"]["valid_queries"] == 1 and result["easy"]["mAP"] == 1.0
    assert result["hard"]["valid_queries"] == 1 and result["hard"]["mAP"] == pytest.approx(0.25)
    assert result["medium"]["valid_queries"] == 2
    assert np.isnan(result["easy"]["ap"][1])


def test_no_query_with_positives_gives_nan() -> None:
    result = revisited_evaluate([[0.5]], [{"easy": [], "hard": [], "junk": [0]}])
    assert math.isnan(result["medium"]["mAP"]) and result["medium"]["valid_queries"] == 0


@pytest.mark.parametrize(
    ("sims", "truth", "error", "match"),
    [
        ([[0.1, np.nan]], [{"easy": [0], "hard": [], "junk": []}], ValueError, "similarities must be finite"),
        ([[0.1, 0.2]], [], ValueError, "ground_truth must have 1 entries"),
        ([[0.1, 0.2]], [[0]], TypeError, r"ground_truth\[0\] must be a mapping"),
        ([[0.1, 0.2]], [{"easy": [0], "hard": []}], ValueError, "no 'junk' list"),
        ([[0.1, 0.2]], [{"easy": [2], "hard": [], "junk": []}], ValueError, "out of range"),
        ([[0.1, 0.2]], [{"easy": [0.5], "hard": [], "junk": []}], TypeError, "integer"),
        ([[0.1, 0.2]], [{"easy": [0], "hard": [0], "junk": []}], ValueError, "both 'easy' and 'hard'"),
        ([[0.1, 0.2]], [{"easy": "0", "hard": [], "junk": []}], TypeError, "list of gallery indices"),
        ([[0.1, 0.2]], {"easy": [0]}, TypeError, "one mapping per query"),
        ([["a", "b"]], [{"easy": [0], "hard": [], "junk": []}], TypeError, "similarities"),
    ],
)
def test_errors_name_the_argument(sims: object, truth: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        revisited_evaluate(sims, truth)


def test_kappas_are_checked() -> None:
    with pytest.raises(ValueError, match="kappas"):
        revisited_evaluate([[0.1]], [{"easy": [0], "hard": [], "junk": []}], kappas=[0])
