"""Tests of the Ray engine on a local Ray with 2 CPUs: bit-for-bit equality, skip_errors, a killed worker."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the galleria[ray] extra is not installed")
pytest.importorskip("pyarrow", reason="the galleria[ray] extra is not installed")

from _support.store_support import make_images, write_corrupt  # noqa: E402
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder, build_with_ray  # noqa: E402
from galleria.engines import read_shards  # noqa: E402
from galleria.images.reading import ImageReadError, read_rgb  # noqa: E402


class DiesOnceEmbedder:
    """A pixel embedder whose process exits the first time it embeds (a marker file remembers it died)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.inner = PixelEmbedder(size=8)
        self.batch_size = 4

    def embed(self, images: Sequence[Any]) -> np.ndarray:
        if not os.path.exists(self.marker):
            with open(self.marker, "w") as handle:
                handle.write(str(os.getpid()))
            os._exit(1)  # the worker dies mid-batch, like a lost node
        return np.asarray(self.inner.embed(images))


class RecordsACheckpoint:
    """A pixel embedder whose config records a local checkpoint file (as a TimmEmbedder's or a
    ClipEmbedder's built from a file does): rebuilt from that config alone it would fail."""

    def __init__(self) -> None:
        self.inner = PixelEmbedder(size=8, batch_size=5)
        self.batch_size = 5

    def embed(self, images: Sequence[Any]) -> np.ndarray:
        return np.asarray(self.inner.embed(images))

    def config(self) -> dict[str, Any]:
        return {**self.inner.config(), "checkpoint_name": "weights.pth", "checkpoint_sha256": "0" * 64}


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    # The test module's classes travel to the workers by value (the workers cannot import tests/).
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return make_images(tmp_path_factory.mktemp("ray_gallery"), 24, size=10)


def test_embeddings_equal_the_threaded_builder_bit_for_bit(
    local_ray: None, gallery: list[str], tmp_path: Path
) -> None:
    embedder = PixelEmbedder(size=8, batch_size=5)
    threaded = InMemoryImageEmbeddingStore(gallery, embedder)
    threaded.build_store(progress=False)
    store = build_with_ray(gallery, embedder, tmp_path / "shards", "hnsw", num_actors=2, rows_per_shard=10)
    assert store.paths == threaded.paths
    np.testing.assert_array_equal(store.embeddings, threaded.embeddings)
    assert store.search_index.name == "hnsw" and store.embedder is embedder
    paths, vectors, manifest = read_shards(tmp_path / "shards")
    assert paths == gallery and [shard["rows"] for shard in manifest["shards"]] == [10, 10, 4]
    assert manifest["embedder"]["type"] == "pixel"
    # The shards hold the embedder's raw output (the store normalises it for cosine).
    np.testing.assert_array_equal(vectors, embedder.embed([read_rgb(path) for path in gallery]))


def test_large_jpegs_are_drafted_as_the_threaded_builder_drafts_them(local_ray: None, tmp_path: Path) -> None:
    """One reader: Ray decodes with the store's draft size, so the vectors match an in-process build."""
    from PIL import Image

    rng = np.random.default_rng(4)
    paths = []
    for i in range(3):
        path = tmp_path / f"photo{i}.jpg"
        Image.fromarray(rng.integers(0, 256, (600, 800, 3), dtype=np.uint8)).save(path, quality=90)
        paths.append(str(path))
    embedder = PixelEmbedder(size=8)
    threaded = InMemoryImageEmbeddingStore(paths, embedder)
    threaded.build_store(progress=False)
    store = build_with_ray(paths, embedder, tmp_path / "shards", num_actors=1)
    np.testing.assert_array_equal(store.embeddings, threaded.embeddings)
    full_size = InMemoryImageEmbeddingStore.from_embeddings(
        paths, embedder.embed([read_rgb(p) for p in paths])
    )
    assert not np.array_equal(full_size.embeddings, threaded.embeddings)  # the draft changes the pixels


def test_skip_errors_and_unreadable_images(local_ray: None, gallery: list[str], tmp_path: Path) -> None:
    broken = write_corrupt(tmp_path / "broken.png")
    images = [*gallery[:5], broken, *gallery[5:8]]
    with pytest.raises(ImageReadError, match=r"broken\.png"):
        build_with_ray(images, PixelEmbedder(size=8), tmp_path / "a")
    with pytest.warns(RuntimeWarning, match=r"broken\.png"):
        store = build_with_ray(images, PixelEmbedder(size=8), tmp_path / "b", skip_errors=True)
    assert store.paths == [*gallery[:5], *gallery[5:8]] and store.skipped == [broken]
    assert read_shards(tmp_path / "b")[2]["skipped"] == [broken]


