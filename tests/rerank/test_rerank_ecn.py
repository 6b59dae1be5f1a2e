"""Tests of ECN re-ranking (galleria.rerank.ecn) against a literal, slow transcription of its definition.

The oracle is written loop by loop from the module docstring: each item's ranking list (the item
itself left out, ties to the lower position), its expanded neighbourhood (t first neighbours, then
q neighbours of each, repeats kept), and the average of the cross distances. Hypothesis draws points
on a coarse grid so that ties are frequent.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _support.extras import need
from galleria.rerank.adaptive import GalleryStatistics, store_statistics
from galleria.rerank.base import Reranker
from galleria.rerank.ecn import (
    PAPER_PARAMS,
    ECNReranker,
    check_ecn_params,
    ecn_matrix,
    ecn_params_from_statistics,
    ecn_pools,
    ecn_rerank_features,
)
from galleria.store import Candidate, InMemoryImageEmbeddingStore

# --------------------------------------------------------------------------------------------- oracle


def oracle_ranking(d: list[list[float]], x: int) -> list[int]:
    """Every other item by ascending distance from ``x``, ties to the lower position."""
    return sorted((j for j in range(len(d)) if j != x), key=lambda j: (d[x][j], j))


def oracle_expanded(d: list[list[float]], x: int, t: int, q: int) -> list[int]:
    n = len(d)
    t, q = min(t, n - 1), min(q, n - 1)
    first = oracle_ranking(d, x)[:t]
    members = list(first)
    for neighbour in first:
        members.extend(oracle_ranking(d, neighbour)[:q])
    return members


def oracle_ecn(d: list[list[float]], a: int, b: int, t: int, q: int) -> float:
    left = oracle_expanded(d, a, t, q)
    right = oracle_expanded(d, b, t, q)
    assert len(left) == len(right)
    total = 0.0
    for e in left:
        total += d[e][b]
    for e in right:
        total += d[e][a]
    return total / (2 * len(left))


def grid_distances(points: np.ndarray) -> np.ndarray:
    return np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(axis=2))


points_on_a_grid = st.integers(2, 9).flatmap(
    lambda n: st.lists(st.lists(st.integers(0, 3), min_size=2, max_size=2), min_size=n, max_size=n)
)

# --------------------------------------------------------------------------------------------- cores


@given(points_on_a_grid, st.integers(1, 9), st.integers(0, 9))
def test_pool_core_equals_the_transcription_with_ties(points: list[list[int]], t: int, q: int) -> None:
    d = grid_distances(np.array(points, dtype=np.float64))
    expected = [oracle_ecn(d.tolist(), 0, j, t, q) for j in range(1, len(d))]
    np.testing.assert_allclose(ecn_pools(d[None], t=t, q=q)[0], expected, rtol=0, atol=1e-12)
    matrix = ecn_matrix(d, t=t, q=q)
    for a in range(len(d)):
        for b in range(len(d)):
            assert matrix[a, b] == pytest.approx(oracle_ecn(d.tolist(), a, b, t, q), abs=1e-12)


def test_pools_of_a_batch_are_independent() -> None:
    rng = np.random.default_rng(0)
    sets = np.stack([grid_distances(rng.normal(size=(7, 3))) for _ in range(4)])
    batch = ecn_pools(sets, t=3, q=2)
    for i in range(4):
        np.testing.assert_array_equal(batch[i], ecn_pools(sets[i : i + 1], t=3, q=2)[0])


def test_the_item_itself_is_never_its_own_neighbour_but_its_neighbours_may_name_it() -> None:
    # Two tight pairs far apart: 0's first neighbour is 1, whose first neighbour is 0 again.
    d = grid_distances(np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]]))
    assert oracle_expanded(d.tolist(), 0, 1, 1) == [1, 0]
    np.testing.assert_allclose(ecn_pools(d[None], t=1, q=1)[0][0], (1.0 + 0.0 + 0.0 + 1.0) / 4)


@pytest.mark.parametrize("lam", [0.0, 0.4, 1.0])
def test_full_form_equals_the_transcription_over_probes_then_gallery(lam: float) -> None:
    rng = np.random.default_rng(5)
    probes, gallery = rng.normal(size=(3, 6)), rng.normal(size=(30, 6))
    unit = np.concatenate([probes, gallery])
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    d = (1.0 - unit @ unit.T).tolist()
    expected = [
        [lam * d[p][3 + g] + (1 - lam) * oracle_ecn(d, p, 3 + g, 3, 8) for g in range(30)] for p in range(3)
    ]
    got = ecn_rerank_features(probes, gallery, t=3, q=8, lambda_value=lam)
    np.testing.assert_allclose(got, expected, atol=1e-5)


# --------------------------------------------------------------------------------------------- re-ranker


def _store(n: int = 30, d: int = 6, seed: int = 0, space: str = "cosine") -> InMemoryImageEmbeddingStore:
    vectors = np.random.default_rng(seed).normal(size=(n, d))
    return InMemoryImageEmbeddingStore.from_embeddings([f"p{i}" for i in range(n)], vectors, space=space)


def _oracle_pool_scores(
    store: InMemoryImageEmbeddingStore, candidates: list[Candidate], t: int, q: int, lam: float
) -> list[float]:
    """λ·d + (1 − λ)·ECN on the set probe + candidates, distances in float64 from the store's vectors."""
    vectors = store.embeddings_of([c.path for c in candidates]).astype(np.float64)
    n = len(candidates) + 1
    d = [[0.0] * n for _ in range(n)]
    for i, c in enumerate(candidates, start=1):
        d[0][i] = d[i][0] = float(c.score)
        for j in range(1, n):
            diff = vectors[i - 1] - vectors[j - 1]
            dot = float(vectors[i - 1] @ vectors[j - 1])
            d[i][j] = float(diff @ diff) if store.space == "l2" else max(0.0, 1.0 - dot)
        d[i][i] = 0.0
    return [lam * d[0][j] + (1 - lam) * oracle_ecn(d, 0, j, t, q) for j in range(1, n)]


