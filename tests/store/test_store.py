"""The gallery store: building, retrieval, αQE, add/remove, external indexes, image reading."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import ClassVar

import faiss
import numpy as np
import pytest
from PIL import Image

from _support.store_support import (
    BatchedEmbedder,
    TextFakeEmbedder,
    make_images,
    pixel_embedder,
    write_corrupt,
)
from galleria import (
    Candidate,
    ExactIndex,
    ExternalSearchIndex,
    InMemoryImageEmbeddingStore,
    alpha_query_expansion,
)
from galleria.distances import pairwise_distances, prepare_vectors
from galleria.images.batches import iter_decoded_batches
from galleria.images.queries import as_image_list
from galleria.store import ImageReadError, read_rgb


@pytest.fixture
def gallery(tmp_path: Path) -> list[str]:
    return make_images(tmp_path / "gallery", 24)


@pytest.fixture
def store(gallery: list[str]) -> InMemoryImageEmbeddingStore:
    built = InMemoryImageEmbeddingStore(gallery, pixel_embedder(), num_workers=2)
    built.build_store(progress=False)
    return built


def brute_force(store: InMemoryImageEmbeddingStore, queries: np.ndarray) -> np.ndarray:
    """Distances from queries to the whole gallery, from the one definition in galleria.distances."""
    return pairwise_distances(prepare_vectors(queries, store.space), store.embeddings, store.space)


# ---------------------------------------------------------------- building and reading back


def test_build_keeps_order_and_embeds_every_image(
    gallery: list[str], store: InMemoryImageEmbeddingStore
) -> None:
    assert store.is_built
    assert store.paths == gallery
    assert len(store) == len(gallery)
    assert store.space == "cosine"
    assert isinstance(store.search_index, ExactIndex)
    expected = prepare_vectors(pixel_embedder().embed([read_rgb(p) for p in gallery]), "cosine")
    np.testing.assert_allclose(store.embeddings, expected, rtol=1e-5, atol=1e-6)
    assert store.embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(store.embeddings, axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize(("workers", "prefetch", "batch"), [(1, 1, 1), (3, 1, 5), (4, 4, 3), (8, 2, 7)])
def test_order_preserved_with_several_workers(
    gallery: list[str], workers: int, prefetch: int, batch: int
) -> None:
    embedder = BatchedEmbedder(pixel_embedder(), batch)
    store = InMemoryImageEmbeddingStore(gallery, embedder, num_workers=workers, num_prefetch_batches=prefetch)
    store.build_store(progress=False)
    assert store.paths == gallery
    assert sum(embedder.batches) == len(gallery)
    assert max(embedder.batches) <= batch
    expected = prepare_vectors(pixel_embedder().embed([read_rgb(p) for p in gallery]), "cosine")
    np.testing.assert_allclose(store.embeddings, expected, rtol=1e-5, atol=1e-6)


def test_decoding_stays_within_prefetch_bound() -> None:
    paths = [f"p{i}" for i in range(40)]
    started: list[str] = []
    lock = threading.Lock()

    def reader(path: str) -> np.ndarray:
        with lock:
            started.append(path)
        return np.zeros((2, 2, 3), dtype=np.uint8)

    batch_size, prefetch = 3, 2
    seen: list[str] = []
    for number, batch in enumerate(
        iter_decoded_batches(
            paths, batch_size, num_workers=4, num_prefetch_batches=prefetch, skip_errors=False, reader=reader
        )
    ):
        seen.extend(batch.paths)
        with lock:
            # The current batch plus at most `prefetch` batches beyond it have been started.
            assert len(started) <= (number + 1 + prefetch) * batch_size
    assert seen == paths


class RecordingBar:
    """Stands in for the progress bar: records how it was created and every update."""

    made: ClassVar[list[RecordingBar]] = []

    def __init__(self, *, total: int, desc: str, unit: str, disable: bool | None) -> None:
        self.total, self.desc, self.disable = total, desc, disable
        self.updates: list[int] = []
        self.closed = False
        RecordingBar.made.append(self)

    def __enter__(self) -> RecordingBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True

    def update(self, count: int) -> None:
        self.updates.append(count)


@pytest.mark.parametrize("progress", [True, False])
def test_build_store_reports_progress_with_tqdm(
    gallery: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, progress: bool
) -> None:
    import galleria.store._embedding as store_module

    RecordingBar.made = []

    def recording(total: int, description: str, unit: str, *, enabled: bool) -> RecordingBar:
        return RecordingBar(total=total, desc=description, unit=unit, disable=None if enabled else True)

    monkeypatch.setattr(store_module, "progress_bar", recording)
    bad = write_corrupt(tmp_path / "broken.png")
    paths = [*gallery[:7], bad, *gallery[7:10]]
    store = InMemoryImageEmbeddingStore(
        paths, BatchedEmbedder(pixel_embedder(), 3), skip_errors=True, num_workers=2
    )
    with pytest.warns(RuntimeWarning, match="broken"):
        store.build_store(progress=progress)
    (bar,) = RecordingBar.made
    assert bar.total == len(paths) and bar.closed
    assert sum(bar.updates) == len(paths)  # skipped images advance the bar too
    assert bar.updates == [1] * len(paths)  # one update per image, as it is decoded
    # progress=True shows it (a bar on a terminal, lines elsewhere: galleria._progress); False hides it.
    assert bar.disable is (None if progress else True)
    assert store.paths == [*gallery[:7], *gallery[7:10]]


def test_an_embedder_reusing_its_output_buffer_is_copied(gallery: list[str]) -> None:
    class ReusingEmbedder:
        """Writes every batch into one preallocated array and returns it (a view of it)."""

        batch_size = 5

        def __init__(self) -> None:
            self.inner = pixel_embedder()
            self.buffer = np.zeros((5, 192), dtype=np.float32)

        def embed(self, images: list[np.ndarray]) -> np.ndarray:
            self.buffer[: len(images)] = self.inner.embed(images)
            return self.buffer[: len(images)]

    store = InMemoryImageEmbeddingStore(gallery, ReusingEmbedder(), num_workers=2)
    store.build_store(progress=False)
    expected = prepare_vectors(pixel_embedder().embed([read_rgb(p) for p in gallery]), "cosine")
    np.testing.assert_allclose(store.embeddings, expected, rtol=1e-5, atol=1e-6)
    results = store.retrieve_top_k_similar(gallery[:12], k=1)  # queries span three batches
    assert [r[0].path for r in results] == gallery[:12]


def test_duplicate_paths_dropped_with_warning(gallery: list[str]) -> None:
    doubled = [gallery[0], Path(gallery[1]), gallery[0], *gallery[2:5], gallery[1]]
    with pytest.warns(UserWarning, match="duplicate"):
        store = InMemoryImageEmbeddingStore(doubled, pixel_embedder())
    store.build_store(progress=False)
    assert store.paths == gallery[:5]
    assert all(isinstance(p, str) for p in store.paths)
    assert Path(gallery[1]) in store


def test_build_twice_is_a_no_op(store: InMemoryImageEmbeddingStore) -> None:
    before = store.embeddings.copy()
    store.build_store(progress=False)
    np.testing.assert_array_equal(store.embeddings, before)
    assert len(store.search_index) == len(store)


def test_corrupt_image_raises_naming_path_and_leaves_store_unbuilt(
    gallery: list[str], tmp_path: Path
) -> None:
    bad = write_corrupt(tmp_path / "broken.png")
    store = InMemoryImageEmbeddingStore([*gallery[:10], bad, *gallery[10:]], pixel_embedder(), num_workers=3)
    with pytest.raises(ImageReadError, match=r"broken\.png"):
        store.build_store(progress=False)
    assert not store.is_built
    assert len(store) == 0 and len(store.search_index) == 0 and store.skipped == []
    with pytest.raises(RuntimeError, match="build_store"):
        store.retrieve_by_vector(np.ones(192), k=1)


def test_missing_file_raises_naming_path(gallery: list[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere.jpg")
    store = InMemoryImageEmbeddingStore([*gallery[:3], missing], pixel_embedder())
    with pytest.raises(ImageReadError, match=r"nowhere\.jpg"):
        store.build_store(progress=False)
    assert not store.is_built


def test_skip_errors_skips_with_warning(gallery: list[str], tmp_path: Path) -> None:
    bad = write_corrupt(tmp_path / "broken.png")
    missing = str(tmp_path / "nowhere.png")
    paths = [gallery[0], bad, *gallery[1:6], missing, gallery[6]]
    store = InMemoryImageEmbeddingStore(paths, pixel_embedder(), skip_errors=True, num_workers=2)
    with pytest.warns(RuntimeWarning) as record:
        store.build_store(progress=False)
    messages = [str(w.message) for w in record]
    assert len(messages) == 2 and "broken.png" in messages[0] and "nowhere.png" in messages[1]
    assert store.skipped == [bad, missing]
    assert store.paths == gallery[:7]
    assert bad not in store
    assert len(store.embeddings) == 7


def test_all_images_unreadable_gives_an_empty_store(tmp_path: Path) -> None:
    bad = [write_corrupt(tmp_path / f"b{i}.png") for i in range(3)]
    store = InMemoryImageEmbeddingStore(bad, pixel_embedder(), skip_errors=True)
    with pytest.warns(RuntimeWarning) as record:
        store.build_store(progress=False)
    assert "none of the 3" in str(record[-1].message)
    assert store.is_built and len(store) == 0 and store.skipped == bad
    query = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    assert store.retrieve_top_k_similar(query, k=2) == [[]]
    assert store.embeddings.shape[0] == 0
    store.add_images([make_images(tmp_path / "later", 1)[0]])
    assert len(store) == 1


def test_jpeg_and_grey_images_are_read_as_rgb(tmp_path: Path) -> None:
    paths = make_images(tmp_path / "jpg", 4, fmt="jpg")
    grey = tmp_path / "grey.png"
    Image.fromarray(np.arange(64, dtype=np.uint8).reshape(8, 8)).save(grey)
    store = InMemoryImageEmbeddingStore([*paths, grey], pixel_embedder())
    store.build_store(progress=False)
    assert len(store) == 5
    assert read_rgb(grey).shape == (8, 8, 3)


# ---------------------------------------------------------------- retrieval


def test_each_image_finds_itself_first(gallery: list[str], store: InMemoryImageEmbeddingStore) -> None:
    results = store.retrieve_top_k_similar(gallery, k=3)
    assert len(results) == len(gallery)
    for path, ranked in zip(gallery, results, strict=True):
        assert len(ranked) == 3
        assert ranked[0].path == path
        assert ranked[0].score == pytest.approx(0.0, abs=1e-5)
        scores = [c.score for c in ranked]
        assert scores == sorted(scores)
        assert all(isinstance(c, Candidate) and isinstance(c.score, float) for c in ranked)


def test_k_above_gallery_returns_whole_gallery_without_padding(store: InMemoryImageEmbeddingStore) -> None:
    ranked = store.retrieve_by_vector(np.ones(192), k=1000)[0]
    assert len(ranked) == len(store)
    assert sorted(c.path for c in ranked) == sorted(store.paths)


def test_retrieve_by_vector_matches_brute_force(store: InMemoryImageEmbeddingStore) -> None:
    rng = np.random.default_rng(3)
    queries = rng.normal(size=(5, 192)).astype(np.float32)
    distances = brute_force(store, queries)
    for row, ranked in enumerate(store.retrieve_by_vector(queries, k=6)):
        order = np.argsort(distances[row], kind="stable")[:6]
        assert [c.path for c in ranked] == [store.paths[i] for i in order]
        np.testing.assert_allclose([c.score for c in ranked], distances[row, order], atol=1e-5)


def test_single_vector_query_gives_one_list(store: InMemoryImageEmbeddingStore) -> None:
    one = store.retrieve_by_vector(np.ones(192), k=2)
    assert len(one) == 1 and len(one[0]) == 2


def test_all_query_forms_agree(gallery: list[str], store: InMemoryImageEmbeddingStore) -> None:
    arrays = [read_rgb(p) for p in gallery[:3]]
    expected = [[c.path for c in r] for r in store.retrieve_top_k_similar(gallery[:3], k=4)]

    def paths_of(results: list[list[Candidate]]) -> list[list[str]]:
        return [[c.path for c in r] for r in results]

    assert paths_of(store.retrieve_top_k_similar(np.stack(arrays), k=4)) == expected
    assert paths_of(store.retrieve_top_k_similar(arrays, k=4)) == expected
    assert paths_of(store.retrieve_top_k_similar([Image.open(p) for p in gallery[:3]], k=4)) == expected
    assert paths_of(store.retrieve_top_k_similar([Path(gallery[0]), arrays[1], gallery[2]], k=4)) == expected
    assert paths_of(store.retrieve_top_k_similar(arrays[0], k=4)) == expected[:1]
    assert paths_of(store.retrieve_top_k_similar(Path(gallery[0]), k=4)) == expected[:1]
    assert paths_of(store.retrieve_top_k_similar(Image.open(gallery[0]), k=4)) == expected[:1]


def test_query_list_longer_than_a_batch(gallery: list[str]) -> None:
    embedder = BatchedEmbedder(pixel_embedder(), 4)
    store = InMemoryImageEmbeddingStore(gallery, embedder)
    store.build_store(progress=False)
    results = store.retrieve_top_k_similar(gallery, k=1)
    assert [r[0].path for r in results] == gallery


def test_query_expansion_is_the_documented_two_searches(store: InMemoryImageEmbeddingStore) -> None:
    rng = np.random.default_rng(5)
    queries = rng.normal(size=(4, 192)).astype(np.float32)
    got = store.retrieve_by_vector(
        queries, k=5, query_expansion=True, expansion_alpha=2.0, expansion_neighbors=7
    )
    first = np.argsort(brute_force(store, queries), axis=1, kind="stable")[:, :7]
    expanded = alpha_query_expansion(queries, store.embeddings[first], alpha=2.0)
    distances = brute_force(store, expanded)
    for row, ranked in enumerate(got):
        order = np.argsort(distances[row], kind="stable")[:5]
        assert [c.path for c in ranked] == [store.paths[i] for i in order]
        np.testing.assert_allclose([c.score for c in ranked], distances[row, order], atol=1e-5)


def test_query_expansion_with_gallery_smaller_than_neighbours(store: InMemoryImageEmbeddingStore) -> None:
    queries = np.ones((2, 192), dtype=np.float32)
    got = store.retrieve_by_vector(queries, k=3, query_expansion=True, expansion_neighbors=500)
    everything = store.embeddings[None].repeat(2, axis=0)
    expanded = alpha_query_expansion(queries, everything, alpha=3.0)
    order = np.argsort(brute_force(store, expanded)[0], kind="stable")[:3]
    assert [c.path for c in got[0]] == [store.paths[i] for i in order]


def test_query_expansion_on_image_queries(gallery: list[str], store: InMemoryImageEmbeddingStore) -> None:
    results = store.retrieve_top_k_similar(gallery[:2], k=3, query_expansion=True, expansion_alpha=0.0)
    assert len(results) == 2 and all(len(r) == 3 for r in results)


def test_hnsw_store_agrees_with_exact(gallery: list[str], store: InMemoryImageEmbeddingStore) -> None:
    hnsw = InMemoryImageEmbeddingStore(gallery, pixel_embedder(), "hnsw", index_params={"graph_degree": 8})
    hnsw.build_store(progress=False)
    assert hnsw.search_index.name == "hnsw"
    for a, b in zip(
        hnsw.retrieve_top_k_similar(gallery[:5], k=4),
        store.retrieve_top_k_similar(gallery[:5], k=4),
        strict=True,
    ):
        assert [c.path for c in a] == [c.path for c in b]


@pytest.mark.parametrize("space", ["ip", "l2"])
def test_other_spaces(gallery: list[str], space: str) -> None:
    store = InMemoryImageEmbeddingStore(gallery, pixel_embedder(), space=space)
    store.build_store(progress=False)
    assert store.space == space
    queries = np.random.default_rng(0).normal(size=(2, 192)).astype(np.float32)
    distances = brute_force(store, queries)
    for row, ranked in enumerate(store.retrieve_by_vector(queries, k=3)):
        np.testing.assert_allclose(
            [c.score for c in ranked], np.sort(distances[row])[:3], rtol=1e-4, atol=1e-4
        )


def test_retrieve_by_text(gallery: list[str], tmp_path: Path) -> None:
    colours = {}
    for name, rgb in TextFakeEmbedder.COLOURS.items():
        path = tmp_path / f"{name}.png"
        Image.fromarray(np.full((6, 6, 3), rgb, dtype=np.uint8)).save(path)
        colours[name] = str(path)
    store = InMemoryImageEmbeddingStore([*gallery[:5], *colours.values()], TextFakeEmbedder())
    store.build_store(progress=False)
    results = store.retrieve_by_text(["blue", "red"], k=1)
    assert [r[0].path for r in results] == [colours["blue"], colours["red"]]
    assert store.retrieve_by_text("green", k=1)[0][0].path == colours["green"]


def test_retrieve_by_text_needs_a_text_embedder(store: InMemoryImageEmbeddingStore) -> None:
    with pytest.raises(TypeError, match="embed_text"):
        store.retrieve_by_text("a cat", k=1)


# ---------------------------------------------------------------- candidates


def test_candidate_reads_lazily_and_clears(store: InMemoryImageEmbeddingStore, gallery: list[str]) -> None:
    best = store.retrieve_top_k_similar(gallery[4], k=1)[0][0]
    assert best._buffer == []
    image = best.array
    np.testing.assert_array_equal(image, read_rgb(gallery[4]))
    assert best.array is image  # kept
    best.clear_buffer()
    assert best._buffer == []
    assert best.array is not image
    with pytest.raises(AttributeError):
        best.path = "x"  # type: ignore[misc]
    assert best == Candidate(best.path, best.score)


# ---------------------------------------------------------------- add / remove


@pytest.mark.parametrize("index", ["exact", "hnsw"])
def test_remove_images_everywhere(gallery: list[str], index: str) -> None:
    store = InMemoryImageEmbeddingStore(gallery, pixel_embedder(), index)
    store.build_store(progress=False)
    before = dict(zip(store.paths, store.embeddings, strict=True))
    gone = [gallery[3], gallery[0], gallery[17], gallery[3]]
    store.remove_images(gone)
    kept = [p for p in gallery if p not in gone]
    assert store.paths == kept and len(store) == len(kept) == len(store.search_index)
    assert all(p not in store for p in gone)
    np.testing.assert_allclose(store.embeddings, np.stack([before[p] for p in kept]), rtol=1e-6)
    for ranked in store.retrieve_top_k_similar(gallery, k=len(gallery)):
        assert not {c.path for c in ranked} & set(gone)
        assert len(ranked) == len(kept)
    with pytest.raises(KeyError):
        store.embeddings_of([gallery[3]])


@pytest.mark.parametrize("index", ["exact", "hnsw"])
def test_add_images_equals_building_everything(gallery: list[str], tmp_path: Path, index: str) -> None:
    extra = make_images(tmp_path / "extra", 6, seed=9)
    store = InMemoryImageEmbeddingStore(gallery, pixel_embedder(), index)
    store.build_store(progress=False)
    with pytest.warns(UserWarning, match="duplicate"):
        store.add_images([extra[0], gallery[2], *extra[1:], extra[0]])
    whole = InMemoryImageEmbeddingStore([*gallery, *extra], pixel_embedder(), index)
    whole.build_store(progress=False)
    assert store.paths == whole.paths
    np.testing.assert_allclose(store.embeddings, whole.embeddings, rtol=1e-6)
    a = store.retrieve_top_k_similar(extra, k=3)
    b = whole.retrieve_top_k_similar(extra, k=3)
    assert [[c.path for c in r] for r in a] == [[c.path for c in r] for r in b]
    assert a[0][0].path == extra[0]


def test_add_after_remove_and_skip_errors(gallery: list[str], tmp_path: Path) -> None:
    store = InMemoryImageEmbeddingStore(gallery[:10], pixel_embedder(), skip_errors=True)
    store.build_store(progress=False)
    store.remove_images(gallery[:10])
    assert len(store) == 0
    assert store.retrieve_by_vector(np.ones(192), k=3) == [[]]
    bad = write_corrupt(tmp_path / "broken.png")
    with pytest.warns(RuntimeWarning):
        store.add_images([gallery[0], bad, gallery[12]])
    assert store.paths == [gallery[0], gallery[12]]
    assert store.skipped == [bad]
    assert store.retrieve_top_k_similar(gallery[12], k=1)[0][0].path == gallery[12]


def test_embeddings_of(store: InMemoryImageEmbeddingStore, gallery: list[str]) -> None:
    rows = store.embeddings_of([gallery[5], Path(gallery[1]), gallery[5]])
    np.testing.assert_array_equal(rows, store.embeddings[[5, 1, 5]])
    assert rows.dtype == np.float32
    assert store.embeddings_of([]).shape == (0, 192)


# ---------------------------------------------------------------- vectors from elsewhere, external indexes


def test_from_embeddings_answers_vector_queries_only() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(30, 8)).astype(np.float32)
    paths = [f"item{i}" for i in range(30)]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, vectors)
    assert store.is_built and len(store) == 30 and store.dim == 8
    np.testing.assert_allclose(store.embeddings, prepare_vectors(vectors, "cosine"), rtol=1e-6)
    assert store.retrieve_by_vector(vectors[7], k=1)[0][0].path == "item7"
    with pytest.raises(RuntimeError, match="no embedder"):
        store.retrieve_top_k_similar(np.zeros((4, 4, 3), dtype=np.uint8), k=1)
    with pytest.raises(RuntimeError, match="no embedder"):
        store.retrieve_by_text("x", k=1)
    with pytest.raises(RuntimeError, match="no embedder"):
        store.add_images(["a.png"])


def test_from_embeddings_drops_duplicate_rows() -> None:
    vectors = np.eye(3, dtype=np.float32)
    with pytest.warns(UserWarning, match="duplicate"):
        store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "a"], vectors, space="l2")
    assert store.paths == ["a", "b"]
    np.testing.assert_array_equal(store.embeddings, vectors[:2])


def test_from_embeddings_with_a_filled_index_checks_the_vectors_agree() -> None:
    vectors = np.random.default_rng(4).normal(size=(5, 3)).astype(np.float32)
    index = ExactIndex("cosine")
    index.add(vectors)
    store = InMemoryImageEmbeddingStore.from_embeddings(list("abcde"), vectors * 3.0, search_index=index)
    assert len(index) == 5  # used as it is, nothing added twice
    np.testing.assert_allclose(store.embeddings, prepare_vectors(vectors, "cosine"), rtol=1e-6)
    other = vectors.copy()
    other[3] = -other[3]
    with pytest.raises(ValueError, match="embeddings row 3 differs"):
        InMemoryImageEmbeddingStore.from_embeddings(list("abcde"), other, search_index=index)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before any duplicate warning
        with pytest.raises(ValueError, match="unique"):
            InMemoryImageEmbeddingStore.from_embeddings(list("abcda"), vectors, search_index=index)
    assert len(index) == 5


def test_from_embeddings_keeps_given_vectors_for_a_filled_non_reconstructing_index() -> None:
    vectors = np.random.default_rng(6).normal(size=(20, 4)).astype(np.float32)
    ivf = _ivf(vectors)
    ivf.add(vectors)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"v{i}" for i in range(20)], vectors, search_index=ExternalSearchIndex.from_faiss_index(ivf)
    )
    assert ivf.ntotal == 20
    np.testing.assert_array_equal(store.embeddings, vectors)
    original = vectors.copy()
    vectors[:] = 0.0  # the caller's array changes afterwards; the store's copy does not
    np.testing.assert_array_equal(store.embeddings, original)
    vectors[:] = original
    assert store.retrieve_by_vector(vectors[4], k=1)[0][0].path == "v4"
    assert len(store.retrieve_by_vector(vectors[4], k=3, query_expansion=True)[0]) == 3


def test_external_inner_product_index_scores_are_distances(gallery: list[str]) -> None:
    external = ExternalSearchIndex.from_faiss_index(faiss.IndexFlatIP(192), name="flat-ip")
    store = InMemoryImageEmbeddingStore(gallery, pixel_embedder(), external)
    store.build_store(progress=False)
    assert store.space == "ip" and store.search_index is external
    raw = pixel_embedder().embed([read_rgb(gallery[2])])
    ranked = store.retrieve_by_vector(raw, k=3)[0]
    assert ranked[0].path == gallery[2]
    # 1 - ip, as for every store (issue 34: the inner product itself until 0.2)
    assert ranked[0].score == pytest.approx(1.0 - float(raw[0] @ raw[0]), rel=1e-5)
    assert [c.score for c in ranked] == sorted(c.score for c in ranked)
    np.testing.assert_allclose(store.embeddings_of([gallery[2]]), raw, rtol=1e-6)


def _ivf(vectors: np.ndarray) -> faiss.Index:
    quantizer = faiss.IndexFlatL2(vectors.shape[1])
    ivf = faiss.IndexIVFFlat(quantizer, vectors.shape[1], 2)
    ivf.train(vectors)
    ivf.nprobe = 2
    return ivf


def test_external_index_without_reconstruct_keeps_a_copy() -> None:
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(40, 6)).astype(np.float32)
    ivf = _ivf(vectors)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"v{i}" for i in range(40)], vectors, search_index=ExternalSearchIndex.from_faiss_index(ivf)
    )
    assert not store.search_index.can_reconstruct
    np.testing.assert_array_equal(store.embeddings, vectors)
    expanded = store.retrieve_by_vector(vectors[:2], k=3, query_expansion=True, expansion_neighbors=4)
    assert len(expanded) == 2 and len(expanded[0]) == 3
    store.remove_images(["v0", "v5"])
    np.testing.assert_array_equal(store.embeddings, np.delete(vectors, [0, 5], axis=0))
    assert all(c.path not in ("v0", "v5") for c in store.retrieve_by_vector(vectors[0], k=38)[0])


def test_external_index_without_vectors_raises_clearly() -> None:
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(20, 4)).astype(np.float32)
    ivf = _ivf(vectors)
    ivf.add(vectors)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"v{i}" for i in range(20)], None, search_index=ExternalSearchIndex.from_faiss_index(ivf)
    )
    assert store.retrieve_by_vector(vectors[3], k=1)[0][0].path == "v3"
    with pytest.raises(RuntimeError, match="cannot reconstruct"):
        _ = store.embeddings
    with pytest.raises(RuntimeError, match="cannot reconstruct"):
        store.retrieve_by_vector(vectors[3], k=1, query_expansion=True)


def test_space_must_agree_with_an_index_object(gallery: list[str]) -> None:
    flat = faiss.IndexFlatL2(192)
    external = ExternalSearchIndex.from_faiss_index(flat)
    store = InMemoryImageEmbeddingStore(gallery, pixel_embedder(), external, space="l2")
    assert store.space == "l2"
    with pytest.raises(ValueError, match="disagrees"):
        InMemoryImageEmbeddingStore(gallery, pixel_embedder(), external, space="cosine")


def test_query_normalisation_errors() -> None:
    with pytest.raises(TypeError, match="uint8"):
        as_image_list(np.zeros((4, 4, 3), dtype=np.float32))
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        as_image_list(np.zeros((4, 4), dtype=np.uint8))
    with pytest.raises(ValueError, match="empty"):
        as_image_list([])
    with pytest.raises(TypeError):
        as_image_list(42)
    with pytest.raises(TypeError, match=r"queries\[1\]"):
        as_image_list([np.zeros((4, 4, 3), dtype=np.uint8), 3.0])
