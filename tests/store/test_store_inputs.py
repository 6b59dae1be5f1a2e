"""Numbers, dimensions and paths at the store's boundary (regressions of the reliability issue)."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _support.store_support import make_images, pixel_embedder
from galleria import Candidate, InMemoryImageEmbeddingStore, KReciprocalReranker, PixelEmbedder
from galleria.distances import normalize_rows

# ---------------------------------------------------------------- numbers


def test_huge_finite_vectors_normalise_without_overflow() -> None:
    vectors = np.array([[3e20, 4e20, 0.0], [1.0, 0.0, 0.0], [1e-30, 1e-30, 0.0]], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning either
        unit = normalize_rows(vectors)
    np.testing.assert_allclose(unit, [[0.6, 0.8, 0.0], [1.0, 0.0, 0.0], [2**-0.5, 2**-0.5, 0.0]], rtol=1e-6)
    store = InMemoryImageEmbeddingStore.from_embeddings(["big", "one", "tiny"], vectors)
    assert [c.path for c in store.retrieve_by_vector(vectors[0] * 1e17, k=1)[0]] == ["big"]


def test_zero_vectors_in_cosine_space_name_the_row() -> None:
    with pytest.raises(ValueError, match="embeddings: row 1 is a zero vector"):
        InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.array([[1.0, 0.0], [0.0, 0.0]]))
    store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2))
    with pytest.raises(ValueError, match="vectors: row 1 is a zero vector"):
        store.retrieve_by_vector(np.array([[1.0, 0.0], [0.0, 0.0]]), k=1)
    # l2 has no such problem: a zero vector is a point like any other
    l2 = InMemoryImageEmbeddingStore.from_embeddings(
        ["a", "b"], np.array([[1.0, 0.0], [0.0, 0.0]]), space="l2"
    )
    assert l2.retrieve_by_vector(np.zeros(2), k=1)[0][0].path == "b"


def test_zero_embedder_output_is_refused(tmp_path: Path) -> None:
    class Blank:
        dim = 4

        def embed(self, images: Any) -> np.ndarray:
            return np.zeros((len(images), 4), dtype=np.float32)

    paths = make_images(tmp_path, 2)
    store = InMemoryImageEmbeddingStore(paths, Blank())
    with pytest.raises(ValueError, match="embedder's output for gallery images: row 0 is a zero vector"):
        store.build_store(progress=False)
    assert not store.is_built


@pytest.mark.parametrize("index", ["exact", "hnsw"])
@pytest.mark.parametrize("space", ["cosine", "l2"])
def test_exact_duplicates_have_distance_zero(index: str, space: str) -> None:
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(50, 24)).astype(np.float32) * 3.7
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"v{i}" for i in range(50)], vectors, search_index=index, space=space
    )
    ranked = store.retrieve_by_vector(vectors, k=2)
    first = np.array([row[0].score for row in ranked])
    assert (first >= 0.0).all()
    tolerance = 1e-5 if space == "cosine" else 1e-3  # squared l2 through the Gram matrix rounds more
    assert all(row[0].score < tolerance for row in ranked)
    assert min(c.score for row in ranked for c in row) >= 0.0


def test_candidate_validates_and_normalises() -> None:
    candidate = Candidate(Path("a/b.png"), np.float32(0.25))
    assert candidate.path == os.path.join("a", "b.png") and type(candidate.path) is str
    assert candidate.score == 0.25 and type(candidate.score) is float
    assert Candidate("x", 2).score == 2.0 and type(Candidate("x", 2).score) is float
    with pytest.raises(TypeError, match=r"path must be a str or os.PathLike, got 123"):
        Candidate(123, 0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"score must be a real number, got '0.25'"):
        Candidate("a", "0.25")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="score must be a real number, got True"):
        Candidate("a", True)
    assert Candidate("a", 0.5) == Candidate("a", 0.5) and Candidate("a", 0.5).store_id is None


# ---------------------------------------------------------------- store identity and the re-ranker


def test_reranker_refuses_candidates_of_another_store() -> None:
    rng = np.random.default_rng(6)
    paths = [f"p{i}" for i in range(20)]
    first = InMemoryImageEmbeddingStore.from_embeddings(paths, rng.normal(size=(20, 8)))
    second = InMemoryImageEmbeddingStore.from_embeddings(paths, rng.normal(size=(20, 8)), space="l2")
    assert first.store_id != second.store_id
    ranked = first.retrieve_by_vector(rng.normal(size=8), k=10)[0]
    assert all(c.store_id == first.store_id for c in ranked)
    assert ranked[0] == Candidate(ranked[0].path, ranked[0].score)  # identity is not part of equality
    with pytest.raises(ValueError, match=r"candidates\[0\] .* scored by another store"):
        KReciprocalReranker(second, k1=5, k2=2).rerank(ranked, top_k=3)
    with pytest.raises(ValueError, match=r"candidate_lists\[1\]\[0\]"):
        KReciprocalReranker(second, k1=5, k2=2).rerank_batch(
            [second.retrieve_by_vector(np.ones(8), k=5)[0], ranked], top_k=3
        )
    reranked = KReciprocalReranker(first, k1=5, k2=2).rerank(ranked, top_k=5)
    assert all(c.store_id == first.store_id for c in reranked)
    # hand-made candidates carry no identity and are accepted by any store holding their paths
    by_hand = [Candidate(c.path, c.score) for c in ranked]
    assert len(KReciprocalReranker(second, k1=5, k2=2).rerank(by_hand, top_k=3)) == 3


def test_reranker_refuses_huge_scores_with_value_error() -> None:
    store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c"], np.eye(3))
    reranker = KReciprocalReranker(store, k1=2, k2=1)
    with pytest.raises(ValueError, match=r"candidates\[1\]\.score 1e\+308 is beyond the float32 range"):
        reranker.rerank([Candidate("a", 0.1), Candidate("b", 1e308), Candidate("c", 0.3)], top_k=2)


# ---------------------------------------------------------------- dimensions


def test_from_embeddings_checks_the_embedder_dimension_at_once() -> None:
    with pytest.raises(ValueError, match=r"embedder \(PixelEmbedder\) outputs dimension 48, but the store"):
        InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2, 10), embedder=PixelEmbedder(size=4))

    class NoDim:
        calls = 0

        def embed(self, images: Any) -> np.ndarray:
            NoDim.calls += 1
            return np.ones((len(images), 7), dtype=np.float32)

    with pytest.raises(ValueError, match=r"embedder \(NoDim\) outputs dimension 7"):
        InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2, 10), embedder=NoDim())
    assert NoDim.calls == 1  # one probe image
    ok = InMemoryImageEmbeddingStore.from_embeddings(
        ["a", "b"], np.eye(2, 48), embedder=PixelEmbedder(size=4)
    )
    assert ok.dim == 48


# ---------------------------------------------------------------- paths


def test_stores_keep_absolute_paths_and_answer_from_any_folder(tmp_path: Path, monkeypatch: Any) -> None:
    data = tmp_path / "data"
    make_images(data / "photos", 4)
    monkeypatch.chdir(data)
    relative = [os.path.join("photos", f"img_{i:03d}.png") for i in range(4)]
    store = InMemoryImageEmbeddingStore(relative, pixel_embedder())
    store.build_store(progress=False)
    assert store.paths == [str(data / path) for path in relative]
    assert relative[0] in store and str(data / relative[0]) in store
    np.testing.assert_array_equal(store.embeddings_of(relative[:1]), store.embeddings_of([store.paths[0]]))
    store.save_to_disk(tmp_path / "s.safetensors")
    monkeypatch.chdir(tmp_path)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "s.safetensors")
    best = loaded.retrieve_top_k_similar(str(data / relative[2]), k=1)[0][0]
    assert best.path == str(data / relative[2]) and best.array.shape == (12, 12, 3)
    store.remove_images([str(data / relative[3])])
    assert len(store) == 3 and relative[3] not in store


def test_root_re_anchors_a_moved_gallery(tmp_path: Path) -> None:
    old = tmp_path / "old"
    paths = make_images(old / "cats", 3) + make_images(old / "dogs", 2, seed=9)
    store = InMemoryImageEmbeddingStore(paths, pixel_embedder())
    store.build_store(progress=False)
    store.save_to_disk(old / "store.safetensors")
    new = tmp_path / "moved"
    shutil.move(str(old), str(new))
    loaded = InMemoryImageEmbeddingStore.load_from_disk(new / "store.safetensors", root=new)
    assert loaded.paths == [path.replace(str(old), str(new)) for path in paths]
    hit = loaded.retrieve_top_k_similar(loaded.paths[4], k=1)[0][0]
    assert hit.path == loaded.paths[4] and hit.array.shape == (12, 12, 3)
    with pytest.raises(TypeError, match="root"):
        InMemoryImageEmbeddingStore.load_from_disk(new / "store.safetensors", root=5)  # type: ignore[arg-type]


def test_from_embeddings_keeps_identifiers_as_given() -> None:
    store = InMemoryImageEmbeddingStore.from_embeddings(["id-1", "id-2"], np.eye(2))
    assert store.paths == ["id-1", "id-2"]


def test_add_images_can_skip_unreadable_files_for_one_call(tmp_path: Path) -> None:
    from _support.store_support import write_corrupt

    store = InMemoryImageEmbeddingStore(make_images(tmp_path / "a", 3), pixel_embedder())
    store.build_store(progress=False)
    broken = write_corrupt(tmp_path / "broken.png")
    fine = make_images(tmp_path / "b", 1, seed=3)
    from galleria.store import ImageReadError

    with pytest.raises(ImageReadError):
        store.add_images([broken, *fine])
    assert len(store) == 3
    with pytest.warns(UserWarning, match="skipped"):
        store.add_images([broken, *fine], skip_errors=True)
    assert len(store) == 4 and store.skipped == [broken]
    with pytest.raises(TypeError, match="skip_errors"):
        store.add_images(fine, skip_errors="yes")  # type: ignore[arg-type]
