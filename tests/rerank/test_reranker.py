"""The store-bound KReciprocalReranker: results, batching, validation, live stores, end to end."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest
from PIL import Image

from galleria import Candidate, ExternalSearchIndex, InMemoryImageEmbeddingStore, KReciprocalReranker
from galleria.distances import pairwise_distances
from galleria.embedders import PixelEmbedder
from galleria.metrics import mean_average_precision
from galleria.rerank import rerank_pool


def vector_store(
    space: str = "cosine", count: int = 40, dim: int = 6, seed: int = 0
) -> InMemoryImageEmbeddingStore:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(count, dim)).astype(np.float32)
    paths = [f"item_{i:03d}.png" for i in range(count)]
    return InMemoryImageEmbeddingStore.from_embeddings(paths, vectors, space=space)


def query(store: InMemoryImageEmbeddingStore, seed: int, k: int) -> list[Candidate]:
    rng = np.random.default_rng(seed + 1000)
    return store.retrieve_by_vector(rng.normal(size=store.dim or 1).astype(np.float32), k=k)[0]


def expected_order(
    store: InMemoryImageEmbeddingStore, candidates: list[Candidate], k1: int, k2: int, lam: float
) -> tuple[list[str], np.ndarray]:
    """The pool docs/reranking.md describes, built by hand, re-ranked by the pure core."""
    vectors = store.embeddings_of([c.path for c in candidates])
    size = len(candidates)
    matrix = np.zeros((size + 1, size + 1))
    matrix[1:, 1:] = pairwise_distances(vectors, vectors, store.space)
    matrix[0, 1:] = matrix[1:, 0] = [c.score for c in candidates]
    final = rerank_pool(matrix, k1=k1, k2=k2, lambda_value=lam)
    order = np.argsort(final, kind="stable")
    return [candidates[i].path for i in order], final[order]


# ---------------------------------------------------------------------------- results


@pytest.mark.parametrize("space", ["cosine", "ip", "l2"])
def test_rerank_follows_the_pool_core(space: str) -> None:
    store = vector_store(space)
    reranker = KReciprocalReranker(store, k1=8, k2=3, lambda_value=0.25)
    candidates = query(store, 1, 30)
    result = reranker.rerank(candidates, top_k=10)
    paths, scores = expected_order(store, candidates, 8, 3, 0.25)
    assert [c.path for c in result] == paths[:10]
    np.testing.assert_allclose([c.score for c in result], scores[:10], rtol=0, atol=1e-12)
    assert all(isinstance(c, Candidate) and isinstance(c.score, float) for c in result)
    assert all(0.0 <= c.score <= 1.0 for c in result)
    assert [c.score for c in result] == sorted(c.score for c in result)


def test_hnsw_store_is_accepted() -> None:
    vectors = np.random.default_rng(8).normal(size=(50, 8)).astype(np.float32)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"h{i}.png" for i in range(50)], vectors, search_index="hnsw"
    )
    candidates = store.retrieve_by_vector(vectors[0], k=20)[0]
    result = KReciprocalReranker(store, k1=6, k2=2).rerank(candidates, top_k=20)
    assert [c.path for c in result] == expected_order(store, candidates, 6, 2, 0.3)[0]


def test_top_k_beyond_the_pool_returns_the_whole_pool() -> None:
    store = vector_store()
    candidates = query(store, 2, 7)
    result = KReciprocalReranker(store).rerank(candidates, top_k=50)
    assert sorted(c.path for c in result) == sorted(c.path for c in candidates)


def test_single_candidate_pool() -> None:
    store = vector_store()
    candidates = query(store, 3, 1)
    result = KReciprocalReranker(store).rerank(candidates, top_k=1)
    assert [c.path for c in result] == [candidates[0].path]


def test_rerank_batch_equals_rerank_per_list() -> None:
    store = vector_store("l2", count=60)
    reranker = KReciprocalReranker(store, k1=10, k2=4, lambda_value=0.3)
    lists = [query(store, seed, k) for seed, k in enumerate([30, 5, 1, 45, 12, 30])]
    batched = reranker.rerank_batch(lists, top_k=8)
    assert len(batched) == len(lists)
    for candidates, result in zip(lists, batched, strict=True):
        assert result == reranker.rerank(candidates, top_k=8)
    assert reranker.rerank_batch([], top_k=3) == []


def test_candidates_may_come_in_any_order_and_tuple() -> None:
    store = vector_store()
    reranker = KReciprocalReranker(store, k1=6, k2=2)
    candidates = query(store, 4, 20)
    shuffled = tuple(reversed(candidates))
    paths, _ = expected_order(store, list(shuffled), 6, 2, 0.3)
    assert [c.path for c in reranker.rerank(shuffled, top_k=20)] == paths


def test_properties_and_repr() -> None:
    store = vector_store()
    reranker = KReciprocalReranker(store, k1=12, k2=3, lambda_value=0.5)
    assert reranker.store is store
    assert (reranker.k1, reranker.k2, reranker.lambda_value) == (12, 3, 0.5)
    assert isinstance(reranker.lambda_value, float)
    text = repr(reranker)
    assert "KReciprocalReranker(" in text and "k1=12" in text and "k2=3" in text
    assert "lambda_value=0.5" in text and "InMemoryImageEmbeddingStore" in text
    default = KReciprocalReranker(store)  # the values read from the gallery
    from galleria.rerank.adaptive import default_rerank_params

    assert (default.k1, default.k2, default.lambda_value) == tuple(default_rerank_params(store).values())
    assert KReciprocalReranker(store, k1=np.int64(5), k2=np.int32(5), lambda_value=1).k1 == 5


# ---------------------------------------------------------------------------- validation


def test_constructor_validation() -> None:
    store = vector_store()
    with pytest.raises(TypeError, match="store"):
        KReciprocalReranker("not a store")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store"):
        KReciprocalReranker(None)  # type: ignore[arg-type]
    for bad_k in (2.0, True, "3"):  # (None means "not given": read from the gallery, or the paper's)
        with pytest.raises(TypeError, match="k1"):
            KReciprocalReranker(store, k1=bad_k)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="k2"):
            KReciprocalReranker(store, k2=bad_k)  # type: ignore[arg-type]
    for bad_value in (0, -3):
        with pytest.raises(ValueError, match="k1"):
            KReciprocalReranker(store, k1=bad_value)
        with pytest.raises(ValueError, match="k2"):
            KReciprocalReranker(store, k2=bad_value)
    with pytest.raises(ValueError, match="k2"):
        KReciprocalReranker(store, k1=4, k2=5)
    for bad_lambda in (-0.1, 1.01, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lambda_value"):
            KReciprocalReranker(store, lambda_value=bad_lambda)
    for wrong in (True, False, "0.3"):  # (None: not given)
        with pytest.raises(TypeError, match="lambda_value"):
            KReciprocalReranker(store, lambda_value=wrong)  # type: ignore[arg-type]


def test_external_index_store_is_rejected() -> None:
    vectors = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    flat = faiss.IndexFlatL2(4)
    flat.add(vectors)
    external = ExternalSearchIndex.from_faiss_index(flat, name="flat")
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"p{i}" for i in range(10)], None, search_index=external
    )
    with pytest.raises(ValueError, match="ExternalSearchIndex"):
        KReciprocalReranker(store)


def test_rerank_argument_validation() -> None:
    store = vector_store()
    reranker = KReciprocalReranker(store)
    good = query(store, 5, 10)
    with pytest.raises(TypeError, match="candidates"):
        reranker.rerank(good[0], top_k=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="candidates"):
        reranker.rerank("item_000.png", top_k=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="candidates"):
        reranker.rerank([], top_k=3)
    with pytest.raises(TypeError, match=r"candidates\[1\]"):
        reranker.rerank([good[0], ("item_001.png", 0.2)], top_k=3)  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"candidates\[1\]\.score"):
        reranker.rerank([good[0], Candidate(good[1].path, float("nan"))], top_k=3)
    with pytest.raises(ValueError, match=r"candidates\[0\]\.score"):
        reranker.rerank([Candidate(good[0].path, float("inf"))], top_k=3)
    with pytest.raises(TypeError, match=r"score must be a real number, got '0.1'"):
        Candidate(good[0].path, "0.1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="more than once"):
        reranker.rerank([good[0], good[1], Candidate(good[0].path, 0.5)], top_k=3)
    with pytest.raises(KeyError, match=r"missing\.png"):
        reranker.rerank([good[0], Candidate("missing.png", 0.1)], top_k=3)
    for bad_top in (1.5, True, None, "2"):
        with pytest.raises(TypeError, match="top_k"):
            reranker.rerank(good, top_k=bad_top)  # type: ignore[arg-type]
    for bad_top in (0, -1):
        with pytest.raises(ValueError, match="top_k"):
            reranker.rerank(good, top_k=bad_top)


def test_rerank_batch_validation_names_the_list() -> None:
    store = vector_store()
    reranker = KReciprocalReranker(store)
    good = query(store, 6, 10)
    with pytest.raises(TypeError, match="candidate_lists"):
        reranker.rerank_batch(good[0], top_k=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"candidate_lists\[1\]"):
        reranker.rerank_batch([good, []], top_k=3)
    with pytest.raises(TypeError, match=r"candidate_lists\[0\]\[2\]"):
        reranker.rerank_batch([[*good[:2], "x"]], top_k=3)  # type: ignore[list-item]
    with pytest.raises(KeyError, match=r"nowhere\.png"):
        reranker.rerank_batch([good, [Candidate("nowhere.png", 0.3)]], top_k=3)
    with pytest.raises(ValueError, match="top_k"):
        reranker.rerank_batch([good], top_k=0)


def write_images(folder: Path, count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        pixels = np.clip(rng.integers(0, 256, size=3) + rng.integers(-40, 40, size=(6, 6, 3)), 0, 255)
        path = folder / f"image_{seed}_{i:02d}.png"
        Image.fromarray(pixels.astype(np.uint8)).save(path)
        paths.append(str(path))
    return paths


def test_unbuilt_store_raises_runtime_error(tmp_path: Path) -> None:
    paths = write_images(tmp_path, 3, seed=1)
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=4))
    reranker = KReciprocalReranker(store)
    with pytest.raises(RuntimeError, match="not built"):
        reranker.rerank([Candidate(paths[0], 0.1)], top_k=1)


def test_works_after_adding_and_removing_images(tmp_path: Path) -> None:
    first = write_images(tmp_path, 10, seed=2)
    later = write_images(tmp_path, 6, seed=3)
    store = InMemoryImageEmbeddingStore(first, PixelEmbedder(size=4), num_workers=1)
    store.build_store(progress=False)
    reranker = KReciprocalReranker(store, k1=5, k2=2)
    store.add_images(later)
    candidates = store.retrieve_top_k_similar(later[0], k=16)[0]
    result = reranker.rerank(candidates, top_k=16)
    assert {c.path for c in result} == set(first) | set(later)
    paths, _ = expected_order(store, candidates, 5, 2, 0.3)
    assert [c.path for c in result] == paths

    store.remove_images(first[:4])
    with pytest.raises(KeyError, match="not in the store"):
        reranker.rerank(candidates, top_k=5)
    fresh = store.retrieve_top_k_similar(later[1], k=12)[0]
    paths, _ = expected_order(store, fresh, 5, 2, 0.3)
    assert [c.path for c in reranker.rerank(fresh, top_k=12)] == paths


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("k-reciprocal", {"k1": 5, "k2": 2}),
        ("diffusion", {"k": 4, "query_k": 2}),
        ("decoupled-diffusion", {"k": 4, "query_k": 2, "truncation": 20}),
        ("gnn", {"k1": 5, "k2": 2}),
    ],
)
def test_candidates_from_before_a_removal_are_placed_by_path(method: str, params: dict[str, object]) -> None:
    """Candidates carry the row their store found them in; once the gallery changes (rows shift),
    those rows are stale and the re-ranker finds the candidates by path instead."""
    from galleria.rerank import make_reranker

    store = vector_store(count=50, seed=4)
    old = query(store, 3, 20)
    old_rows = [c._where[1] for c in old]
    assert old_rows == [store.paths.index(c.path) for c in old]  # the rows the store found them in
    gone = [p for p in store.paths[:10] if p not in {c.path for c in old}][:4]
    store.remove_images(gone)  # every later row moves up
    kept = [c for c in old if c.path not in gone]
    assert any(store.paths.index(c.path) != row for c, row in zip(kept, old_rows, strict=False))
    by_hand = [Candidate(c.path, c.score) for c in kept]  # no row at all
    reranker = make_reranker(method, store, **params)
    expected = reranker.rerank(by_hand, top_k=len(kept))
    stale = reranker.rerank(kept, top_k=len(kept))
    assert [(c.path, c.score) for c in stale] == [(c.path, c.score) for c in expected]
    fresh = store.retrieve_by_vector(store.embeddings_of([kept[0].path]), k=12)[0]
    assert [c._where[1] for c in fresh] == [store.paths.index(c.path) for c in fresh]
    assert [c._where for c in reranker.rerank(fresh, top_k=12)] != [(0, -1)] * 12  # rows kept


def test_path_tables_have_unique_tokens() -> None:
    from galleria.store._paths import PathTable

    first = PathTable.from_paths(["a", "b"])
    tokens = {first.token, first.extended(["c"]).token, first.select(np.array([True, False])).token}
    assert len(tokens) == 3 and 0 not in tokens


# ---------------------------------------------------------------------------- end to end


def test_reranking_raises_map_on_a_clustered_gallery() -> None:
    rng = np.random.default_rng(21)
    classes, per_class, dim = 10, 15, 24
    centres = rng.normal(size=(classes, dim))
    labels = np.repeat(np.arange(classes), per_class)
    vectors = (centres[labels] + 1.0 * rng.normal(size=(labels.size, dim))).astype(np.float32)
    paths = [f"g{i:03d}.png" for i in range(labels.size)]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, vectors, space="cosine")
    label_of = dict(zip(paths, labels.tolist(), strict=True))

    query_labels = np.repeat(np.arange(classes), 3)
    queries = (centres[query_labels] + 1.0 * rng.normal(size=(query_labels.size, dim))).astype(np.float32)
    pools = store.retrieve_by_vector(queries, k=60)
    reranked = KReciprocalReranker(store, k1=15, k2=4, lambda_value=0.3).rerank_batch(pools, top_k=60)

    def map_at(lists: list[list[Candidate]]) -> float:
        hits = np.array(
            [[label_of[c.path] == q for c in ranked] for ranked, q in zip(lists, query_labels, strict=True)]
        )
        return mean_average_precision(hits, np.full(len(lists), per_class), 60)

    plain, improved = map_at(pools), map_at(reranked)
    assert improved > plain + 0.01
