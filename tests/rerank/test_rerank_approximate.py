"""The approximate full re-ranking: equal to the exact mode when its graph is exact; bad input refused."""

from __future__ import annotations

import numpy as np
import pytest

from galleria.index.neighbor_graph import exact_graph
from galleria.metrics import reid_evaluate
from galleria.rerank import approximate, iter_k_reciprocal_rerank_features, k_reciprocal_rerank_features
from galleria.rerank.approximate import iter_k_reciprocal_rerank_approximate as approximate_stream


def _data(probes: int, gallery: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, 10))
    probe_ids = rng.integers(0, 12, probes)
    gallery_ids = rng.integers(0, 12, gallery)
    probe = (centres[probe_ids] + 0.9 * rng.normal(size=(probes, 10))).astype(np.float32)
    gallery_features = (centres[gallery_ids] + 0.9 * rng.normal(size=(gallery, 10))).astype(np.float32)
    return probe, gallery_features, probe_ids, gallery_ids


def _assemble(pairs: object, probes: int, gallery: int) -> np.ndarray:
    out = np.full((probes, gallery), np.nan, dtype=np.float32)
    for rows, block in pairs:  # type: ignore[attr-defined]
        assert block.dtype == np.float32
        assert np.isnan(out[rows]).all()
        out[rows] = block
    assert not np.isnan(out).any()
    return out


@pytest.mark.parametrize("mode", ["reference", "paper"])
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_exact_graph_gives_the_exact_mode(mode: str, metric: str) -> None:
    probe, gallery, _, _ = _data(40, 260)
    settings = {"metric": metric, "k1": 9, "k2": 4, "mode": mode}
    expected = k_reciprocal_rerank_features(probe, gallery, **settings)
    out = _assemble(approximate_stream(probe, gallery, graph="exact", **settings), 40, 260)
    assert out.tobytes() == expected.tobytes()


def test_small_output_blocks_give_the_same_values(monkeypatch: pytest.MonkeyPatch) -> None:
    probe, gallery, _, _ = _data(40, 260)
    whole = _assemble(approximate_stream(probe, gallery, k1=9, k2=4, graph="exact"), 40, 260)
    monkeypatch.setattr(approximate, "_OUTPUT_ELEMENTS", 7 * 260)
    blocks = list(approximate_stream(probe, gallery, k1=9, k2=4, graph="exact"))
    assert max(len(rows) for rows, _ in blocks) == 7
    assert _assemble(blocks, 40, 260).tobytes() == whole.tobytes()


def test_given_graph_ids_equal_the_built_graph() -> None:
    probe, gallery, _, _ = _data(30, 200)
    ids, _ = exact_graph(
        np.concatenate([probe, gallery])
        / np.linalg.norm(np.concatenate([probe, gallery]), axis=1, keepdims=True),
        12,
        "cosine",
    )
    built = _assemble(approximate_stream(probe, gallery, k1=9, k2=4, graph="exact"), 30, 200)
    given = _assemble(approximate_stream(probe, gallery, k1=9, k2=4, graph=ids), 30, 200)
    assert given.tobytes() == built.tobytes()


def test_a_sampled_scale_and_a_poorer_graph_change_the_values_not_the_metrics_much() -> None:
    probe, gallery, probe_ids, gallery_ids = _data(60, 600)
    cameras = (np.zeros(60, dtype=int), np.ones(600, dtype=int))
    exact = reid_evaluate(
        iter_k_reciprocal_rerank_features(probe, gallery, k1=9, k2=4, mode="reference"),
        probe_ids,
        gallery_ids,
        *cameras,
    )
    sampled = _assemble(
        approximate_stream(probe, gallery, k1=9, k2=4, graph="exact", scale_sample=50),
        60,
        600,
    )
    reference = k_reciprocal_rerank_features(probe, gallery, k1=9, k2=4, mode="reference")
    assert not np.array_equal(sampled, reference)  # the scales come from 50 members only
    approximate_result = reid_evaluate(sampled, probe_ids, gallery_ids, *cameras)
    assert abs(approximate_result.mAP - exact.mAP) < 0.05


def test_bad_graph_arguments_are_refused() -> None:
    probe, gallery, _, _ = _data(5, 30)
    with pytest.raises(ValueError, match="graph must be one of"):
        approximate_stream(probe, gallery, graph="kd-tree")
    with pytest.raises(ValueError, match=r"graph ids must have shape \(35, >= 20\)"):
        approximate_stream(probe, gallery, graph=np.zeros((35, 3), dtype=np.int64))
    with pytest.raises(ValueError, match=r"graph ids must lie in \[0, 35\)"):
        approximate_stream(probe, gallery, graph=np.full((35, 20), 35, dtype=np.int64))
    with pytest.raises(TypeError, match="graph must be a method name"):
        approximate_stream(probe, gallery, graph=np.zeros((35, 20)))
    with pytest.raises(ValueError, match="scale_sample"):
        approximate_stream(probe, gallery, scale_sample=0)
