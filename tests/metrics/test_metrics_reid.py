"""reid_evaluate against a literal transcription of the protocol; hand cases, junk, streams, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from galleria.metrics import ReidResult, reid_evaluate
from galleria.metrics import reid as reid_module


def literal_reid(
    distances: list[list[float]],
    query_ids: list[int],
    gallery_ids: list[int],
    query_cameras: list[int],
    gallery_cameras: list[int],
    max_rank: int,
    ignore_ids: tuple[int, ...] = (-1,),
    higher_is_better: bool = False,
) -> dict[str, object]:
    """The protocol word for word: drop junk, sort, walk the list."""
    aps: list[float] = []
    inps: list[float] = []
    firsts: list[int] = []
    per_ap: list[float] = []
    for i, row in enumerate(distances):
        kept = [
            (row[j], j)
            for j in range(len(gallery_ids))
            if not (gallery_ids[j] == query_ids[i] and gallery_cameras[j] == query_cameras[i])
            and gallery_ids[j] not in ignore_ids
        ]
        if higher_is_better:
            kept.sort(key=lambda item: (-item[0], item[1]))
        else:
            kept.sort(key=lambda item: (item[0], item[1]))
        relevant = [gallery_ids[j] == query_ids[i] and query_ids[i] not in ignore_ids for _, j in kept]
        if not any(relevant):
            per_ap.append(math.nan)
            continue
        found = 0
        precisions = []
        for position, is_relevant in enumerate(relevant):
            if is_relevant:
                found += 1
                precisions.append(found / (position + 1))
        last = max(position for position, is_relevant in enumerate(relevant) if is_relevant)
        aps.append(sum(precisions) / len(precisions))
        per_ap.append(aps[-1])
        inps.append(found / (last + 1))
        firsts.append(relevant.index(True))
    cmc = [
        sum(first < k for first in firsts) / len(firsts) if firsts else 0.0 for k in range(1, max_rank + 1)
    ]
    return {
        "cmc": cmc,
        "mAP": sum(aps) / len(aps) if aps else math.nan,
        "mINP": sum(inps) / len(inps) if inps else math.nan,
        "valid": len(firsts),
        "ap": per_ap,
    }


@st.composite
def reid_cases(draw: st.DrawFn) -> tuple[list[list[float]], list[int], list[int], list[int], list[int]]:
    probes = draw(st.integers(1, 5))
    gallery = draw(st.integers(1, 10))
    ids = st.integers(-1, 3)
    cameras = st.integers(0, 2)
    query_ids = draw(st.lists(st.integers(0, 3), min_size=probes, max_size=probes))
    gallery_ids = draw(st.lists(ids, min_size=gallery, max_size=gallery))
    query_cameras = draw(st.lists(cameras, min_size=probes, max_size=probes))
    gallery_cameras = draw(st.lists(cameras, min_size=gallery, max_size=gallery))
    # Few distinct values: plenty of ties, which the lower gallery index must break.
    values = st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0])
    distances = draw(
        st.lists(st.lists(values, min_size=gallery, max_size=gallery), min_size=probes, max_size=probes)
    )
    return distances, query_ids, gallery_ids, query_cameras, gallery_cameras


def _assert_matches(result: ReidResult, expected: dict[str, object]) -> None:
    assert result.valid_queries == expected["valid"]
    assert result.cmc.tolist() == pytest.approx(expected["cmc"])
    if expected["valid"]:
        assert result.mAP == pytest.approx(expected["mAP"])
        assert result.mINP == pytest.approx(expected["mINP"])
    else:
        assert math.isnan(result.mAP) and math.isnan(result.mINP)
    np.testing.assert_allclose(result.ap, np.array(expected["ap"], dtype=float), equal_nan=True)


@given(reid_cases(), st.integers(1, 12), st.booleans())
def test_matches_the_literal_protocol(case, max_rank, higher) -> None:  # type: ignore[no-untyped-def]
    distances, query_ids, gallery_ids, query_cameras, gallery_cameras = case
    expected = literal_reid(
        distances, query_ids, gallery_ids, query_cameras, gallery_cameras, max_rank, higher_is_better=higher
    )
    result = reid_evaluate(
        np.array(distances, dtype=np.float32),
        query_ids,
        gallery_ids,
        query_cameras,
        gallery_cameras,
        max_rank=max_rank,
        higher_is_better=higher,
    )
    _assert_matches(result, expected)
    assert result.skipped_queries == len(query_ids) - expected["valid"]


@given(reid_cases(), st.data())
def test_junk_inserted_anywhere_never_changes_the_rest(case, data) -> None:  # type: ignore[no-untyped-def]
    distances, query_ids, gallery_ids, query_cameras, gallery_cameras = case
    before = reid_evaluate(distances, query_ids, gallery_ids, query_cameras, gallery_cameras, max_rank=5)
    matrix = np.array(distances, dtype=np.float64)
    ids, cams = list(gallery_ids), list(gallery_cameras)
    for _ in range(data.draw(st.integers(1, 4))):
        column = data.draw(st.integers(0, len(ids)))
        value = data.draw(st.sampled_from([0.0, 0.25, 0.5, 3.0]))
        # Junk of one of two kinds: an ignored identity, or a query's own identity and camera.
        if data.draw(st.booleans()):
            ids.insert(column, -1)
            cams.insert(column, data.draw(st.integers(0, 2)))
        else:
            query = data.draw(st.integers(0, len(query_ids) - 1))
            # Junk for this query only; for others it is a gallery item of another identity, so
            # only the query whose junk it is is compared below.
            ids.insert(column, query_ids[query])
            cams.insert(column, query_cameras[query])
        matrix = np.insert(matrix, column, value, axis=1)
        if ids[column] != -1:
            after = reid_evaluate(matrix, query_ids, ids, query_cameras, cams, max_rank=5)
            same = [
                q
                for q in range(len(query_ids))
                if query_ids[q] == ids[column] and query_cameras[q] == cams[column]
            ]
            np.testing.assert_allclose(after.ap[same], before.ap[same], equal_nan=True)
            np.testing.assert_allclose(after.inp[same], before.inp[same], equal_nan=True)
            np.testing.assert_array_equal(after.first_positive_rank[same], before.first_positive_rank[same])
            return
    after = reid_evaluate(matrix, query_ids, ids, query_cameras, cams, max_rank=5)
    np.testing.assert_allclose(after.ap, before.ap, equal_nan=True)
    np.testing.assert_allclose(after.inp, before.inp, equal_nan=True)
    np.testing.assert_array_equal(after.cmc, before.cmc)


def test_hand_computed_case() -> None:
    # Query 0 (id 7, camera 0). Gallery, by distance: g3 (id 7 cam 0: junk), g1 (id 9), g0 (id 7
    # cam 1: positive), g4 (id -1: junk), g2 (id 7 cam 2: positive), g5 (id 9).
    distances = [[0.3, 0.2, 0.6, 0.1, 0.4, 0.9]]
    result = reid_evaluate(distances, [7], [7, 9, 7, 7, -1, 9], [0], [1, 0, 2, 0, 1, 1], max_rank=3)
    # Remaining ranking: g1, g0, g2, g5 → positives at 0-indexed 1 and 2.
    assert result.first_positive_rank.tolist() == [1]
    assert result.cmc.tolist() == [0.0, 1.0, 1.0]
    assert result.mAP == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert result.mINP == pytest.approx(2 / 3)
    assert result.n_positives.tolist() == [2]


def test_query_without_positive_is_skipped_and_counted() -> None:
    result = reid_evaluate([[0.1, 0.2], [0.3, 0.1]], [1, 2], [1, 3], [0, 0], [0, 1])
    # Query 0: its only item has its camera; query 1: its identity is absent.
    assert result.valid_queries == 0 and result.skipped_queries == 2
    assert np.isnan(result.ap).all() and math.isnan(result.mAP)
    assert result.first_positive_rank.tolist() == [-1, -1]


def test_ignore_ids_can_be_changed_or_emptied() -> None:
    distances = [[0.1, 0.2]]
    with_junk = reid_evaluate(distances, [5], [0, 5], [0], [1, 1], ignore_ids=(0,))
    without = reid_evaluate(distances, [5], [0, 5], [0], [1, 1], ignore_ids=())
    assert with_junk.first_positive_rank.tolist() == [0]
    assert without.first_positive_rank.tolist() == [1]


def test_top_lists_skip_the_junk() -> None:
    distances = [[0.3, 0.2, 0.6, 0.1, 0.4, 0.9]]
    result = reid_evaluate(distances, [7], [7, 9, 7, 7, -1, 9], [0], [1, 0, 2, 0, 1, 1], top_k=6)
    assert result.top.tolist() == [[1, 0, 2, 5, -1, -1]]


def test_stream_in_any_order_equals_the_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    probes, gallery = 37, 53
    distances = rng.random((probes, gallery)).astype(np.float32)
    distances[:, 5] = distances[:, 6]  # ties
    query_ids = rng.integers(0, 8, probes)
    gallery_ids = rng.integers(-1, 8, gallery)
    query_cameras = rng.integers(0, 3, probes)
    gallery_cameras = rng.integers(0, 3, gallery)
    args = (query_ids, gallery_ids, query_cameras, gallery_cameras)
    whole = reid_evaluate(distances, *args, top_k=5)
    order = rng.permutation(probes)
    pieces = np.array_split(order, 6)
    streamed = reid_evaluate(((rows, distances[rows]) for rows in pieces), *args, top_k=5)
    listed = reid_evaluate([(rows, distances[rows]) for rows in pieces], *args, top_k=5)
    monkeypatch.setattr(reid_module, "_BLOCK_ELEMENTS", gallery * 4)  # many small matrix blocks
    blocked = reid_evaluate(distances, *args, top_k=5)
    for other in (streamed, listed, blocked):
        np.testing.assert_array_equal(other.cmc, whole.cmc)
        np.testing.assert_array_equal(other.ap, whole.ap)
        np.testing.assert_array_equal(other.inp, whole.inp)
        np.testing.assert_array_equal(other.top, whole.top)
        np.testing.assert_array_equal(other.pr_precision, whole.pr_precision)
        assert other.mAP == whole.mAP


def test_pr_points_follow_the_definition() -> None:
    # One query, positives at 0-indexed 0 and 2: P = 1 at recall 0.5, 2/3 at recall 1.
    result = reid_evaluate([[0.1, 0.2, 0.3]], [1], [1, 2, 1], [0], [1, 1, 1])
    levels = result.pr_recall
    expected = np.where(levels <= 0.5, 1.0, 2 / 3)
    np.testing.assert_allclose(result.pr_precision, expected)


def test_integer_distances_and_summary() -> None:
    result = reid_evaluate(np.array([[3, 1, 2]]), [1], [1, 2, 1], [0], [1, 1, 1], max_rank=2)
    assert result.first_positive_rank.tolist() == [1]
    summary = result.summary()
    assert summary["cmc@1"] == 0.0 and summary["valid_queries"] == 1 and "cmc@5" not in summary


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"distances": [[0.1, np.nan]]}, ValueError, "distances must be finite"),
        ({"distances": [[0.1, np.inf]]}, ValueError, "distances must be finite"),
        ({"distances": [[0.1, 0.2, 0.3]]}, ValueError, "distances must have shape"),
        ({"distances": np.zeros((0, 2))}, ValueError, "must not be empty"),
        ({"query_ids": [1.5]}, TypeError, "query_ids"),
        ({"gallery_ids": ["a", "b"]}, TypeError, "gallery_ids"),
        ({"query_cameras": [0, 1]}, ValueError, "query_cameras must have 1 entries"),
        ({"gallery_cameras": [0]}, ValueError, "gallery_cameras must have 2 entries"),
        ({"query_ids": []}, ValueError, "query_ids must not be empty"),
        ({"max_rank": 0}, ValueError, "max_rank"),
        ({"max_rank": 2.0}, TypeError, "max_rank"),
        ({"ignore_ids": [0.5]}, TypeError, "ignore_ids"),
        ({"higher_is_better": 1}, TypeError, "higher_is_better"),
        ({"top_k": -1}, ValueError, "top_k"),
    ],
)
def test_errors_name_the_argument(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    arguments: dict[str, object] = {
        "distances": [[0.1, 0.2]],
        "query_ids": [1],
        "gallery_ids": [1, 2],
        "query_cameras": [0],
        "gallery_cameras": [1, 1],
    }
    arguments.update(kwargs)
    options = {
        key: arguments.pop(key)
        for key in ("max_rank", "ignore_ids", "higher_is_better", "top_k")
        if key in arguments
    }
    with pytest.raises(error, match=match):
        reid_evaluate(*arguments.values(), **options)  # type: ignore[arg-type]


def test_stream_errors() -> None:
    args = ([1, 2], [1, 2], [0, 0], [1, 1])
    block = np.zeros((1, 2))
    with pytest.raises(ValueError, match="probe row 1 is missing"):
        reid_evaluate(iter([(np.array([0]), block)]), *args)
    with pytest.raises(ValueError, match="second time"):
        reid_evaluate(iter([(np.array([0]), block), (np.array([0]), block)]), *args)
    with pytest.raises(ValueError, match="probe row 1 a second time"):
        reid_evaluate(iter([(np.array([1, 1]), np.zeros((2, 2)))]), *args)
    with pytest.raises(ValueError, match="block must have shape"):
        reid_evaluate(iter([(np.array([0, 1]), block)]), *args)
    with pytest.raises(ValueError, match="out of range"):
        reid_evaluate(iter([(np.array([2]), block)]), *args)
    with pytest.raises(TypeError, match="pair"):
        reid_evaluate(iter([block]), *args)
    with pytest.raises(ValueError, match="finite, got nan at row 1"):
        reid_evaluate(iter([(np.array([1, 0]), np.array([[0.0, np.nan], [0.0, 0.0]]))]), *args)
