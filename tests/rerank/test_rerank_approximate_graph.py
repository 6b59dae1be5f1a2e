"""The symmetric exact lists of the approximate re-ranking: equal to brute force, in any tiling."""

from __future__ import annotations

import numpy as np
import pytest

from galleria.index.neighbor_graph import exact_graph
from galleria.rerank import _approximate_graph, approximate, k_reciprocal_rerank_features
from galleria.rerank._approximate_graph import symmetric_graph
from galleria.rerank.approximate import iter_k_reciprocal_rerank_approximate


def _clustered(size: int, dim: int, seed: int, *, unit: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(1, size // 30), dim))
    vectors = (centres[rng.integers(0, len(centres), size)] + rng.normal(size=(size, dim))).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True) if unit else vectors


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize(("tile", "pending"), [(2048, 1 << 22), (128, 300), (97, 1)])
def test_equal_to_brute_force_in_any_tiling(
    metric: str, tile: int, pending: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_approximate_graph, "TILE", tile)
    monkeypatch.setattr(_approximate_graph, "_PENDING", pending)
    vectors = _clustered(1000, 12, 1, unit=metric == "cosine")
    expected, _ = exact_graph(vectors, 15, "cosine" if metric == "cosine" else "l2")
    found = symmetric_graph(vectors, 15, metric)
    assert found.dtype == np.int64 and found.shape == (1000, 15)
    np.testing.assert_array_equal(found, expected)


def test_equal_distances_are_ordered_by_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_approximate_graph, "TILE", 64)
    monkeypatch.setattr(_approximate_graph, "_PENDING", 50)
    base = _clustered(100, 6, 2, unit=True)
    vectors = np.concatenate([base, base, base])  # every member has two exact copies, far apart in order
    expected, _ = exact_graph(vectors, 7, "cosine")
    np.testing.assert_array_equal(symmetric_graph(vectors, 7, "cosine"), expected)


@pytest.mark.parametrize("size", [2, 5, 130])
def test_every_other_member_and_short_tiles(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_approximate_graph, "TILE", 64)
    vectors = _clustered(size, 4, 3, unit=False)
    expected, _ = exact_graph(vectors, size - 1, "l2")
    np.testing.assert_array_equal(symmetric_graph(vectors, size - 1, "euclidean"), expected)
    assert symmetric_graph(vectors, 0, "euclidean").shape == (size, 0)


def test_kept_entries_stay_near_k_log_n(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory shape: what waits between merges grows with the members × k, not with their square."""
    size, k = 6000, 10
    monkeypatch.setattr(_approximate_graph, "TILE", 256)
    monkeypatch.setattr(_approximate_graph, "_PENDING", size * k)
    kept: list[int] = []
    merge = _approximate_graph._Best.merge

    def counted(self: _approximate_graph._Best) -> None:
        kept.append(self.waiting)
        merge(self)

    monkeypatch.setattr(_approximate_graph._Best, "merge", counted)
    symmetric_graph(_clustered(size, 16, 4, unit=True), k, "cosine")
    assert 0 < sum(kept) < size * k * 12  # all pairs would be size² / 2 = 18M; k·log2(6000/256) ≈ 45 a row


@pytest.mark.parametrize("mode", ["reference", "paper"])
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_symmetric_graph_gives_the_exact_mode(
    mode: str, metric: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_approximate_graph, "TILE", 100)
    rng = np.random.default_rng(5)
    probe, gallery = rng.normal(size=(40, 10)), rng.normal(size=(260, 10))
    settings = {"metric": metric, "k1": 9, "k2": 4, "mode": mode}
    expected = k_reciprocal_rerank_features(probe, gallery, **settings)
    blocks = list(iter_k_reciprocal_rerank_approximate(probe, gallery, graph="symmetric", **settings))
    assert np.concatenate([rows for rows, _ in blocks]).tolist() == list(range(40))
    out = np.concatenate([block for _, block in blocks])
    assert out.tobytes() == expected.tobytes()
    auto = np.concatenate(
        [block for _, block in iter_k_reciprocal_rerank_approximate(probe, gallery, **settings)]
    )
    assert auto.tobytes() == expected.tobytes()  # "auto" takes the symmetric lists at this size


def test_single_precision_weights_above_the_limit_change_the_values_by_rounding_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(6)
    probe, gallery = rng.normal(size=(30, 8)), rng.normal(size=(200, 8))
    settings = {"k1": 9, "k2": 4, "graph": "symmetric"}
    double = np.concatenate([b for _, b in iter_k_reciprocal_rerank_approximate(probe, gallery, **settings)])
    monkeypatch.setattr(approximate, "SINGLE_LIMIT", 100)
    prepared = approximate.prepare_k_reciprocal_approximate(probe, gallery, **settings)
    assert prepared.jaccard.probe_part.dtype == np.float32 and prepared.jaccard.inverted.dtype == np.float32
    single = np.concatenate([b for _, b in iter_k_reciprocal_rerank_approximate(probe, gallery, **settings)])
    assert not np.array_equal(single, double)
    np.testing.assert_allclose(single, double, rtol=0, atol=1e-6)


def test_the_prepared_state_grows_with_the_members_times_k_not_with_probes_times_gallery() -> None:
    probe, gallery = _clustered(2000, 8, 7, unit=True), _clustered(2000, 8, 8, unit=True)
    k1, k2 = 9, 4
    prepared = approximate.prepare_k_reciprocal_approximate(probe, gallery, k1=k1, k2=k2)
    jaccard = prepared.jaccard
    stored = jaccard.probe_part.nnz + jaccard.inverted.nnz
    # R* holds at most (k1 + 1) + (k1 + 1)·(k1 // 2 + 1) members; query expansion unites k2 of them
    assert stored <= 4000 * k2 * (k1 + 1) * (k1 // 2 + 2)
    assert stored < 2000 * 2000 / 2  # far below the probe × gallery pairs (4M)
    assert prepared.step * 2000 <= max(2 * 2000, approximate._OUTPUT_ELEMENTS)