def _assert_same_ranking(got: list[Candidate], candidates: list[Candidate], expected: list[float]) -> None:
    """Equal up to near-ties: the scores agree, and the order is sorted by the oracle's scores."""
    oracle = {c.path: s for c, s in zip(candidates, expected, strict=True)}
    np.testing.assert_allclose([c.score for c in got], [oracle[c.path] for c in got], atol=1e-5)
    ordered = [oracle[c.path] for c in got]
    assert all(b >= a - 1e-5 for a, b in itertools.pairwise(ordered))
    assert sorted(oracle.values())[: len(got)] == pytest.approx(ordered, abs=1e-5)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 10_000),
    st.integers(2, 25),
    st.integers(1, 6),
    st.integers(0, 9),
    st.sampled_from([0.0, 0.3, 1.0]),
    st.sampled_from(["cosine", "l2"]),
)
def test_reranker_equals_the_transcription_on_small_galleries(
    seed: int, size: int, t: int, q: int, lam: float, space: str
) -> None:
    store = _store(n=size, d=4, seed=seed, space=space)
    probe = np.random.default_rng(seed + 1).normal(size=4)
    candidates = store.retrieve_by_vector(probe, k=size)[0]
    got = ECNReranker(store, t=t, q=q, lambda_value=lam).rerank(candidates, top_k=size)
    _assert_same_ranking(got, candidates, _oracle_pool_scores(store, candidates, t, q, lam))


def test_full_form_and_pool_agree_for_one_probe() -> None:
    store = _store(n=40)
    probe = np.random.default_rng(9).normal(size=(1, 6))
    candidates = store.retrieve_by_vector(probe, k=40)[0]
    got = {c.path: c.score for c in ECNReranker(store, t=3, q=8).rerank(candidates, top_k=40)}
    full = ecn_rerank_features(probe, store.embeddings_of([f"p{i}" for i in range(40)]), t=3, q=8)[0]
    np.testing.assert_allclose([got[f"p{i}"] for i in range(40)], full, atol=1e-5)


def test_protocol_batches_like_single_calls_and_keeps_ties_in_candidate_order() -> None:
    store = _store()
    reranker = ECNReranker(store, t=2, q=3, lambda_value=0.2)
    assert isinstance(reranker, Reranker)
    pools = [store.retrieve_by_vector(v, k=k)[0] for v, k in zip(np.eye(6)[:3], (12, 20, 12), strict=True)]
    for pool, got in zip(pools, reranker.rerank_batch(pools, top_k=10), strict=True):
        single = reranker.rerank(pool, top_k=10)
        assert [c.path for c in got] == [c.path for c in single] and len(got) == 10
    assert reranker.rerank_batch([], top_k=3) == []
    # λ = 1 is the original distance: the candidates come back in their order, scored as they were.
    same = ECNReranker(store, t=3, q=8, lambda_value=1.0).rerank(pools[1], top_k=20)
    assert [c.path for c in same] == [c.path for c in pools[1]]
    np.testing.assert_allclose([c.score for c in same], [c.score for c in pools[1]], atol=1e-6)


