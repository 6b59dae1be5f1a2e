"""Adaptive re-ranking defaults: gallery statistics (against a literal transcription), rules, shells."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _support.store_files import old_layout, read_parts, write_sealed
from galleria import KReciprocalReranker
from galleria.rerank.adaptive import (
    PAPER_PARAMS,
    GalleryStatistics,
    default_rerank_params,
    gallery_statistics,
    params_from_statistics,
    store_statistics,
)
from galleria.rerank.registry import check_method_params, make_reranker
from galleria.retrieval import RetrievalConfig
from galleria.store import InMemoryImageEmbeddingStore


def literal_statistics(vectors: np.ndarray, space: str, rows: list[int], ks: list[int]) -> tuple[list, list]:
    """Slow transcription: sort every item's neighbours (self excluded, ties to the lower index)."""
    n = len(vectors)

    def nearness(a: int, b: int) -> float:
        if space == "l2":
            return -float(np.sum((vectors[a].astype(np.float64) - vectors[b]) ** 2))
        return float(np.dot(vectors[a].astype(np.float64), vectors[b]))

    def ranked(a: int) -> list[int]:
        others = [b for b in range(n) if b != a]
        return sorted(others, key=lambda b: (-nearness(a, b), b))

    lists = {a: ranked(a) for a in range(n)}
    shares, medians = [], []
    for k in ks:
        counts = [sum(1 for j in lists[i][:k] if i in lists[j][:k]) for i in rows]
        shares.append(sum(counts) / len(counts) / k)
        medians.append(float(np.median(counts)))
    return shares, medians


