"""Streamed full re-ranking equals the matrix version, and streamed evaluation equals matrix evaluation."""

from __future__ import annotations

import numpy as np
import pytest

import galleria
from galleria.distances import pairwise_distances
from galleria.metrics import reid_evaluate
from galleria.rerank import _full_blocks as blocks
from galleria.rerank import (
    iter_k_reciprocal_rerank,
    iter_k_reciprocal_rerank_features,
    k_reciprocal_rerank,
    k_reciprocal_rerank_features,
)


def _data(probes: int, gallery: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(9, 8))
    probe_ids = rng.integers(0, 9, probes)
    gallery_ids = rng.integers(0, 9, gallery)
    probe = (centres[probe_ids] + 0.8 * rng.normal(size=(probes, 8))).astype(np.float32)
    gallery_features = (centres[gallery_ids] + 0.8 * rng.normal(size=(gallery, 8))).astype(np.float32)
    return probe, gallery_features, probe_ids, gallery_ids


def _assemble(pairs: object, probes: int, gallery: int) -> tuple[np.ndarray, list[int]]:
    out = np.full((probes, gallery), np.nan, dtype=np.float32)
    sizes = []
    for rows, block in pairs:  # type: ignore[attr-defined]
        assert block.dtype == np.float32 and block.shape == (len(rows), gallery)
        assert np.isnan(out[rows]).all()  # each probe once
        out[rows] = block
        sizes.append(len(rows))
    return out, sizes


@pytest.mark.parametrize("mode", ["paper", "reference"])
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("block_elements", [None, 7 * 130, 1])
def test_streamed_features_equal_the_matrix(
    monkeypatch: pytest.MonkeyPatch, mode: str, metric: str, block_elements: int | None
) -> None:
    probe, gallery, _, _ = _data(30, 100)
    if block_elements is not None:  # blocks of 7 probes, or of one
        monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", block_elements)
    expected = k_reciprocal_rerank_features(probe, gallery, metric=metric, k1=6, k2=3, mode=mode)
    out, sizes = _assemble(
        iter_k_reciprocal_rerank_features(probe, gallery, metric=metric, k1=6, k2=3, mode=mode), 30, 100
    )
    np.testing.assert_array_equal(out, expected)
    if block_elements is not None:
        assert max(sizes) == (7 if block_elements > 1 else 1)


@pytest.mark.parametrize("mode", ["paper", "reference"])
def test_streamed_matrices_equal_the_matrix(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    probe, gallery, _, _ = _data(12, 40, seed=1)
    pg = pairwise_distances(probe, gallery, "l2")
    pp = pairwise_distances(probe, probe, "l2")
    gg = pairwise_distances(gallery, gallery, "l2")
    pg[0, :3] = pg[0, 3]  # ties
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 5 * 52)
    expected = k_reciprocal_rerank(pg, pp, gg, k1=5, k2=2, lambda_value=0.2, mode=mode)
    out, sizes = _assemble(
        iter_k_reciprocal_rerank(pg, pp, gg, k1=5, k2=2, lambda_value=0.2, mode=mode), 12, 40
    )
    np.testing.assert_array_equal(out, expected)
    assert sizes == [5, 5, 2]


def test_float64_matrices_stream_equal() -> None:
    probe, gallery, _, _ = _data(6, 20, seed=2)
    pg, pp, gg = (
        pairwise_distances(a, b, "cosine").astype(np.float64)
        for a, b in ((probe, gallery), (probe, probe), (gallery, gallery))
    )
    expected = k_reciprocal_rerank(pg, pp, gg, k1=4, k2=2)
    out, _ = _assemble(iter_k_reciprocal_rerank(pg, pp, gg, k1=4, k2=2), 6, 20)
    np.testing.assert_array_equal(out, expected)


def test_streamed_evaluation_equals_the_matrix_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    probe, gallery, probe_ids, gallery_ids = _data(40, 150, seed=3)
    rng = np.random.default_rng(4)
    probe_cams, gallery_cams = rng.integers(0, 3, 40), rng.integers(0, 3, 150)
    gallery_ids[:5] = -1  # junk
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 9 * 190)
    labels = (probe_ids, gallery_ids, probe_cams, gallery_cams)
    matrix = k_reciprocal_rerank_features(probe, gallery, k1=8, k2=3, mode="reference")
    whole = reid_evaluate(matrix, *labels, max_rank=10, top_k=10)
    streamed = reid_evaluate(
        galleria.iter_k_reciprocal_rerank_features(probe, gallery, k1=8, k2=3, mode="reference"),
        *labels,
        max_rank=10,
        top_k=10,
    )
    assert streamed.valid_queries == whole.valid_queries > 0
    for name in ("cmc", "ap", "inp", "first_positive_rank", "top", "pr_precision"):
        np.testing.assert_array_equal(getattr(streamed, name), getattr(whole, name))
    assert (streamed.mAP, streamed.mINP) == (whole.mAP, whole.mINP)


def test_arguments_are_checked_at_the_call() -> None:
    probe, gallery, _, _ = _data(3, 10)
    with pytest.raises(ValueError, match="k2 must not exceed k1"):
        iter_k_reciprocal_rerank_features(probe, gallery, k1=2, k2=3)
    with pytest.raises(ValueError, match="same feature dimension"):
        iter_k_reciprocal_rerank_features(probe, gallery[:, :4])
    with pytest.raises(ValueError, match="metric"):
        iter_k_reciprocal_rerank_features(probe, gallery, metric="l1")
    with pytest.raises(ValueError, match="finite"):
        iter_k_reciprocal_rerank_features(np.full((2, 8), np.nan), gallery)
    with pytest.raises(ValueError, match="probe_probe"):
        iter_k_reciprocal_rerank(np.zeros((2, 3)), np.zeros((3, 3)), np.zeros((3, 3)))
