"""Every bad input of the store's public API: the right exception, a clear message, the store unchanged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _support.store_support import FakeEmbedder, TextFakeEmbedder, make_images, pixel_embedder, snapshot
from galleria import InMemoryImageEmbeddingStore


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return make_images(tmp_path_factory.mktemp("errors"), 10)


@pytest.fixture
def store(gallery: list[str]) -> InMemoryImageEmbeddingStore:
    built = InMemoryImageEmbeddingStore(gallery, pixel_embedder(), num_workers=2)
    built.build_store(progress=False)
    return built


# ---------------------------------------------------------------- constructor (nothing is read)


def constructor_cases(gallery_path: str) -> list[tuple[dict[str, Any], type[Exception], str]]:
    ok = [gallery_path]
    return [
        ({"image_paths": gallery_path}, TypeError, "image_paths"),
        ({"image_paths": 42}, TypeError, "image_paths"),
        ({"image_paths": [gallery_path, 3]}, TypeError, r"image_paths\[1\]"),
        ({"image_paths": [b"x.png"]}, TypeError, r"image_paths\[0\]"),
        ({"image_paths": []}, ValueError, "image_paths"),
        ({"image_paths": [""]}, ValueError, "empty path"),
        ({"image_paths": ok, "embedder": None}, TypeError, "embedder"),
        ({"image_paths": ok, "embedder": object()}, TypeError, "embedder"),
        ({"image_paths": ok, "search_index": "annoy"}, ValueError, "search_index"),
        ({"image_paths": ok, "search_index": "external"}, ValueError, "search_index"),
        ({"image_paths": ok, "search_index": 3}, TypeError, "search_index"),
        ({"image_paths": ok, "space": "euclid"}, ValueError, "space"),
        ({"image_paths": ok, "space": 2}, TypeError, "space"),
        ({"image_paths": ok, "search_index": "hnsw", "index_params": {"M": 16}}, ValueError, "M"),
        (
            {"image_paths": ok, "search_index": "hnsw", "index_params": {"graph_degree": 0}},
            ValueError,
            "graph_degree",
        ),
        (
            {"image_paths": ok, "search_index": "hnsw", "index_params": {"graph_degree": 2.5}},
            TypeError,
            "graph_degree",
        ),
        ({"image_paths": ok, "search_index": "hnsw", "index_params": [1]}, TypeError, "index_params"),
        ({"image_paths": ok, "index_params": {"graph_degree": 8}}, ValueError, "exact"),
        ({"image_paths": ok, "skip_errors": 1}, TypeError, "skip_errors"),
        ({"image_paths": ok, "num_workers": 0}, ValueError, "num_workers"),
        ({"image_paths": ok, "num_workers": -2}, ValueError, "num_workers"),
        ({"image_paths": ok, "num_workers": 2.0}, TypeError, "num_workers"),
        ({"image_paths": ok, "num_prefetch_batches": 0}, ValueError, "num_prefetch_batches"),
        ({"image_paths": ok, "num_prefetch_batches": True}, TypeError, "num_prefetch_batches"),
    ]


def test_constructor_rejects_bad_arguments_before_reading(tmp_path: Path) -> None:
    # A path that does not exist: the constructor must fail on the bad argument, not on reading.
    missing = str(tmp_path / "never-read.png")
    for kwargs, error, pattern in constructor_cases(missing):
        arguments = {"embedder": pixel_embedder(), **kwargs}
        with pytest.raises(error, match=pattern):
            InMemoryImageEmbeddingStore(**arguments)


def test_non_empty_index_object_rejected(gallery: list[str]) -> None:
    from galleria import ExactIndex

    index = ExactIndex("cosine")
    index.add(np.ones((2, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="already holds 2"):
        InMemoryImageEmbeddingStore(gallery, pixel_embedder(), index)
    assert len(index) == 2


def test_index_object_with_index_params_rejected(gallery: list[str]) -> None:
    from galleria import ExactIndex

    with pytest.raises(ValueError, match="index_params"):
        InMemoryImageEmbeddingStore(gallery, pixel_embedder(), ExactIndex("cosine"), index_params={})


# ---------------------------------------------------------------- retrieval arguments


def retrieval_calls(
    gallery: list[str],
) -> list[tuple[Callable[[InMemoryImageEmbeddingStore], Any], type[Exception], str]]:
    vector = np.ones(192, dtype=np.float32)
    image = np.zeros((8, 8, 3), dtype=np.uint8)
    return [
        (lambda s: s.retrieve_by_vector(vector, k=0), ValueError, "k"),
        (lambda s: s.retrieve_by_vector(vector, k=-3), ValueError, "k"),
        (lambda s: s.retrieve_by_vector(vector, k=2.0), TypeError, "k"),
        (lambda s: s.retrieve_by_vector(vector, k=True), TypeError, "k"),
        (
            lambda s: s.retrieve_by_vector(vector, k=1, expansion_neighbors=0),
            ValueError,
            "expansion_neighbors",
        ),
        (
            lambda s: s.retrieve_by_vector(vector, k=1, expansion_neighbors=1.5),
            TypeError,
            "expansion_neighbors",
        ),
        (lambda s: s.retrieve_by_vector(vector, k=1, expansion_alpha=-1.0), ValueError, "expansion_alpha"),
        (
            lambda s: s.retrieve_by_vector(vector, k=1, expansion_alpha=float("nan")),
            ValueError,
            "expansion_alpha",
        ),
        (
            lambda s: s.retrieve_by_vector(vector, k=1, expansion_alpha=float("inf")),
            ValueError,
            "expansion_alpha",
        ),
        (lambda s: s.retrieve_by_vector(vector, k=1, expansion_alpha="3"), TypeError, "expansion_alpha"),
        (lambda s: s.retrieve_by_vector(vector, k=1, query_expansion=1), TypeError, "query_expansion"),
        (lambda s: s.retrieve_by_vector(np.ones(5), k=1), ValueError, "dimension"),
        (lambda s: s.retrieve_by_vector(np.ones((2, 2, 192)), k=1), ValueError, "vectors"),
        (lambda s: s.retrieve_by_vector(np.full(192, np.nan), k=1), ValueError, "NaN"),
        (lambda s: s.retrieve_by_vector(np.array(["a"] * 192), k=1), TypeError, "vectors"),
        (lambda s: s.retrieve_by_vector(np.zeros((0, 192)), k=1), ValueError, "vectors"),
        (lambda s: s.retrieve_top_k_similar(image.astype(np.float32), k=1), TypeError, "uint8"),
        (lambda s: s.retrieve_top_k_similar(image[:, :, :2], k=1), ValueError, r"\(H, W, 3\)"),
        (lambda s: s.retrieve_top_k_similar(image[:, :, 0], k=1), ValueError, r"\(H, W, 3\)"),
        (
            lambda s: s.retrieve_top_k_similar(np.zeros((2, 8, 8, 4), dtype=np.uint8), k=1),
            ValueError,
            "queries",
        ),
        (lambda s: s.retrieve_top_k_similar(np.zeros((2, 8, 8, 3), dtype=np.int64), k=1), TypeError, "uint8"),
        (
            lambda s: s.retrieve_top_k_similar(np.zeros((0, 8, 8, 3), dtype=np.uint8), k=1),
            ValueError,
            "queries",
        ),
        (lambda s: s.retrieve_top_k_similar([], k=1), ValueError, "queries"),
        (lambda s: s.retrieve_top_k_similar([image, None], k=1), TypeError, r"queries\[1\]"),
        (lambda s: s.retrieve_top_k_similar({"a": 1}, k=1), TypeError, "queries"),
        (lambda s: s.retrieve_top_k_similar(image, k=0), ValueError, "k"),
        (
            lambda s: s.retrieve_top_k_similar(str(Path(gallery[0]).parent / "nope.png"), k=1),
            OSError,
            "nope.png",
        ),
        (lambda s: s.retrieve_by_text("cat", k=1), TypeError, "embed_text"),
        (lambda s: s.embeddings_of(["nope.png", gallery[0], "other.png"]), KeyError, "nope.png"),
        (lambda s: s.embeddings_of(gallery[0]), TypeError, "paths"),
        (lambda s: s.remove_images([gallery[0], "nope.png"]), KeyError, "nope.png"),
        (lambda s: s.remove_images(gallery[0]), TypeError, "paths"),
        (lambda s: s.add_images([]), ValueError, "paths"),
        (lambda s: s.add_images([5]), TypeError, r"paths\[0\]"),
        (lambda s: s.add_images([str(Path(gallery[0]).parent / "nope.png")]), OSError, "nope.png"),
        (lambda s: s.build_store(progress="yes"), TypeError, "progress"),
    ]


@pytest.mark.parametrize("case", range(len(retrieval_calls(["/x/y.png"]))))
def test_bad_call_leaves_store_unchanged(
    store: InMemoryImageEmbeddingStore, gallery: list[str], case: int
) -> None:
    call, error, pattern = retrieval_calls(gallery)[case]
    before = snapshot(store)
    with pytest.raises(error, match=pattern):
        call(store)
    assert snapshot(store) == before


def test_text_arguments_checked(gallery: list[str]) -> None:
    store = InMemoryImageEmbeddingStore(gallery, TextFakeEmbedder())
    store.build_store(progress=False)
    before = snapshot(store)
    with pytest.raises(TypeError, match="texts"):
        store.retrieve_by_text(["red", 3], k=1)
    with pytest.raises(ValueError, match="texts"):
        store.retrieve_by_text([], k=1)
    with pytest.raises(TypeError, match="texts"):
        store.retrieve_by_text(b"red", k=1)
    assert snapshot(store) == before


def test_unbuilt_store_refuses_use(gallery: list[str]) -> None:
    store = InMemoryImageEmbeddingStore(gallery, pixel_embedder())
    before = snapshot(store)
    for call in (
        lambda: store.retrieve_by_vector(np.ones(192), k=1),
        lambda: store.retrieve_top_k_similar(gallery[0], k=1),
        lambda: store.retrieve_by_text("x", k=1),
        lambda: store.embeddings,
        lambda: store.embeddings_of(gallery[:1]),
        lambda: store.add_images(gallery[:1]),
        lambda: store.remove_images(gallery[:1]),
        lambda: store.save_to_disk("never.safetensors"),
    ):
        with pytest.raises(RuntimeError, match="not built"):
            call()
    assert snapshot(store) == before
    assert len(store) == 0 and gallery[0] not in store and store.paths == []


# ---------------------------------------------------------------- misbehaving embedders


@pytest.mark.parametrize(
    ("mode", "pattern"),
    [
        ("nan", "NaN"),
        ("wrong_rows", "shape"),
        ("one_d", "shape"),
        ("strings", "non-numeric"),
    ],
)
def test_bad_embedder_output_at_build(gallery: list[str], mode: str, pattern: str) -> None:
    store = InMemoryImageEmbeddingStore(gallery, FakeEmbedder(mode=mode))
    before = snapshot(store)
    with pytest.raises(ValueError, match=pattern):
        store.build_store(progress=False)
    assert snapshot(store) == before
    assert not store.is_built and len(store.search_index) == 0


@pytest.mark.parametrize(
    ("mode", "pattern"),
    [("nan", "NaN"), ("wrong_rows", "shape"), ("wrong_dim", "dimension 7"), ("one_d", "shape")],
)
def test_bad_embedder_output_after_build(gallery: list[str], mode: str, pattern: str) -> None:
    embedder = FakeEmbedder()  # behaves until its mode is switched
    store = InMemoryImageEmbeddingStore(gallery[:6], embedder)
    store.build_store(progress=False)
    before = snapshot(store)
    embedder.mode = mode
    with pytest.raises(ValueError, match=pattern):
        store.retrieve_top_k_similar(gallery[0], k=2)
    with pytest.raises(ValueError, match=pattern):
        store.add_images(gallery[6:])
    embedder.mode = "ok"
    assert snapshot(store) == before


def test_embedder_dimension_differs_from_external_index(gallery: list[str]) -> None:
    import faiss

    from galleria import ExternalSearchIndex

    store = InMemoryImageEmbeddingStore(
        gallery, FakeEmbedder(dim=6), ExternalSearchIndex.from_faiss_index(faiss.IndexFlatL2(5))
    )
    before = snapshot(store)
    with pytest.raises(ValueError, match="dimension 6"):
        store.build_store(progress=False)
    assert snapshot(store) == before


def test_text_embedder_bad_output(gallery: list[str]) -> None:
    class BadText(TextFakeEmbedder):
        def embed_text(self, texts: Any) -> np.ndarray:
            return np.full((len(texts), self.dim), np.nan, dtype=np.float32)

    store = InMemoryImageEmbeddingStore(gallery, BadText())
    store.build_store(progress=False)
    before = snapshot(store)
    with pytest.raises(ValueError, match="NaN"):
        store.retrieve_by_text("red", k=1)
    assert snapshot(store) == before


# ---------------------------------------------------------------- from_embeddings


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "pattern"),
    [
        ((["a", "b"], np.ones((3, 4))), {}, ValueError, "one row per path"),
        ((["a", "b"], np.ones(4)), {}, ValueError, "one row per path"),
        ((["a", "b"], np.full((2, 4), np.nan)), {}, ValueError, "NaN"),
        ((["a", "b"], np.array([["x"] * 4] * 2)), {}, TypeError, "embeddings"),
        (([], np.ones((0, 4))), {}, ValueError, "paths"),
        (("ab", np.ones((2, 4))), {}, TypeError, "paths"),
        ((["a", "b"], None), {}, ValueError, "embeddings=None"),
        ((["a", "b"], np.ones((2, 4))), {"embedder": 5}, TypeError, "embedder"),
        ((["a", "b"], np.ones((2, 4))), {"space": "dot"}, ValueError, "space"),
        ((["a", "b"], np.ones((2, 4))), {"search_index": "flat"}, ValueError, "search_index"),
    ],
)
def test_from_embeddings_bad_input(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        InMemoryImageEmbeddingStore.from_embeddings(*args, **kwargs)