def test_a_killed_worker_is_retried_without_losing_or_duplicating_rows(
    local_ray: None, gallery: list[str], tmp_path: Path
) -> None:
    marker = str(tmp_path / "died")
    store = build_with_ray(gallery, DiesOnceEmbedder(marker), tmp_path / "shards", num_actors=1)
    assert os.path.exists(marker)  # a worker really died
    assert store.paths == gallery  # every row once, in order
    reference = InMemoryImageEmbeddingStore(gallery, PixelEmbedder(size=8))
    reference.build_store(progress=False)
    np.testing.assert_array_equal(store.embeddings, reference.embeddings)


def test_an_embedder_whose_config_names_a_checkpoint_travels_as_itself(
    local_ray: None, gallery: list[str], tmp_path: Path
) -> None:
    embedder = RecordsACheckpoint()
    with pytest.raises(ValueError):  # what an actor rebuilding it from its config would meet
        from galleria.embedders import embedder_from_config

        embedder_from_config(embedder.config())
    store = build_with_ray(gallery, embedder, tmp_path / "shards", num_actors=2)
    threaded = InMemoryImageEmbeddingStore(gallery, embedder)
    threaded.build_store(progress=False)
    assert store.paths == threaded.paths
    np.testing.assert_array_equal(store.embeddings, threaded.embeddings)


def test_argument_errors(gallery: list[str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="twice"):
        build_with_ray([gallery[0], gallery[0]], PixelEmbedder(), tmp_path)
    with pytest.raises(TypeError, match="embed"):
        build_with_ray(gallery, object(), tmp_path)
    with pytest.raises(ValueError, match="search_index"):
        build_with_ray(gallery, PixelEmbedder(), tmp_path, "annoy")
    with pytest.raises(ValueError, match="num_actors"):
        build_with_ray(gallery, PixelEmbedder(), tmp_path, num_actors=0)


def test_cli_build_engine_ray(local_ray: None, gallery: list[str], tmp_path: Path) -> None:
    from galleria.cli import main

    out = tmp_path / "store.safetensors"
    folder = str(Path(gallery[0]).parent)
    assert main(["build", folder, "--out", str(out), "--engine", "ray", "--actors", "1", "--json"]) == 0
    store = InMemoryImageEmbeddingStore.load_from_disk(out)
    assert store.paths == gallery
    assert read_shards(str(out) + ".shards")[0] == gallery


def test_many_chunks_with_an_unreadable_image_match_the_threaded_builder(
    local_ray: None, gallery: list[str], tmp_path: Path
) -> None:
    """Chunks of 5 rows (the embedder's batch), an unreadable image in the middle of one: same vectors."""
    broken = write_corrupt(tmp_path / "broken.png")
    images = [*gallery[:12], broken, *gallery[12:]]
    embedder = PixelEmbedder(size=8, batch_size=5)
    threaded = InMemoryImageEmbeddingStore(images, embedder, skip_errors=True)
    with pytest.warns(RuntimeWarning):
        threaded.build_store(progress=False)
    with pytest.warns(RuntimeWarning, match=r"broken\.png"):
        store = build_with_ray(
            images, embedder, tmp_path / "s", num_actors=2, decode_batch_size=3, skip_errors=True
        )
    assert store.paths == threaded.paths == [*gallery[:12], *gallery[12:]]
    assert store.skipped == [broken]
    np.testing.assert_array_equal(store.embeddings, threaded.embeddings)


class _FakeDataset:
    def __init__(self, tables: list[Any]) -> None:
        self.tables = tables

    def iter_batches(self, **_: Any) -> Iterator[Any]:
        return iter(self.tables)


def _chunk(start: int, rows: int, dim: int = 2, errors: Sequence[str] = ()) -> Any:
    import pyarrow as pa

    messages = list(errors) or [""] * rows
    kept = sum(1 for message in messages if not message)
    vectors = np.full((kept, dim), float(start), dtype=np.float32)
    return pa.table(
        {
            "start": pa.array([start], type=pa.int64()),
            "errors": pa.array([messages], type=pa.list_(pa.string())),
            "dim": pa.array([dim], type=pa.int64()),
            "vectors": pa.array([vectors.tobytes()], type=pa.large_binary()),
        }
    )


def test_collect_puts_chunks_in_order_and_refuses_lost_or_duplicated_ones() -> None:
    from galleria.engines.ray_build import _collect

    vectors, errors = _collect(
        _FakeDataset([_chunk(4, 3, errors=["", "bad", ""]), _chunk(0, 4)]), count=7, chunk=4
    )
    assert errors == {5: "bad"}
    np.testing.assert_array_equal(vectors[:, 0], [0, 0, 0, 0, 4, 4])
    with pytest.raises(RuntimeError, match="twice"):
        _collect(_FakeDataset([_chunk(0, 4), _chunk(0, 4), _chunk(4, 3)]), count=7, chunk=4)
    with pytest.raises(RuntimeError, match="lost"):
        _collect(_FakeDataset([_chunk(0, 4)]), count=7, chunk=4)
    with pytest.raises(RuntimeError, match="damaged"):
        _collect(_FakeDataset([_chunk(0, 3), _chunk(4, 3)]), count=7, chunk=4)