def test_removed_items_are_refused_and_the_rest_still_rerank() -> None:
    store = _store()
    reranker = ECNReranker(store, t=3, q=2)
    stale = store.retrieve_by_vector(np.ones(6), k=10)[0]
    store.remove_images([stale[3].path])
    with pytest.raises(KeyError):
        reranker.rerank(stale, top_k=5)
    fresh = store.retrieve_by_vector(np.ones(6), k=10)[0]
    got = reranker.rerank(fresh, top_k=10)
    _assert_same_ranking(got, fresh, _oracle_pool_scores(store, fresh, 3, 2, 0.0))


# --------------------------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"t": 0}, ValueError, r"t must lie in \[1, 100\], got 0"),
        ({"t": 2.5}, TypeError, r"t must be an integer, got 2.5"),
        ({"t": True}, TypeError, "t must be an integer"),
        ({"q": -1}, ValueError, r"q must lie in \[0, 100\], got -1"),
        ({"q": "8"}, TypeError, "q must be an integer"),
        ({"q": 101}, ValueError, "q must lie"),
        ({"lambda_value": 1.5}, ValueError, "lambda_value"),
        ({"lambda_value": "0.3"}, TypeError, "lambda_value"),
    ],
)
def test_bad_parameters_are_refused_naming_them(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        ECNReranker(_store(), **kwargs)
    with pytest.raises(error, match=match):
        ecn_rerank_features(np.eye(3), np.eye(3), **kwargs)


def test_other_bad_input() -> None:
    with pytest.raises(TypeError, match="InMemoryImageEmbeddingStore"):
        ECNReranker("not a store")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gallery_features has dimension 3"):
        ecn_rerank_features(np.ones((2, 4)), np.ones((5, 3)))
    with pytest.raises(ValueError, match="square"):
        ecn_matrix(np.ones((2, 3)))
    reranker = ECNReranker(_store())
    with pytest.raises(ValueError, match="more than once"):
        reranker.rerank([Candidate("p1", 0.1), Candidate("p1", 0.2)], top_k=1)
    with pytest.raises(TypeError, match="top_k"):
        reranker.rerank([Candidate("p1", 0.1)], top_k=1.0)  # type: ignore[arg-type]


def test_the_declaration_bounds_a_request_and_names_the_parameter() -> None:
    from galleria.rerank.registry import check_method_params, label, reranker_component

    assert check_method_params("ecn", {"t": 2}) == {"t": 2, "q": 8, "lambda_value": 0.0}
    check_method_params("ecn", {"t": 3, "q": 8}, pool=1000)
    with pytest.raises(ValueError, match="over the bound"):
        check_method_params("ecn", {"t": 100, "q": 100}, pool=1000)
    with pytest.raises(ValueError, match=r"t must lie in \[1, 100\], got 0"):
        check_method_params("ecn", {"t": 0})
    assert reranker_component("ecn").paper_params() == PAPER_PARAMS
    assert label("ecn", {"t": 1, "q": 1, "lambda_value": 0.5}, pool=200) == "ECN (t=1, q=1, λ=0.5, pool=200)"


def test_paper_preset_and_defaults() -> None:
    assert PAPER_PARAMS == {"t": 3, "q": 8, "lambda_value": 0.0}
    assert check_ecn_params(3, 8) == (3, 8, 0.0)
    assert ECNReranker(_store(), t=5).params() == {"t": 5, "q": 8, "lambda_value": 0.0}


# --------------------------------------------------------------------------------------------- adaptive


def test_the_adaptive_rule_reads_the_store_statistics() -> None:
    store = _store(n=60)
    reranker = ECNReranker(store)
    assert "adaptive" not in repr(reranker)  # resolved at once on a built store
    assert reranker.params() == ecn_params_from_statistics(store_statistics(store))


def test_the_adaptive_rule_keeps_the_plain_order_without_structure() -> None:
    flat = GalleryStatistics(1000, 200, (5, 10, 20), (0.1, 0.1, 0.1), (0.0, 1.0, 1.0))
    assert ecn_params_from_statistics(flat)["lambda_value"] == 1.0
    assert ecn_params_from_statistics(GalleryStatistics(2, 0, (), (), ()))["lambda_value"] == 1.0


def test_the_adaptive_rule_keeps_more_of_the_original_where_neighbourhoods_are_less_reciprocal() -> None:
    # the share grows from the first five to the first 20: the first matches are trusted
    weak = GalleryStatistics(1000, 200, (5, 10, 20), (0.52, 0.54, 0.56), (2.0, 3.0, 6.0))
    strong = GalleryStatistics(1000, 200, (5, 10, 20), (0.8, 0.82, 0.85), (4.0, 8.0, 16.0))
    low, high = ecn_params_from_statistics(weak), ecn_params_from_statistics(strong)
    for params in (low, high):
        check_ecn_params(params["t"], params["q"], params["lambda_value"])
        assert (params["t"], params["q"]) == (1, 1)  # anchored on the best match
    assert 1.0 > low["lambda_value"] > high["lambda_value"] >= 0.3
    # first matches mostly not mutual, or no more reciprocal at 20 than at 5: the original order
    for untrusted in ((0.35, 0.4, 0.45), (0.8, 0.8, 0.8)):
        stats = GalleryStatistics(1000, 200, (5, 10, 20), untrusted, (4.0, 8.0, 16.0))
        assert ecn_params_from_statistics(stats)["lambda_value"] == 1.0


@given(points_on_a_grid, st.sampled_from([0.0, 0.37, 0.7, 1.0]))
def test_the_adaptive_shape_keeps_a_mutual_best_match_first(points: list[list[int]], lam: float) -> None:
    """t = q = 1 (the adaptive rule's shape): when the probe is its best match's nearest item, no
    candidate scores below the best match (the argument in docs/reranking.md)."""
    d = grid_distances(np.array(points, dtype=np.float64))
    best = oracle_ranking(d.tolist(), 0)[0]
    if oracle_ranking(d.tolist(), best)[0] != 0:
        return
    scores = lam * d[0, 1:] + (1 - lam) * ecn_pools(d[None], t=1, q=1)[0]
    assert scores[best - 1] <= scores.min() + 1e-12


# --------------------------------------------------------------------------------------------- everywhere


@pytest.fixture(scope="module")
def colours(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from PIL import Image

    root = tmp_path_factory.mktemp("ecn") / "colours"
    rng = np.random.default_rng(0)
    for label, colour in {"red": (200, 40, 40), "green": (40, 200, 40), "blue": (40, 40, 200)}.items():
        (root / label).mkdir(parents=True)
        for i in range(8):
            pixels = np.clip(np.array(colour) + rng.normal(0, 40, size=(10, 10, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i}.png")
    return root


def test_the_command_line_runs_ecn_by_its_declared_name(
    colours: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from galleria.cli import main

    evaluate = ["evaluate", str(colours), "--embedder", "pixel:6", "--rerank", "--rerank-method", "ecn"]
    assert main([*evaluate, "--rerank-param", "t=2", "--rerank-param", "q=3", "--pool", "12", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["configurations"][-1]
    assert row["title"] == "ECN (t=2, q=3, λ=0, pool=12)"
    assert row["settings"]["rerank_method"] == "ecn" and row["settings"]["t"] == 2
    assert main([*evaluate, "--rerank-param", "q=-1"]) == 2
    assert "q must lie in [0, 100], got -1" in capsys.readouterr().err
    assert main(["methods"]) == 0 and "ecn" in capsys.readouterr().out


def test_the_http_api_answers_with_ecn(colours: Any) -> None:
    need("fastapi")
    need("httpx")
    from fastapi.testclient import TestClient

    from galleria import PixelEmbedder
    from galleria.rerank import make_reranker
    from galleria.retrieval import RetrievalConfig
    from galleria.web import create_app

    paths = sorted(str(p) for p in colours.rglob("*.png"))
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=6), num_workers=1)
    store.build_store(progress=False)
    params = {"t": 2, "q": 3, "lambda_value": 0.2}
    config = RetrievalConfig("ecn", rerank=True, rerank_method="ecn", rerank_params=params, pool=12)
    client = TestClient(create_app(store, defaults=config))
    body = client.post("/api/search", json={"path": paths[0], "k": 5, "rerank": True}).json()
    pool = client.post("/api/search", json={"path": paths[0], "k": 12}).json()["plain"]
    expected = make_reranker("ecn", store, **params).rerank(
        [Candidate(i["path"], i["score"]) for i in pool], 5
    )
    assert [i["path"] for i in body["reranked"]] == [c.path for c in expected]
    assert [i["score"] for i in body["reranked"]] == pytest.approx([c.score for c in expected])
