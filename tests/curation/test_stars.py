"""The pure core of duplicate groups: candidate lists merged from the neighbour graph and extra pairs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from galleria.curation.stars import with_pairs


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12), st.integers(1, 4), st.integers(0, 2**31 - 1), st.floats(0.05, 0.5))
def test_candidate_lists_hold_each_near_neighbour_and_each_extra_pair_once(
    n: int, k: int, seed: int, radius: float
) -> None:
    rng = np.random.default_rng(seed)
    gaps = np.round(rng.uniform(0, 0.6, size=(n, n)), 3)
    gaps = np.minimum(gaps, gaps.T)
    np.fill_diagonal(gaps, np.inf)
    k = min(k, n - 1)
    ids = np.array([np.lexsort((np.arange(n), gaps[i]))[:k] for i in range(n)])
    distances = np.take_along_axis(gaps, ids, axis=1)
    extra = rng.integers(0, n, size=(rng.integers(0, 2 * n + 1), 2))
    extra = extra[extra[:, 0] != extra[:, 1]]
    near, far = with_pairs(ids, distances, radius, extra[:, 0], extra[:, 1], gaps[extra[:, 0], extra[:, 1]])
    for row in range(n):
        expected = {int(j) for j, d in zip(ids[row], distances[row], strict=True) if d <= radius}
        expected |= {int(b) for a, b in extra if a == row} | {int(a) for a, b in extra if b == row}
        listed = [int(j) for j in near[row] if j >= 0]
        assert sorted(listed) == sorted(expected) and len(listed) == len(set(listed))
        values = far[row][: len(listed)]
        assert np.all(np.diff(values) >= 0)  # nearest first
        assert all(far[row][i] == gaps[row, j] for i, j in enumerate(listed))
        assert np.all(far[row][len(listed) :] == np.inf)


def test_no_pairs_and_nothing_near_leaves_empty_lists() -> None:
    ids, distances = np.array([[1], [0]]), np.array([[0.9], [0.9]])
    near, far = with_pairs(ids, distances, 0.1, np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    assert near.tolist() == [[-1], [-1]] and np.isinf(far).all()
