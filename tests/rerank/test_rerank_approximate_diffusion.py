"""The approximate diffusion: the exact function's values with an exact graph, close with HNSW's."""

from __future__ import annotations

import numpy as np
import pytest

from galleria.metrics import reid_evaluate
from galleria.rerank import _approximate_diffusion
from galleria.rerank.approximate import iter_diffusion_rerank_approximate
from galleria.rerank.diffusion import diffusion_rerank_features


def _data(probes: int, gallery: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(30, 16))
    probe_ids, gallery_ids = rng.integers(0, 30, probes), rng.integers(0, 30, gallery)
    probe = centres[probe_ids] + 0.8 * rng.normal(size=(probes, 16))
    return probe, centres[gallery_ids] + 0.8 * rng.normal(size=(gallery, 16)), probe_ids, gallery_ids


def _joined(pairs: object, probes: int) -> np.ndarray:
    rows, blocks = zip(*pairs, strict=True)  # type: ignore[call-overload]
    assert np.concatenate(rows).tolist() == list(range(probes))
    return np.concatenate(blocks)


def test_an_exact_graph_gives_the_exact_values_up_to_rounding() -> None:
    probe, gallery, _, _ = _data(60, 700)
    expected = diffusion_rerank_features(probe, gallery, k=20, query_k=5)
    found = _joined(iter_diffusion_rerank_approximate(probe, gallery, k=20, query_k=5, graph="symmetric"), 60)
    assert found.shape == expected.shape and found.dtype == np.float64
    np.testing.assert_allclose(found, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


def test_small_blocks_and_an_hnsw_graph_keep_the_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    probe, gallery, probe_ids, gallery_ids = _data(80, 900)
    cameras = (np.zeros(80, dtype=int), np.ones(900, dtype=int))
    exact = reid_evaluate(
        diffusion_rerank_features(probe, gallery, k=20, query_k=5), probe_ids, gallery_ids, *cameras
    )
    monkeypatch.setattr(_approximate_diffusion, "_BLOCK_ELEMENTS", 7 * 900)
    pairs = list(iter_diffusion_rerank_approximate(probe, gallery, k=20, query_k=5, graph="hnsw"))
    assert max(len(rows) for rows, _ in pairs) == 7
    approximate = reid_evaluate(iter(pairs), probe_ids, gallery_ids, *cameras)
    assert abs(approximate.mAP - exact.mAP) < 0.01


def test_given_ids_and_bad_graphs() -> None:
    probe, gallery, _, _ = _data(5, 40)
    from galleria.index.neighbor_graph import exact_graph

    unit = gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
    ids, _ = exact_graph(unit, 9, "cosine")
    given = _joined(iter_diffusion_rerank_approximate(probe, gallery, k=10, query_k=3, graph=ids), 5)
    built = _joined(iter_diffusion_rerank_approximate(probe, gallery, k=10, query_k=3, graph="exact"), 5)
    assert given.tobytes() == built.tobytes()
    with pytest.raises(ValueError, match="graph must be one of"):
        iter_diffusion_rerank_approximate(probe, gallery, graph="kd-tree")
    with pytest.raises(ValueError, match=r"graph ids must have shape \(40, >= 9\)"):
        iter_diffusion_rerank_approximate(probe, gallery, k=10, graph=ids[:, :3])
    with pytest.raises(ValueError, match=r"graph ids must lie in \[0, 40\)"):
        iter_diffusion_rerank_approximate(probe, gallery, k=10, graph=ids + 40)
    with pytest.raises(TypeError, match="graph must be a method name"):
        iter_diffusion_rerank_approximate(probe, gallery, k=10, graph=ids.astype(float))
    with pytest.raises(ValueError, match="gallery_features has dimension"):
        iter_diffusion_rerank_approximate(probe, gallery[:, :3])
