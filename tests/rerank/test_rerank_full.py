"""Batched pools, full probe×gallery re-ranking (both modes) and the features entry point."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import galleria.rerank._full_blocks as blocks
from _support.rerank_oracle import oracle_rerank
from galleria.distances import normalize_rows, pairwise_distances
from galleria.rerank import (
    k_reciprocal_rerank,
    k_reciprocal_rerank_features,
    rerank_pool,
    rerank_pools,
)


def dense_reference(
    pg: np.ndarray, pp: np.ndarray, gg: np.ndarray, k1: int, k2: int, lambda_value: float
) -> np.ndarray:
    """A literal dense transcription of the 7-step reference algorithm of docs/reranking.md."""
    probes = pg.shape[0]
    # 1. stack and square (float32)
    dist = np.square(np.block([[pp, pg], [pg.T, gg]]).astype(np.float32))
    size = dist.shape[0]
    # 2. divide each column by its maximum, then transpose
    dist = np.transpose(dist / np.max(dist, axis=0))
    # 3. ranking lists (stable)
    ranking = np.argsort(dist, axis=1, kind="stable")
    # 4. k-reciprocal sets, expansion, weights
    features = np.zeros((size, size), dtype=np.float64)
    half = int(np.around(k1 / 2))
    for i in range(size):
        forward = ranking[i, : k1 + 1]
        backward = ranking[forward, : k1 + 1]
        reciprocal = forward[np.where(backward == i)[0]]
        expansion = list(reciprocal)
        for candidate in reciprocal:
            candidate_forward = ranking[candidate, : half + 1]
            candidate_backward = ranking[candidate_forward, : half + 1]
            candidate_reciprocal = candidate_forward[np.where(candidate_backward == candidate)[0]]
            if len(np.intersect1d(candidate_reciprocal, reciprocal)) > 2 / 3 * len(candidate_reciprocal):
                expansion.extend(candidate_reciprocal)
        expansion_index = np.unique(np.asarray(expansion, dtype=np.int64))
        weight = np.exp(-dist[i, expansion_index])
        features[i, expansion_index] = weight / np.sum(weight)
    # 5. local query expansion
    if k2 != 1:
        features = np.stack([np.mean(features[ranking[i, :k2]], axis=0) for i in range(size)])
    # 6. Jaccard of every probe against every member
    jaccard = np.zeros((probes, size))
    for p in range(probes):
        low = np.minimum(features[p], features).sum(axis=1)
        jaccard[p] = 1 - low / (2 - low)
    # 7. final distance, probe rows and gallery columns
    final = (1 - lambda_value) * jaccard + lambda_value * dist[:probes]
    return final[:, probes:]


@st.composite
def sets(draw: st.DrawFn, ties: bool = True) -> tuple[np.ndarray, int, int, int, float]:
    """A full distance matrix of P probes then G gallery items, plus P, k1, k2, λ."""
    size = draw(st.integers(2, 28))
    probes = draw(st.integers(1, size - 1))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if ties and draw(st.booleans()):
        points = rng.integers(-2, 3, size=(size, 2)).astype(np.float64)
    else:
        points = rng.normal(size=(size, 3))
    matrix = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(axis=2))
    k1 = draw(st.integers(1, 30))
    k2 = draw(st.integers(1, k1))
    lambda_value = draw(st.sampled_from([0.0, 0.3, 1.0]))
    return matrix, probes, k1, k2, lambda_value


def split(matrix: np.ndarray, probes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return matrix[:probes, probes:], matrix[:probes, :probes], matrix[probes:, probes:]


# ---------------------------------------------------------------------------- batched = single


@settings(max_examples=60)
@given(
    st.lists(st.integers(2, 40), min_size=1, max_size=6),
    st.integers(1, 25),
    st.integers(1, 25),
    st.integers(0, 2**32 - 1),
)
def test_batched_equals_single(sizes: list[int], k1: int, k2_raw: int, seed: int) -> None:
    k2 = min(k1, k2_raw)
    rng = np.random.default_rng(seed)
    matrices = []
    for size in sizes:
        points = rng.integers(0, 4, size=(size, 2)).astype(np.float64)
        matrices.append(pairwise_distances(points, points, "l2").astype(np.float64))
    batched = rerank_pools(matrices, k1=k1, k2=k2, lambda_value=0.3)
    for matrix, result in zip(matrices, batched, strict=True):
        np.testing.assert_array_equal(result, rerank_pool(matrix, k1=k1, k2=k2))


def test_batched_accepts_one_array_and_keeps_input_untouched() -> None:
    rng = np.random.default_rng(3)
    points = rng.normal(size=(4, 12, 5))
    stack = np.stack([pairwise_distances(p, p, "l2") for p in points]).astype(np.float64)
    before = stack.copy()
    results = rerank_pools(stack, k1=5, k2=2)
    np.testing.assert_array_equal(stack, before)
    for matrix, result in zip(stack, results, strict=True):
        np.testing.assert_array_equal(result, rerank_pool(matrix, k1=5, k2=2))


# ---------------------------------------------------------------------------- full "paper" mode


@settings(max_examples=60)
@given(sets())
def test_paper_single_probe_equals_pool(case: tuple[np.ndarray, int, int, int, float]) -> None:
    matrix, _, k1, k2, lambda_value = case
    result = k_reciprocal_rerank(*split(matrix, 1), k1=k1, k2=k2, lambda_value=lambda_value)
    expected = rerank_pool(matrix, k1=k1, k2=k2, lambda_value=lambda_value)
    assert result.shape == (1, matrix.shape[0] - 1)
    assert result.dtype == np.float32
    np.testing.assert_allclose(result[0], expected, rtol=0, atol=1e-6)


@settings(max_examples=60)
@given(sets())
def test_paper_several_probes_match_oracle(case: tuple[np.ndarray, int, int, int, float]) -> None:
    matrix, probes, k1, k2, lambda_value = case
    result = k_reciprocal_rerank(*split(matrix, probes), k1=k1, k2=k2, lambda_value=lambda_value)
    expected = oracle_rerank(matrix, k1=k1, k2=k2, lambda_value=lambda_value, probes=probes)
    np.testing.assert_allclose(result, expected, rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------- "reference" mode


@settings(max_examples=60)
@given(sets(ties=False))
def test_reference_matches_dense_transcription(case: tuple[np.ndarray, int, int, int, float]) -> None:
    matrix, probes, k1, k2, lambda_value = case
    pg, pp, gg = split(matrix, probes)
    result = k_reciprocal_rerank(pg, pp, gg, k1=k1, k2=k2, lambda_value=lambda_value, mode="reference")
    expected = dense_reference(pg, pp, gg, k1, k2, lambda_value)
    np.testing.assert_allclose(result, expected, rtol=0, atol=1e-5)


def test_reference_reads_columns_of_asymmetric_inputs() -> None:
    rng = np.random.default_rng(11)
    pp, pg, gg = rng.random((4, 4)) + 0.1, rng.random((4, 20)) + 0.1, rng.random((20, 20)) + 0.1
    np.fill_diagonal(pp, 0.0)
    np.fill_diagonal(gg, 0.0)
    result = k_reciprocal_rerank(pg, pp, gg, k1=6, k2=3, lambda_value=0.3, mode="reference")
    np.testing.assert_allclose(result, dense_reference(pg, pp, gg, 6, 3, 0.3), rtol=0, atol=1e-5)


def test_modes_differ_and_paper_is_default() -> None:
    rng = np.random.default_rng(12)
    points = rng.normal(size=(40, 4))
    matrix = np.sqrt(pairwise_distances(points, points, "l2"))
    parts = split(matrix.astype(np.float64), 5)
    paper = k_reciprocal_rerank(*parts, k1=8, k2=3)
    np.testing.assert_array_equal(paper, k_reciprocal_rerank(*parts, k1=8, k2=3, mode="paper"))
    assert not np.allclose(paper, k_reciprocal_rerank(*parts, k1=8, k2=3, mode="reference"))


# ---------------------------------------------------------------------------- blocks and chunks


@pytest.mark.parametrize("mode", ["paper", "reference"])
def test_small_blocks_give_the_same_result(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(13)
    points = rng.normal(size=(60, 4))
    matrix = np.sqrt(pairwise_distances(points, points, "l2")).astype(np.float64)
    parts = split(matrix, 7)
    whole = k_reciprocal_rerank(*parts, k1=9, k2=4, mode=mode)
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 100)
    monkeypatch.setattr(blocks, "TRIPLES", 40)
    np.testing.assert_array_equal(k_reciprocal_rerank(*parts, k1=9, k2=4, mode=mode), whole)


def test_long_rows_use_the_sampled_neighbour_search() -> None:
    rng = np.random.default_rng(14)
    points = rng.integers(0, 6, size=(1400, 2)).astype(np.float64)  # long rows with many ties
    matrix = pairwise_distances(points, points, "l2").astype(np.float64)
    result = k_reciprocal_rerank(*split(matrix, 1), k1=10, k2=3)
    np.testing.assert_allclose(result[0], rerank_pool(matrix, k1=10, k2=3), rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------- features entry point


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("mode", ["paper", "reference"])
def test_features_equal_distances(metric: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(15)
    probe = rng.normal(size=(6, 8)).astype(np.float32)
    gallery = rng.normal(size=(50, 8)).astype(np.float32)
    stacked = np.concatenate([probe, gallery])
    if metric == "cosine":
        unit = normalize_rows(stacked)
        matrix = pairwise_distances(unit, unit, "cosine")
    elif mode == "paper":  # the paper's original distance: the squared Euclidean one
        matrix = np.array(
            [
                [sum((float(a) - float(b)) ** 2 for a, b in zip(x, y, strict=True)) for y in stacked]
                for x in stacked
            ]
        )
    else:  # the authors' code squares the Euclidean distance it is given
        matrix = np.sqrt(pairwise_distances(stacked, stacked, "l2"))
    expected = k_reciprocal_rerank(*split(matrix, 6), k1=7, k2=3, mode=mode)
    result = k_reciprocal_rerank_features(probe, gallery, metric=metric, k1=7, k2=3, mode=mode)
    np.testing.assert_allclose(result, expected, rtol=0, atol=1e-5)
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 120)
    blocked = k_reciprocal_rerank_features(probe, gallery, metric=metric, k1=7, k2=3, mode=mode)
    np.testing.assert_allclose(blocked, expected, rtol=0, atol=1e-5)


def test_reranking_helps_on_clustered_features() -> None:
    rng = np.random.default_rng(16)
    centres = rng.normal(size=(8, 16))
    labels = np.repeat(np.arange(8), 12)
    gallery = centres[labels] + 0.9 * rng.normal(size=(96, 16))
    probe_labels = np.arange(8).repeat(2)
    probe = centres[probe_labels] + 0.9 * rng.normal(size=(16, 16))
    plain = pairwise_distances(normalize_rows(probe), normalize_rows(gallery), "cosine")
    reranked = k_reciprocal_rerank_features(probe, gallery, k1=12, k2=4, lambda_value=0.3)

    def mean_ap(distances: np.ndarray) -> float:
        scores = []
        for row, label in zip(distances, probe_labels, strict=True):
            hits = labels[np.argsort(row, kind="stable")] == label
            precision = np.cumsum(hits) / np.arange(1, hits.size + 1)
            scores.append(float((precision * hits).sum() / hits.sum()))
        return float(np.mean(scores))

    assert mean_ap(reranked) > mean_ap(plain)


# ---------------------------------------------------------------------------- validation


def test_full_validation() -> None:
    pg, pp, gg = np.zeros((2, 3)), np.zeros((2, 2)), np.zeros((3, 3))
    with pytest.raises(ValueError, match="probe_probe"):
        k_reciprocal_rerank(pg, np.zeros((3, 3)), gg)
    with pytest.raises(ValueError, match="gallery_gallery"):
        k_reciprocal_rerank(pg, pp, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="probe_probe"):
        k_reciprocal_rerank(pg, np.zeros((2, 3)), gg)
    with pytest.raises(ValueError, match="probe_gallery"):
        k_reciprocal_rerank(np.zeros((0, 3)), pp, gg)
    with pytest.raises(ValueError, match="gallery_gallery"):
        k_reciprocal_rerank(pg, pp, np.full((3, 3), np.inf))
    with pytest.raises(TypeError, match="probe_gallery"):
        k_reciprocal_rerank([["x"]], pp, gg)
    with pytest.raises(ValueError, match="mode"):
        k_reciprocal_rerank(pg, pp, gg, mode="authors")
    with pytest.raises(TypeError, match="mode"):
        k_reciprocal_rerank(pg, pp, gg, mode=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k2"):
        k_reciprocal_rerank(pg, pp, gg, k1=2, k2=3)
    with pytest.raises(ValueError, match="lambda_value"):
        k_reciprocal_rerank(pg, pp, gg, lambda_value=-0.1)
    with pytest.raises(ValueError, match="dimension"):
        k_reciprocal_rerank_features(np.zeros((2, 3)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="metric"):
        k_reciprocal_rerank_features(np.zeros((2, 3)), np.zeros((4, 3)), metric="ip")
    with pytest.raises(ValueError, match="probe"):
        k_reciprocal_rerank_features(np.zeros(3), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="gallery"):
        k_reciprocal_rerank_features(np.zeros((2, 3)), np.full((4, 3), np.nan))
    with pytest.raises(TypeError, match="k1"):
        k_reciprocal_rerank_features(np.zeros((2, 3)), np.zeros((4, 3)), k1=1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["paper", "reference"])
def test_float32_and_float64_inputs_agree(mode: str) -> None:
    rng = np.random.default_rng(17)
    points = rng.integers(0, 5, size=(70, 2)).astype(np.float32)  # many exact ties
    matrix = np.sqrt(pairwise_distances(points, points, "l2"))
    single = k_reciprocal_rerank(*split(matrix, 9), k1=8, k2=3, mode=mode)
    double = k_reciprocal_rerank(*split(matrix.astype(np.float64), 9), k1=8, k2=3, mode=mode)
    np.testing.assert_array_equal(single, double)


@pytest.mark.parametrize("source", ["features", "matrices"])
def test_no_dense_square_matrix_is_held(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Peak numpy allocation stays well under one dense (P+G)² float32 matrix (inputs excluded)."""
    import tracemalloc

    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 1 << 16)
    monkeypatch.setattr(blocks, "TRIPLES", 1 << 16)
    rng = np.random.default_rng(18)
    probe = rng.normal(size=(100, 16)).astype(np.float32)
    gallery = rng.normal(size=(2900, 16)).astype(np.float32)
    dense = (100 + 2900) ** 2 * 4
    if source == "matrices":
        parts = (
            pairwise_distances(probe, gallery, "l2"),
            pairwise_distances(probe, probe, "l2"),
            pairwise_distances(gallery, gallery, "l2"),
        )
    tracemalloc.start()
    try:
        if source == "features":
            out = k_reciprocal_rerank_features(probe, gallery, k1=20, k2=6)
        else:
            out = k_reciprocal_rerank(*parts, k1=20, k2=6, mode="reference")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.shape == (100, 2900)
    assert peak < dense / 2, f"peak {peak / 2**20:.1f} MiB vs dense {dense / 2**20:.1f} MiB"


