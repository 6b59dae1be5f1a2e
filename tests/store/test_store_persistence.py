"""Saving and loading stores: round trips, external indexes, and damaged or foreign files."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from _support.store_files import seal
from _support.store_support import FakeEmbedder, as_old_format, make_images, pixel_embedder, stored_paths
from galleria import ExternalSearchIndex, HnswIndex, InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.store._header import FORMAT_VERSION


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return make_images(tmp_path_factory.mktemp("persist"), 30)


def results(
    store: InMemoryImageEmbeddingStore, queries: np.ndarray, **kwargs: Any
) -> list[list[tuple[str, float]]]:
    return [
        [(c.path, c.score) for c in ranked] for ranked in store.retrieve_by_vector(queries, k=8, **kwargs)
    ]


def queries_for(dim: int) -> np.ndarray:
    return np.random.default_rng(7).normal(size=(6, dim)).astype(np.float32)


@pytest.mark.parametrize("index", ["exact", "hnsw"])
@pytest.mark.parametrize("space", ["cosine", "l2"])
def test_round_trip_gives_identical_results(
    gallery: list[str], tmp_path: Path, index: str, space: str
) -> None:
    store = InMemoryImageEmbeddingStore(
        gallery,
        pixel_embedder(),
        index,
        space=space,
        index_params={"graph_degree": 8} if index == "hnsw" else None,
    )
    store.build_store(progress=False)
    store.remove_images(gallery[:3])
    file = tmp_path / "store.safetensors"
    store.save_to_disk(file)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(str(file))
    assert loaded.paths == store.paths == gallery[3:]
    assert loaded.space == space and loaded.search_index.name == index
    assert loaded.search_index.params() == store.search_index.params()
    assert isinstance(loaded.embedder, PixelEmbedder) and loaded.embedder.size == (8, 8)
    np.testing.assert_array_equal(loaded.embeddings, store.embeddings)
    queries = queries_for(192)
    assert results(loaded, queries) == results(store, queries)
    assert results(loaded, queries, query_expansion=True) == results(store, queries, query_expansion=True)
    assert all(p not in loaded for p in gallery[:3])
    # The loaded store's embedder works for image queries too.
    assert loaded.retrieve_top_k_similar(gallery[5], k=1)[0][0].path == gallery[5]


def test_hnsw_graph_is_loaded_not_rebuilt(
    gallery: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = InMemoryImageEmbeddingStore(gallery, pixel_embedder(), "hnsw", index_params={"graph_degree": 4})
    store.build_store(progress=False)
    file = tmp_path / "hnsw.safetensors"
    store.save_to_disk(file)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the graph must not be rebuilt on load")

    monkeypatch.setattr(HnswIndex, "add", refuse)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    assert loaded.search_index.faiss_index.ntotal == len(gallery)  # type: ignore[attr-defined]
    queries = queries_for(192)
    assert results(loaded, queries) == results(store, queries)


def test_file_is_plain_safetensors_with_a_json_header(gallery: list[str], tmp_path: Path) -> None:
    store = InMemoryImageEmbeddingStore(gallery[:5], pixel_embedder())
    store.build_store(progress=False)
    file = tmp_path / "plain.safetensors"
    store.save_to_disk(file)
    with safe_open(str(file), framework="numpy") as reader:
        header = json.loads(reader.metadata()["galleria"])
        assert set(reader.keys()) == {"index", "path_bytes", "path_offsets", "pixel_digests"}
        tensors = {key: reader.get_tensor(key) for key in reader.keys()}
    assert header["format_version"] == FORMAT_VERSION
    assert header["rows"] == 5 and stored_paths(tensors) == gallery[:5]
    assert header["space"] == "cosine" and header["dim"] == 192
    assert header["index"] == {"name": "exact", "params": {}}
    assert header["embedder"]["config"]["type"] == "pixel"
    assert [name for name in os.listdir(tmp_path) if name != "plain.safetensors"] == []  # no temp file left


def test_save_replaces_atomically_and_keeps_old_file_on_error(gallery: list[str], tmp_path: Path) -> None:
    store = InMemoryImageEmbeddingStore(gallery[:4], pixel_embedder())
    store.build_store(progress=False)
    file = tmp_path / "s.safetensors"
    store.save_to_disk(file)
    original = file.read_bytes()

    class Broken:
        def embed(self, images: Any) -> np.ndarray:
            return np.ones((len(images), 2), dtype=np.float32)

        def config(self) -> str:
            return "not a dict"

    broken = InMemoryImageEmbeddingStore.from_embeddings(["x", "y"], np.eye(2), embedder=Broken())
    with pytest.raises(TypeError, match="config"):
        broken.save_to_disk(file)
    assert file.read_bytes() == original
    assert os.listdir(tmp_path) == ["s.safetensors"]


def test_saved_file_gets_ordinary_permissions(gallery: list[str], tmp_path: Path) -> None:
    store = InMemoryImageEmbeddingStore(gallery[:3], pixel_embedder())
    store.build_store(progress=False)
    file = tmp_path / "s.safetensors"
    previous = os.umask(0o022)
    try:
        store.save_to_disk(file)
    finally:
        os.umask(previous)
    assert file.stat().st_mode & 0o777 == 0o644  # not mkstemp's private 0o600


def test_embedder_without_config_needs_embedder_on_load(gallery: list[str], tmp_path: Path) -> None:
    store = InMemoryImageEmbeddingStore(gallery[:6], FakeEmbedder())
    store.build_store(progress=False)
    file = tmp_path / "fake.safetensors"
    store.save_to_disk(file)
    with pytest.raises(ValueError, match="embedder="):
        InMemoryImageEmbeddingStore.load_from_disk(file)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file, embedder=FakeEmbedder())
    assert loaded.retrieve_top_k_similar(gallery[2], k=1)[0][0].path == gallery[2]


def test_store_without_embedder_round_trips(tmp_path: Path) -> None:
    vectors = np.random.default_rng(0).normal(size=(12, 5)).astype(np.float32)
    store = InMemoryImageEmbeddingStore.from_embeddings([f"p{i}" for i in range(12)], vectors, space="ip")
    file = tmp_path / "noemb.safetensors"
    store.save_to_disk(file)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    assert loaded.embedder is None
    assert results(loaded, queries_for(5)) == results(store, queries_for(5))


def test_skipped_list_survives(gallery: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"nope")
    store = InMemoryImageEmbeddingStore([*gallery[:3], str(bad)], pixel_embedder(), skip_errors=True)
    with pytest.warns(RuntimeWarning):
        store.build_store(progress=False)
    store.save_to_disk(tmp_path / "s.safetensors")
    assert InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "s.safetensors").skipped == [str(bad)]


# ---------------------------------------------------------------- external indexes


def test_external_reconstructing_index_round_trips(gallery: list[str], tmp_path: Path) -> None:
    flat = faiss.IndexFlatL2(192)
    store = InMemoryImageEmbeddingStore(
        gallery, pixel_embedder(), ExternalSearchIndex.from_faiss_index(flat, name="mine")
    )
    store.build_store(progress=False)
    store.remove_images([gallery[4]])
    store.save_to_disk(tmp_path / "ext.safetensors")
    loaded = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "ext.safetensors")
    assert isinstance(loaded.search_index, ExternalSearchIndex)
    assert loaded.paths == store.paths
    assert results(loaded, queries_for(192)) == results(store, queries_for(192))


def _filled_ivf(vectors: np.ndarray) -> faiss.Index:
    quantizer = faiss.IndexFlatL2(vectors.shape[1])
    ivf = faiss.IndexIVFFlat(quantizer, vectors.shape[1], 2)
    ivf.train(vectors)
    ivf.add(vectors)
    ivf.nprobe = 2
    return ivf


def test_external_index_without_vectors_needs_vectors_to_save(tmp_path: Path) -> None:
    vectors = np.random.default_rng(3).normal(size=(25, 4)).astype(np.float32)
    ivf = _filled_ivf(vectors)
    paths = [f"v{i}" for i in range(25)]
    store = InMemoryImageEmbeddingStore.from_embeddings(
        paths, None, search_index=ExternalSearchIndex.from_faiss_index(ivf)
    )
    file = tmp_path / "ivf.safetensors"
    with pytest.raises(ValueError, match="vectors="):
        store.save_to_disk(file)
    assert not file.exists()
    with pytest.raises(ValueError, match="shape"):
        store.save_to_disk(file, vectors=vectors[:3])
    store.save_to_disk(file, vectors=vectors)
    assert set(load_file(str(file))) == {"index", "vectors", "path_bytes", "path_offsets"}
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    np.testing.assert_array_equal(loaded.embeddings, vectors)
    assert results(loaded, vectors[:4]) == results(store, vectors[:4])
    # A copy kept by the store is written without being asked.
    loaded.save_to_disk(tmp_path / "again.safetensors")
    again = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "again.safetensors")
    np.testing.assert_array_equal(again.embeddings, vectors)


def test_unserialisable_external_index_must_be_passed_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vectors = np.random.default_rng(4).normal(size=(10, 3)).astype(np.float32)
    flat = faiss.IndexFlatIP(3)
    external = ExternalSearchIndex.from_faiss_index(flat)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"v{i}" for i in range(10)], vectors, search_index=external
    )

    def cannot(self: ExternalSearchIndex) -> bytes:
        raise RuntimeError("faiss cannot serialise this index")

    monkeypatch.setattr(ExternalSearchIndex, "to_bytes", cannot)
    file = tmp_path / "noindex.safetensors"
    store.save_to_disk(file, vectors=vectors)
    assert set(load_file(str(file))) == {"vectors", "path_bytes", "path_offsets"}
    with pytest.raises(ValueError, match="search_index="):
        InMemoryImageEmbeddingStore.load_from_disk(file)
    # Passed back full, or empty (filled from the saved vectors).
    full = InMemoryImageEmbeddingStore.load_from_disk(file, search_index=external)
    assert results(full, vectors[:2]) == results(store, vectors[:2])
    empty_flat = faiss.IndexFlatIP(3)
    refilled = InMemoryImageEmbeddingStore.load_from_disk(
        file, search_index=ExternalSearchIndex.from_faiss_index(empty_flat)
    )
    assert results(refilled, vectors[:2]) == results(store, vectors[:2])
    wrong_flat = faiss.IndexFlatL2(3)
    with pytest.raises(ValueError, match="space"):
        InMemoryImageEmbeddingStore.load_from_disk(
            file, search_index=ExternalSearchIndex.from_faiss_index(wrong_flat)
        )
    with pytest.raises(TypeError, match="search_index"):
        InMemoryImageEmbeddingStore.load_from_disk(file, search_index="exact")  # type: ignore[arg-type]


# ---------------------------------------------------------------- damaged and foreign files


@pytest.fixture(params=["exact", "hnsw"])
def saved(gallery: list[str], tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    store = InMemoryImageEmbeddingStore(gallery[:8], pixel_embedder(), request.param)
    store.build_store(progress=False)
    file = tmp_path / "good.safetensors"
    store.save_to_disk(file)
    return file


def rewrite(
    source: Path,
    target: Path,
    edit_header: Any = None,
    edit_tensors: Any = None,
    *,
    reseal: bool = True,
    old: bool = False,
) -> Path:
    """Copy a store file, changing its header and/or tensors (a tamperer with a safetensors writer).

    With ``reseal`` the tamperer also recomputes the header digest, so the loader's own checks of
    each key are what refuses the file; with ``old`` the file is first rewritten in format version
    2 (paths in the header).
    """
    with safe_open(str(source), framework="numpy") as reader:
        metadata = reader.metadata()
        header = json.loads(metadata["galleria"])
        tensors = {key: reader.get_tensor(key) for key in reader.keys()}
    if old:
        header, tensors = as_old_format(header, tensors)
    if edit_header:
        edit_header(header)
    if edit_tensors:
        edit_tensors(tensors)
    digest = seal(header) if reseal else metadata["galleria_sha256"]
    save_file(tensors, str(target), metadata={"galleria": json.dumps(header), "galleria_sha256": digest})
    return target


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "absent.safetensors")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="folder, not a regular file"):
        InMemoryImageEmbeddingStore.load_from_disk(tmp_path)


@pytest.mark.parametrize("keep", [0, 5, 100, -1000, -1])
def test_truncated_file(saved: Path, tmp_path: Path, keep: int) -> None:
    data = saved.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[:keep] if keep >= 0 else data[: len(data) + keep])
    with pytest.raises(ValueError, match=r"cut\.safetensors"):
        InMemoryImageEmbeddingStore.load_from_disk(cut)


def test_flipped_byte_in_tensor_data(saved: Path, tmp_path: Path) -> None:
    data = bytearray(saved.read_bytes())
    data[-50] ^= 0xFF
    bad = tmp_path / "flipped.safetensors"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)


def test_not_a_safetensors_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x80\x04\x95 this could be a pickle" * 10)
    with pytest.raises(ValueError, match=r"junk\.safetensors"):
        InMemoryImageEmbeddingStore.load_from_disk(junk)


def test_foreign_safetensors_file(tmp_path: Path) -> None:
    other = tmp_path / "model.safetensors"
    save_file({"weight": np.ones((2, 2), dtype=np.float32)}, str(other))
    with pytest.raises(ValueError, match="not a galleria store"):
        InMemoryImageEmbeddingStore.load_from_disk(other)


def _digest(tensor: str, value: str) -> Any:
    def edit(header: dict[str, Any]) -> None:
        header["tensors"][tensor] = {"sha256": value}

    return edit


def _set(key: str, value: Any) -> Any:
    def edit(header: dict[str, Any]) -> None:
        header[key] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        (_set("format_version", FORMAT_VERSION + 1), "newer"),
        (_set("format_version", "1"), "format_version"),
        (_set("format", "something-else"), "not a galleria store"),
        (_set("rows", 7), "'path_offsets' must be int64 of shape \\(8,\\)"),
        (_set("rows", -1), "'rows' must be an integer"),
        (_set("rows", "abc"), "'rows' must be an integer"),
        (_set("paths", ["a", "b"]), "unknown header key"),
        (_set("space", "manhattan"), "space"),
        (_set("dim", 7), "dim"),
        (_set("dim", -1), "dim"),
        (_set("index", {"name": "external", "params": {}}), "index"),
        (_set("index", {"name": "pickle", "params": {}}), "index"),
        (_set("index", None), "index"),
        (_set("embedder", {"config": {"type": "mystery"}}), "embedder"),
        (_set("embedder", {"config": {"type": "pixel", "size": -3}}), "embedder"),
        (_set("embedder", "pixel"), "embedder"),
        (_set("skipped", [1]), "skipped"),
        (_digest("index", "0" * 64), "'index' does not match its checksum"),
        (_digest("path_bytes", "0" * 64), "'path_bytes' does not match its checksum"),
        (_digest("path_offsets", "0" * 64), "'path_offsets' does not match its checksum"),
        (_set("tensors", {}), "tensors"),
    ],
)
def test_tampered_header(saved: Path, tmp_path: Path, edit: Any, pattern: str) -> None:
    before = saved.read_bytes()
    bad = rewrite(saved, tmp_path / "tampered.safetensors", edit_header=edit)
    with pytest.raises(ValueError, match=pattern):
        InMemoryImageEmbeddingStore.load_from_disk(bad)
    assert saved.read_bytes() == before


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        (_set("paths", ["a"] * 8), "twice"),
        (_set("paths", ["a", "b"]), "rows|match"),
        (_set("paths", "abc"), "paths"),
        (_set("paths", ["a", "b\x00"] + [f"p{i}" for i in range(6)]), "paths"),
        (_set("rows", 8), "unknown header key"),
        (_set("format_version", 3), r"unknown header key\(s\) \['paths'\]"),
    ],
)
def test_tampered_header_of_a_version_2_file(saved: Path, tmp_path: Path, edit: Any, pattern: str) -> None:
    """Files written before the paths became tensors keep every check of their header's paths."""
    bad = rewrite(saved, tmp_path / "tampered.safetensors", edit_header=edit, old=True)
    with pytest.raises(ValueError, match=pattern):
        InMemoryImageEmbeddingStore.load_from_disk(bad)
    good = rewrite(saved, tmp_path / "v2.safetensors", old=True)
    loaded, current = (InMemoryImageEmbeddingStore.load_from_disk(file) for file in (good, saved))
    assert loaded.paths == current.paths and len(loaded) == 8


