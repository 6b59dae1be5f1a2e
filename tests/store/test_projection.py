"""Issue 36: the map of a large gallery — a seeded sample laid out, the others placed along the graph."""

from __future__ import annotations

import numpy as np

from galleria.store._projection import place_along_graph, sample_rows


def _chain(count: int) -> tuple[np.ndarray, np.ndarray]:
    """A path graph 0 - 1 - 2 - ...: each row's two neighbours (the ends: one, then the next but one)."""
    ids = np.empty((count, 2), np.int64)
    for row in range(count):
        near = sorted(
            (r for r in (row - 1, row + 1, row - 2, row + 2) if 0 <= r < count),
            key=lambda r: (abs(r - row), r),
        )
        ids[row] = near[:2]
    distances = np.abs(ids - np.arange(count)[:, None]).astype(np.float32)
    return ids, distances


def test_rows_are_placed_at_the_weighted_mean_of_their_placed_neighbours() -> None:
    ids = np.array([[1, 2], [0, 2], [0, 1]])
    distances = np.array([[1.0, 1.0], [1.0, 3.0], [1.0, 3.0]], dtype=np.float32)
    xy = np.array([[0.0, 0.0], [0.0, 0.0], [8.0, 4.0]], dtype=np.float32)
    out, done = place_along_graph(ids, distances, xy, np.array([False, True, True]), nearest=2)
    assert done.all()
    weights = 1 / (np.array([1.0, 1.0]) + 1e-6)
    assert np.allclose(out[0], (weights[0] * xy[1] + weights[1] * xy[2]) / weights.sum())
    assert out[1].tolist() == [0.0, 0.0] and out[2].tolist() == [8.0, 4.0]  # placed rows never move
    # a near copy (distance 0) lands on its original
    out, _ = place_along_graph(
        ids, np.array([[0.0, 1.0], [1, 1], [1, 1]], np.float32), xy, np.array([False, True, True])
    )
    assert np.allclose(out[0], xy[1], atol=1e-4)


def test_placement_walks_the_graph_in_rounds_and_stops_where_it_cannot() -> None:
    ids, distances = _chain(6)
    xy = np.zeros((6, 2), np.float32)
    xy[0] = [5.0, 5.0]
    placed = np.zeros(6, bool)
    placed[0] = True
    out, done = place_along_graph(ids, distances, xy, placed, nearest=1, rounds=2)
    assert done.tolist() == [True, True, True, False, False, False]  # one step along the chain a round
    assert np.allclose(out[:3], 5.0) and out[3:].tolist() == [[0.0, 0.0]] * 3
    _, everything = place_along_graph(ids, distances, xy, placed, nearest=1, rounds=8)
    assert everything.all()
    # an island with no path to a placed row stays unplaced
    island_ids = np.array([[1], [0], [3], [2]])
    _, done = place_along_graph(
        island_ids,
        np.ones((4, 1), np.float32),
        np.zeros((4, 2), np.float32),
        np.array([True, False, False, False]),
    )
    assert done.tolist() == [True, True, False, False]


def test_placement_does_not_depend_on_the_order_of_the_rows() -> None:
    rng = np.random.default_rng(2)
    count = 300
    ids = np.stack([rng.choice(np.delete(np.arange(count), row), 6, replace=False) for row in range(count)])
    distances = np.sort(rng.random((count, 6)).astype(np.float32), axis=1)
    placed = rng.random(count) < 0.1
    xy = np.where(placed[:, None], rng.normal(size=(count, 2)), 0).astype(np.float32)
    out, done = place_along_graph(ids, distances, xy, placed)
    order = rng.permutation(count)
    back = np.argsort(order)
    out2, done2 = place_along_graph(back[ids[order]], distances[order], xy[order], placed[order])
    assert (done2 == done[order]).all() and np.allclose(out2, out[order], atol=1e-5)


def test_the_sample_is_seeded_and_sorted() -> None:
    rows = sample_rows(10_000, 500, 0)
    assert rows.size == 500 == np.unique(rows).size and (np.diff(rows) > 0).all()
    assert (rows == sample_rows(10_000, 500, 0)).all() and not (rows == sample_rows(10_000, 500, 1)).all()
    assert sample_rows(10, 50, 0).tolist() == list(range(10))