# ---------------------------------------------------------------------------- pool "reference" mode


@settings(max_examples=60)
@given(sets(ties=False))
def test_pool_reference_matches_the_dense_transcription(
    case: tuple[np.ndarray, int, int, int, float],
) -> None:
    matrix, _, k1, k2, lambda_value = case
    result = rerank_pool(matrix, k1=k1, k2=k2, lambda_value=lambda_value, mode="reference")
    expected = dense_reference(*split(matrix, 1), k1, k2, lambda_value)[0]
    assert result.shape == (matrix.shape[0] - 1,) and result.dtype == np.float64
    np.testing.assert_allclose(result, expected, rtol=0, atol=1e-5)


def test_pool_reranker_reference_on_the_whole_gallery_equals_the_full_reference() -> None:
    from galleria.rerank import KReciprocalReranker
    from galleria.store import InMemoryImageEmbeddingStore

    rng = np.random.default_rng(21)
    centres = rng.normal(size=(6, 16))
    gallery = (centres[rng.integers(0, 6, 90)] + 0.8 * rng.normal(size=(90, 16))).astype(np.float32)
    probe = (centres[:1] + 0.8 * rng.normal(size=(1, 16))).astype(np.float32)
    store = InMemoryImageEmbeddingStore.from_embeddings([f"g{i}" for i in range(90)], gallery)
    candidates = store.retrieve_by_vector(probe, k=90)[0]
    expected = k_reciprocal_rerank_features(probe, gallery, k1=12, k2=4, mode="reference")[0]
    reranker = KReciprocalReranker(store, k1=12, k2=4, mode="reference")
    assert reranker.mode == "reference" and "mode='reference'" in repr(reranker)
    got = {c.path: c.score for c in reranker.rerank(candidates, top_k=90)}
    np.testing.assert_allclose([got[f"g{i}"] for i in range(90)], expected, rtol=0, atol=1e-5)
    batch = reranker.rerank_batch([candidates, candidates[:40]], top_k=90)
    assert [c.path for c in batch[0]] == [c.path for c in reranker.rerank(candidates, top_k=90)]
    assert [c.path for c in batch[1]] == [c.path for c in reranker.rerank(candidates[:40], top_k=90)]
    # The paper rules give other values (≥ 2/3, row scaling): the two modes are not the same thing.
    paper = {c.path: c.score for c in KReciprocalReranker(store, k1=12, k2=4).rerank(candidates, top_k=90)}
    assert max(abs(paper[p] - got[p]) for p in got) > 1e-3
    with pytest.raises(ValueError, match="mode"):
        KReciprocalReranker(store, mode="authors")
    with pytest.raises(ValueError, match="mode"):
        rerank_pool(np.eye(3), mode="authors")