def test_header_that_is_not_json(saved: Path, tmp_path: Path) -> None:
    with safe_open(str(saved), framework="numpy") as reader:
        tensors = {key: reader.get_tensor(key) for key in reader.keys()}
    bad = tmp_path / "nojson.safetensors"
    save_file(tensors, str(bad), metadata={"galleria": "{not json"})
    with pytest.raises(ValueError, match="corrupt"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)


def test_tampered_tensor_with_matching_checksum_still_refused(saved: Path, tmp_path: Path) -> None:
    """A tamperer who also fixes the checksum: the index bytes are then checked by the index reader."""

    def corrupt(tensors: dict[str, np.ndarray]) -> None:
        tensors["index"] = tensors["index"][: len(tensors["index"]) // 2].copy()

    def fix(header: dict[str, Any]) -> None:
        header["tensors"]["index"]["sha256"] = hashlib.sha256(half.tobytes()).hexdigest()

    with safe_open(str(saved), framework="numpy") as reader:
        index_bytes = reader.get_tensor("index")
    half = index_bytes[: len(index_bytes) // 2].copy()
    bad = rewrite(saved, tmp_path / "half.safetensors", edit_header=fix, edit_tensors=corrupt)
    with pytest.raises(ValueError, match="cannot be restored"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)


def test_extra_tensor_refused(saved: Path, tmp_path: Path) -> None:
    def add(tensors: dict[str, np.ndarray]) -> None:
        tensors["payload"] = np.zeros(3, dtype=np.uint8)

    bad = rewrite(saved, tmp_path / "extra.safetensors", edit_tensors=add)
    with pytest.raises(ValueError, match="payload"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)


def test_bad_path_and_argument_types(saved: Path) -> None:
    with pytest.raises(TypeError, match="path"):
        InMemoryImageEmbeddingStore.load_from_disk(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="embedder"):
        InMemoryImageEmbeddingStore.load_from_disk(saved, embedder=object())
    store = InMemoryImageEmbeddingStore.load_from_disk(saved)
    with pytest.raises(TypeError, match="path"):
        store.save_to_disk(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="path"):
        store.save_to_disk("")


def test_wrong_embedder_dimension_is_caught_at_load(saved: Path) -> None:
    with pytest.raises(ValueError, match=r"embedder \(PixelEmbedder\) outputs dimension 48, but the store"):
        InMemoryImageEmbeddingStore.load_from_disk(saved, embedder=PixelEmbedder(size=4))


@pytest.mark.parametrize("index", ["exact", "hnsw"])
def test_emptied_store_round_trips(tmp_path: Path, index: str) -> None:
    store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2), search_index=index)
    store.remove_images(["b", "a"])
    store.save_to_disk(tmp_path / "empty.safetensors")
    loaded = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "empty.safetensors")
    assert len(loaded) == 0 and loaded.paths == [] and loaded.dim == 2
    assert loaded.retrieve_by_vector([1.0, 0.0], k=3) == [[]]
    assert loaded.embeddings.shape == (0, 2)


def test_store_with_no_readable_image_round_trips(tmp_path: Path) -> None:
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    store = InMemoryImageEmbeddingStore([str(bad)], pixel_embedder(), "hnsw", skip_errors=True)
    with pytest.warns(RuntimeWarning):
        store.build_store(progress=False)
    store.save_to_disk(tmp_path / "none.safetensors")
    loaded = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "none.safetensors")
    assert len(loaded) == 0 and loaded.dim is None and loaded.skipped == [str(bad)]
