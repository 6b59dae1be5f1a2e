"""Updating a neighbour graph after items were added and removed (:mod:`galleria.index.graph_update`)."""

from __future__ import annotations

import numpy as np
import pytest

from galleria.index import graph_update
from galleria.index.graph_update import update_graph
from galleria.index.neighbor_graph import check_graph_arrays, exact_graph, graph_recall


def _clustered(count: int, seed: int = 0, dim: int = 16) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, dim))
    points = centres[rng.integers(0, 20, count)] + 0.35 * rng.normal(size=(count, dim))
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def _changed(
    count: int, removed: np.ndarray, extra: np.ndarray, data: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The new state's vectors (kept rows in order, then ``extra``) and each old row's new row."""
    keep = np.ones(count, dtype=bool)
    keep[removed] = False
    kept = np.full(count, -1, dtype=np.int64)
    kept[keep] = np.arange(int(keep.sum()))
    return np.concatenate([data[keep], extra]), kept


@pytest.mark.parametrize("search", ["exact", "ivf"])
def test_an_update_keeps_the_rebuilds_neighbours(search: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if search == "ivf":  # the inverted file the added items are searched in above the exact limit
        monkeypatch.setattr(graph_update, "EXACT_SEARCH_LIMIT", 0)
        monkeypatch.setattr(graph_update, "CELL_SIZE", 64)
    data = _clustered(3030)
    old = data[:3000]
    ids, distances = exact_graph(old, 12, "cosine")
    removed = np.random.default_rng(1).choice(3000, 30, replace=False)  # 1 % removed, 1 % added
    new, kept = _changed(3000, removed, data[3000:], old)
    new_ids, new_distances, counts = update_graph(new, ids, distances, kept, 12, "cosine")
    check_graph_arrays(new_ids, new_distances, len(new), "updated", vectors=new, space="cosine", sample=500)
    truth, _ = exact_graph(new, 12, "cosine")
    assert graph_recall(new_ids, truth) >= 0.99  # a rebuild's is 1.0
    added = np.arange(2970, 3000)
    assert counts["added"] == 30 and counts["repaired"] > 0 and counts["entered"] > 0
    assert graph_recall(new_ids[added], truth[added]) >= (1.0 if search == "exact" else 0.95)
    untouched = (kept >= 0) & ~np.isin(ids, removed).any(axis=1)  # rows that lost no neighbour
    entered = (new_ids[kept[untouched]] >= 2970).any(axis=1)
    carried = kept[ids[untouched]][~entered]  # the same neighbours, renumbered
    np.testing.assert_array_equal(new_ids[kept[untouched]][~entered], carried)


def test_untouched_rows_are_carried_over_and_an_added_copy_enters_its_original() -> None:
    data = _clustered(600, seed=3)
    ids, distances = exact_graph(data, 8, "cosine")
    copy = data[5:6].copy()  # an exact copy of row 5 added: row 5's nearest is now the copy
    new, kept = _changed(600, np.array([], dtype=np.int64), copy, data)
    new_ids, new_distances, counts = update_graph(new, ids, distances, kept, 8, "cosine")
    assert new_ids[5, 0] == 600 and new_distances[5, 0] == pytest.approx(0.0, abs=1e-6)
    assert new_ids[600, 0] == 5
    same = ~(new_ids[:600] == 600).any(axis=1)
    np.testing.assert_array_equal(new_ids[:600][same], ids[same])
    np.testing.assert_array_equal(new_distances[:600][same], distances[same])
    assert counts == {"repaired": 0, "added": 1, "entered": int((~same).sum())}


def test_removals_are_repaired_and_a_row_left_without_candidates_is_searched_exactly() -> None:
    rng = np.random.default_rng(4)
    far = rng.normal(size=(5, 16)).astype(np.float32) * 0.01 + 10.0  # a tight group far from the rest
    data = np.concatenate([rng.normal(size=(200, 16)).astype(np.float32), far])
    ids, distances = exact_graph(data, 4, "l2")
    removed = np.arange(201, 205)  # the group's other members: row 200 lost every neighbour
    new, kept = _changed(205, removed, np.empty((0, 16), np.float32), data)
    new_ids, new_distances, counts = update_graph(new, ids, distances, kept, 4, "l2")
    truth, _truth_distances = exact_graph(new, 4, "l2")
    np.testing.assert_array_equal(new_ids[200], truth[200])
    assert counts["repaired"] >= 1 and counts["added"] == 0
    assert not np.isin(new_ids, np.arange(201, 205)).any() and new_ids.max() < 201
    check_graph_arrays(new_ids, new_distances, 201, "updated", vectors=new, space="l2", sample=201)


def test_a_graph_wider_than_the_new_state_is_cut() -> None:
    data = _clustered(12, seed=5)
    ids, distances = exact_graph(data, 8, "cosine")
    new, kept = _changed(12, np.arange(6), np.empty((0, 16), np.float32), data)
    new_ids, _new_distances, _ = update_graph(new, ids, distances, kept, 8, "cosine")
    assert new_ids.shape == (6, 5)
    np.testing.assert_array_equal(new_ids, exact_graph(new, 5, "cosine")[0])