def hubbed(n: int, seed: int = 3) -> np.ndarray:
    """A gallery whose neighbourhoods are not reciprocal: items near the mean are everyone's neighbour."""
    rng = np.random.default_rng(seed)
    vectors = 1.0 + np.geomspace(0.05, 3.0, n)[:, None] * rng.normal(size=(n, 64))
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize("space", ["cosine", "ip", "l2"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_statistics_equal_the_literal_transcription(space: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 40))
    # few distinct integer values: exact ties between neighbours are common
    vectors = rng.integers(-2, 3, size=(n, 3)).astype(np.float32)
    vectors[rng.integers(0, n)] = vectors[0]  # a duplicate
    # (cosine: the store passes unit rows and nearness is their inner product; integer rows keep
    # the ties exact in float32)
    stats = gallery_statistics(vectors, space=space, sample=n // 2 + 1, seed=seed)
    chosen = np.sort(np.random.default_rng(seed).choice(n, size=n // 2 + 1, replace=False)).tolist()
    shares, medians = literal_statistics(vectors, space, chosen, list(stats.ks))
    assert stats.n_items == n and stats.n_sample == len(chosen)
    assert list(stats.ks) == [k for k in (5, 10, 20) if k <= n - 1]
    np.testing.assert_allclose(stats.share, shares, atol=1e-6)  # recorded to 6 decimals
    assert list(stats.median) == medians


def test_clustered_galleries_are_reciprocal_and_noise_is_not() -> None:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(30, 64))
    clustered = np.repeat(centres, 8, axis=0) + 0.05 * rng.normal(size=(240, 64))
    tight = gallery_statistics(clustered / np.linalg.norm(clustered, axis=1, keepdims=True))
    assert tight.at(10)[1] >= 7  # the 7 same-class images lie in each other's first 10: mutual
    assert tight.at(20)[1] >= 7
    loose = gallery_statistics(hubbed(240))
    assert loose.at(20)[0] < tight.at(20)[0] - 0.1 and loose.at(10)[1] < 7
    assert gallery_statistics(np.eye(2)).n_sample == 0  # too small to say anything


def test_statistics_check_their_input() -> None:
    with pytest.raises(ValueError, match="vectors"):
        gallery_statistics(np.array([[np.nan, 0.0]] * 4))
    with pytest.raises(ValueError, match="space"):
        gallery_statistics(np.eye(4), space="hamming")
    with pytest.raises(ValueError, match="sample"):
        gallery_statistics(np.eye(4), sample=0)
    with pytest.raises(ValueError, match="seed"):
        gallery_statistics(np.eye(4), seed=-1)


@pytest.mark.parametrize("share", [0.0, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0])
@pytest.mark.parametrize("median", [0.0, 1.0, 3.0, 7.0, 14.0, 20.0])
def test_rules_give_valid_bounded_parameters(share: float, median: float) -> None:
    stats = GalleryStatistics(
        1000, 200, (5, 10, 20), (share, share, share), (min(median, 5), median / 2, median)
    )
    params = params_from_statistics(stats)
    assert set(params) == set(PAPER_PARAMS)
    for method in ("k-reciprocal", "diffusion", "decoupled-diffusion", "gnn", "dba"):
        assert check_method_params(method, params[method]) == check_method_params(method, params[method])
        assert set(params[method]) == set(PAPER_PARAMS[method])
    kr = params["k-reciprocal"]
    assert 4 <= kr["k1"] <= 20 and 1 <= kr["k2"] <= min(6, kr["k1"]) and 0.3 <= kr["lambda_value"] <= 1.0
    flat = median < 2 or share < 0.25
    assert (kr["lambda_value"] == 1.0) == flat
    if not flat:  # less reciprocal neighbourhoods keep more of the original distance
        worse = params_from_statistics(
            GalleryStatistics(1000, 200, (5, 10, 20), (share - 0.1,) * 3, stats.median)
        )["k-reciprocal"]
        assert worse["lambda_value"] >= kr["lambda_value"]
    assert 1 <= params["aqe"]["expansion_neighbors"] <= 50


def test_record_round_trips_and_bad_records_are_refused() -> None:
    stats = gallery_statistics(np.eye(30) + 0.01)
    assert GalleryStatistics.from_record(json.loads(json.dumps(stats.record()))) == stats
    good = stats.record()
    bad_edits: list[tuple[str, Any]] = [
        ("version", 2),
        ("version", True),
        ("n_items", -1),
        ("n_items", 1.5),
        ("n_sample", 31),
        ("ks", [5, 5, 20]),
        ("ks", [5, 10, 40]),
        ("ks", list(range(1, 11))),
        ("share", [0.5, 1.5, 0.5]),
        ("share", [0.5, math.nan, 0.5]),
        ("share", [0.5, 0.5]),
        ("median", [0.0, 11.0, 1.0]),
        ("median", [False, 1.0, 1.0]),
    ]
    for key, value in bad_edits:
        with pytest.raises(ValueError, match="re-ranking statistics"):
            GalleryStatistics.from_record({**good, key: value})
    with pytest.raises(ValueError, match="exactly"):
        GalleryStatistics.from_record({**good, "extra": 1})
    with pytest.raises(ValueError, match="exactly"):
        GalleryStatistics.from_record([1])


def clustered_store(n_per: int = 6, classes: int = 12, seed: int = 0) -> InMemoryImageEmbeddingStore:
    rng = np.random.default_rng(seed)
    vectors = np.repeat(rng.normal(size=(classes, 16)), n_per, axis=0) + 0.3 * rng.normal(
        size=(classes * n_per, 16)
    )
    return InMemoryImageEmbeddingStore.from_embeddings([f"p{i}" for i in range(len(vectors))], vectors)


def test_reranker_without_arguments_reads_the_gallery() -> None:
    store = clustered_store()
    expected = default_rerank_params(store)
    assert expected == params_from_statistics(gallery_statistics(store.embeddings))["k-reciprocal"]
    reranker = KReciprocalReranker(store)
    assert (reranker.k1, reranker.k2, reranker.lambda_value) == (
        expected["k1"],
        expected["k2"],
        expected["lambda_value"],
    )
    candidates = store.retrieve_by_vector(store.embeddings[:5], k=30)
    explicit = KReciprocalReranker(store, **expected)
    assert reranker.rerank_batch(candidates, top_k=10) == explicit.rerank_batch(candidates, top_k=10)


def test_explicit_values_work_exactly_as_before() -> None:
    store = clustered_store()
    reranker = KReciprocalReranker(store, k1=20, k2=6, lambda_value=0.3)
    assert (reranker.k1, reranker.k2, reranker.lambda_value) == (20, 6, 0.3)
    partial = KReciprocalReranker(store, k1=9)  # the others take the paper's values
    assert (partial.k1, partial.k2, partial.lambda_value) == (9, 6, 0.3)
    assert default_rerank_params(store, preset="paper") == {"k1": 20, "k2": 6, "lambda_value": 0.3}
    with pytest.raises(ValueError, match="k2 must not exceed k1"):
        KReciprocalReranker(store, k1=3)


def test_a_flat_gallery_is_not_reordered() -> None:
    rng = np.random.default_rng(3)
    store = InMemoryImageEmbeddingStore.from_embeddings([f"n{i}" for i in range(300)], hubbed(300))
    stats = store_statistics(store)
    assert stats.at(20)[1] < 2 or stats.at(20)[0] < 0.25
    reranker = KReciprocalReranker(store)
    assert reranker.lambda_value == 1.0
    lists = store.retrieve_by_vector(rng.normal(size=(4, 64)), k=50)
    for plain, reranked in zip(lists, reranker.rerank_batch(lists, top_k=50), strict=True):
        assert [c.path for c in reranked] == [c.path for c in plain]


@pytest.mark.parametrize("method", ["k-reciprocal", "diffusion", "decoupled-diffusion", "gnn"])
def test_a_flat_gallery_keeps_the_plain_order_with_every_method(method: str) -> None:
    rng = np.random.default_rng(4)
    store = InMemoryImageEmbeddingStore.from_embeddings([f"n{i}" for i in range(300)], hubbed(300))
    params = default_rerank_params(store, method)
    reranker = make_reranker(method, store, **params)
    lists = store.retrieve_by_vector(rng.normal(size=(6, 64)), k=60)
    for plain, reranked in zip(lists, reranker.rerank_batch(lists, top_k=60), strict=True):
        assert [c.path for c in reranked] == [c.path for c in plain]


def test_dba_off_is_the_plain_order_without_near_copies() -> None:
    """Below a majority of mutual neighbours DBA's weights are cos ** 1000: nothing moves."""
    rng = np.random.default_rng(5)
    vectors = 1.0 + np.geomspace(0.3, 3.0, 300)[:, None] * rng.normal(size=(300, 64))  # hubs, cos < 0.96
    store = InMemoryImageEmbeddingStore.from_embeddings([f"r{i}" for i in range(300)], vectors)
    stats = store_statistics(store)
    assert stats.at(20)[0] < 0.5
    params = default_rerank_params(store, "dba")
    assert params["alpha"] == 1000.0 and params["neighbors"] == params["aqe_neighbors"] == 1
    reranker = make_reranker("dba", store, **params)
    queries = rng.normal(size=(8, 64))
    plain = store.retrieve_by_vector(queries, k=40)
    lists = reranker.store.retrieve_by_vector(queries, k=40)
    assert [[c.path for c in x] for x in lists] == [[c.path for c in x] for x in plain]
    reranked = reranker.rerank_batch(lists, top_k=40)
    assert [x[0].path for x in reranked] == [x[0].path for x in plain]  # αQE of one match keeps it


def _stats(share: float, median: float) -> GalleryStatistics:
    return GalleryStatistics(1000, 200, (5, 10, 20), (share,) * 3, (min(median, 5), median / 2, median))


@pytest.mark.parametrize("share", [0.0, 0.2, 0.3, 0.45, 0.5, 0.6, 0.8, 1.0])
@pytest.mark.parametrize("median", [0.0, 1.0, 3.0, 7.0, 14.0, 20.0])
def test_every_rule_keeps_the_first_result_or_falls_back(share: float, median: float) -> None:
    """The properties the rules promise, on every statistics grid point (pure function)."""
    params = params_from_statistics(_stats(share, median))
    flat = median < 2 or share < 0.25
    majority = not flat and share >= 0.5
    # _stats gives one share at every k: never more reciprocal at 20 than at 5, so never trusted
    trusted = False
    for method in ("diffusion", "decoupled-diffusion"):
        assert params[method]["query_k"] == 1  # the best match alone represents the query
        assert params[method]["alpha"] == (0.9 if trusted else 0.0)  # α = 0: the original order
        assert 10 <= params[method]["k"] <= 30
    assert (params["ecn"]["lambda_value"] == 1.0) == (not trusted)  # ECN leans on the best match too
    # αQE: two matches at α 3 where the first ones are trusted, else one that weighs cos ** 1000
    assert params["aqe"] == (
        {"expansion_alpha": 3.0, "expansion_neighbors": 2}
        if trusted
        else {"expansion_alpha": 1000.0, "expansion_neighbors": 1}
    )
    # k-reciprocal's λ keeps at least 0.55 of the original distance (1: the original order)
    lam = params["k-reciprocal"]["lambda_value"]
    assert lam == 1.0 if flat else 0.55 <= lam <= 0.9
    gnn, dba = params["gnn"], params["dba"]
    assert gnn["lambda_value"] == (1.0 if flat else lam if majority else 0.9)
    augments = majority and trusted
    assert (dba["alpha"] == 10.0) == augments and (dba["alpha"] == 1000.0) == (not augments)
    if not augments:
        assert dba["neighbors"] == dba["aqe_neighbors"] == 1 and dba["aqe_alpha"] == 1000.0
    assert dba["aqe_neighbors"] <= 2  # as αQE: the first match cannot be overtaken
    rising = GalleryStatistics(1000, 200, (5, 10, 20), (share, share + 0.01, share + 0.02), (3, 6, median))
    trusted_rising = not flat and share >= 0.5
    assert (params_from_statistics(rising)["aqe"]["expansion_neighbors"] == 2) == trusted_rising
    assert (params_from_statistics(rising)["diffusion"]["alpha"] == 0.9) == trusted_rising
    more = params_from_statistics(_stats(share, min(20.0, median + 4)))
    assert more["diffusion"]["k"] >= params["diffusion"]["k"]  # larger classes, larger graphs
    # a flat share below 0.66: nothing past the first neighbour is averaged in (k2 = 2, DBA one neighbour)
    if share < 0.66:
        assert params["k-reciprocal"]["k2"] == min(2, params["k-reciprocal"]["k1"]) and gnn["k2"] == 2
        assert dba["neighbors"] == 1


@pytest.mark.parametrize("share", [0.3, 0.45, 0.5, 0.6, 0.65, 0.66, 0.8])
@pytest.mark.parametrize("rise", [0.0, 0.03, 0.06, 0.09, 0.12, 0.2])
@pytest.mark.parametrize("median", [2.0, 7.0, 15.0, 20.0])
def test_neighbours_past_the_first_are_averaged_only_where_the_share_rises(
    share: float, rise: float, median: float
) -> None:
    """k-reciprocal's k2, the GNN's k2 and DBA's neighbours reach past the first neighbour only where the
    mutual share grows by EXPAND_RISE from the first five to the first 20 or is at least EXPAND_SHARE
    (property of the pure rule)."""
    from galleria.statistics import EXPAND_RISE, EXPAND_SHARE, read_statistics

    stats = GalleryStatistics(1000, 200, (5, 10, 20), (share - rise, share - rise / 2, share), (3, 6, median))
    reading = read_statistics(stats)
    params = params_from_statistics(stats)
    kr, gnn, dba = params["k-reciprocal"], params["gnn"], params["dba"]
    spreads = not reading.flat and (rise >= EXPAND_RISE - 1e-9 or share >= EXPAND_SHARE)
    assert reading.spreads == spreads
    if not spreads:
        assert kr["k2"] == min(2, kr["k1"]) and gnn["k2"] == 2 and dba["neighbors"] == 1
    else:  # as before: as far as the reliable part of the neighbourhood reaches
        assert kr["k2"] == min(kr["k1"], max(2, min(6, round(reading.reach))))
        if reading.majority:
            assert gnn["k2"] == min(gnn["k1"], max(1, min(7, round(reading.reach))))
    if dba["alpha"] == 10.0:  # DBA augments: its expansion is αQE's own rule (two matches at α 3)
        assert (
            (dba["aqe_neighbors"], dba["aqe_alpha"])
            == (2, 3.0)
            == (
                params["aqe"]["expansion_neighbors"],
                params["aqe"]["expansion_alpha"],
            )
        )


def test_glyph_like_statistics_average_one_neighbour_and_digit_like_ones_more() -> None:
    """The corpus cases behind EXPAND_RISE and EXPAND_SHARE: a flat share of 0.6 (glyphs, Lite0 stamps), a
    rising one (digits) and a flat share of 0.75 (digits cut to 20 a class; playing cards)."""
    flat = params_from_statistics(GalleryStatistics(1800, 200, (5, 10, 20), (0.607, 0.61, 0.627), (3, 6, 13)))
    rising = params_from_statistics(
        GalleryStatistics(400, 200, (5, 10, 20), (0.578, 0.629, 0.709), (3, 6, 15))
    )
    high = params_from_statistics(GalleryStatistics(930, 200, (5, 10, 20), (0.722, 0.739, 0.74), (4, 8, 16)))
    assert flat["k-reciprocal"] == {"k1": 20, "k2": 2, "lambda_value": 0.57}
    assert rising["k-reciprocal"] == {"k1": 20, "k2": 5, "lambda_value": 0.55}
    assert high["k-reciprocal"] == {"k1": 20, "k2": 6, "lambda_value": 0.55}
    assert flat["gnn"]["k2"] == 2 and rising["gnn"]["k2"] == 5 and high["gnn"]["k2"] == 6
    assert flat["dba"]["neighbors"] == 1 and rising["dba"]["neighbors"] == 4


def test_an_unbuilt_store_is_read_on_first_use(tmp_path: Path) -> None:
    from _support.store_support import make_images, pixel_embedder

    paths = make_images(tmp_path, 12)
    store = InMemoryImageEmbeddingStore(paths, pixel_embedder(), num_workers=1)
    reranker = KReciprocalReranker(store)
    assert "adaptive" in repr(reranker)
    with pytest.raises(RuntimeError, match="not built"):
        _ = reranker.k1
    store.build_store(progress=False)
    assert store._rerank_statistics is not None  # recorded at build time
    candidates = store.retrieve_top_k_similar(paths[0], k=8)[0]
    assert len(reranker.rerank(candidates, top_k=3)) == 3
    assert reranker.k1 == default_rerank_params(store)["k1"]


@pytest.mark.parametrize("layout", ["slot", "old"], ids=["slot", "old-layout"])
def test_statistics_are_recorded_in_the_store_file_and_checked(tmp_path: Path, layout: str) -> None:
    from _support.store_support import make_images, pixel_embedder

    paths = make_images(tmp_path / "images", 12)
    store = InMemoryImageEmbeddingStore(paths, pixel_embedder(), num_workers=1)
    store.build_store(progress=False)
    recorded = store._rerank_statistics
    target = tmp_path / "s.safetensors"
    store.save_to_disk(target)
    header, tensors = read_parts(target)
    assert "rerank_statistics" not in header  # kept in the extension slot
    if layout == "old":  # a file written before the slot: the record at the top of the header
        header, tensors = old_layout(header, tensors)
        target = write_sealed(tmp_path / "old-layout.safetensors", header, tensors)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(target)
    assert loaded._rerank_statistics == recorded
    assert default_rerank_params(loaded) == default_rerank_params(store)

    holder = header if layout == "old" else header["extensions"]
    label = "rerank_statistics" if layout == "old" else "extensions.rerank_statistics"
    for bad, message in (
        ({**holder["rerank_statistics"], "n_items": 11, "n_sample": 11}, "describes 11 items"),
        ({**holder["rerank_statistics"], "share": [2.0, 0.0]}, "is invalid"),
        ("many", "is invalid"),
    ):
        edited = json.loads(json.dumps(header))
        (edited if layout == "old" else edited["extensions"])["rerank_statistics"] = bad
        bad_file = write_sealed(tmp_path / "bad.safetensors", edited, tensors)
        with pytest.raises(ValueError, match=f"header key '{label}' {message}"):
            InMemoryImageEmbeddingStore.load_from_disk(bad_file)
    del holder["rerank_statistics"]
    if header.get("extensions") == {}:
        del header["extensions"]
    old_file = write_sealed(tmp_path / "without.safetensors", header, tensors)
    old = InMemoryImageEmbeddingStore.load_from_disk(old_file)  # a file without the record still loads
    assert old._rerank_statistics is None
    assert default_rerank_params(old) == default_rerank_params(store)  # computed on first use


def test_a_changed_gallery_drops_its_statistics(tmp_path: Path) -> None:
    from _support.store_support import make_images, pixel_embedder

    paths = make_images(tmp_path, 14)
    store = InMemoryImageEmbeddingStore(paths[:12], pixel_embedder(), num_workers=1)
    store.build_store(progress=False)
    store.add_images(paths[12:])
    assert store._rerank_statistics is None
    assert store_statistics(store).n_items == 14
    store.remove_images(paths[:1])
    assert store._rerank_statistics is None


def test_default_params_check_their_arguments() -> None:
    store = clustered_store()
    with pytest.raises(ValueError, match="method"):
        default_rerank_params(store, "bm25")
    with pytest.raises(ValueError, match="preset"):
        default_rerank_params(store, preset="fast")
    for method in PAPER_PARAMS:
        assert default_rerank_params(store, method, "paper") == PAPER_PARAMS[method]


def test_retrieval_config_resolves_adaptive_settings() -> None:
    store = clustered_store()
    config = RetrievalConfig("r", rerank=True, rerank_preset="adaptive")
    resolved = config.resolve(store)
    assert resolved.reranker_params() == default_rerank_params(store)
    assert resolved.rerank_preset == "paper" and "adaptive" in config.title
    gnn = RetrievalConfig("g", rerank=True, rerank_method="gnn", rerank_preset="adaptive").resolve(store)
    assert gnn.reranker_params() == default_rerank_params(store, "gnn")
    # the default preset is the adaptive one (galleria 0.2.0); the paper's values by name
    assert RetrievalConfig("d", rerank=True).resolve(store).reranker_params() == default_rerank_params(store)
    paper = RetrievalConfig("p", rerank=True, rerank_preset="paper")
    assert paper.resolve(store).reranker_params() == PAPER_PARAMS["k-reciprocal"]
    with pytest.raises(ValueError, match="rerank_preset"):
        RetrievalConfig("x", rerank=True, rerank_preset="fast")
