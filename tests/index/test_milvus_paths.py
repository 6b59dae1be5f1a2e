"""A Milvus-backed store writes each row's path into its collection: other services can read it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymilvus", reason="the galleria[milvus] extra is not installed")
pytest.importorskip("milvus_lite", reason="the galleria[milvus] extra is not installed")
pytest.importorskip("pyarrow", reason="shards need pyarrow")

from pymilvus import MilvusClient

from _support.store_support import make_images, pixel_embedder
from galleria import InMemoryImageEmbeddingStore, MilvusIndex
from galleria.engines import ShardWriter, store_from_shards


def collection_rows(uri: str, collection: str) -> dict[int, str]:
    """What a service reading the collection with plain pymilvus sees: primary key → path."""
    client = MilvusClient(uri)
    try:
        entities = client.query(collection, filter="row >= 0", output_fields=["row", "path"], limit=16_384)
    finally:
        client.close()
    return {int(entity["row"]): str(entity["path"]) for entity in entities}


def test_build_add_and_remove_keep_the_collection_paths_in_step(tmp_path: Path) -> None:
    images = make_images(tmp_path / "images", 14)
    uri = str(tmp_path / "gallery.db")
    store = InMemoryImageEmbeddingStore(
        images[:10], pixel_embedder(), search_index=MilvusIndex(uri, "photos", space="l2")
    )
    store.build_store(progress=False)
    assert sorted(collection_rows(uri, "photos").values()) == sorted(store.paths)
    store.add_images(images[10:], progress=False)
    store.remove_images([images[1], images[11]])
    rows = collection_rows(uri, "photos")
    assert sorted(rows.values()) == sorted(store.paths) and len(rows) == 12
    # Row i of the store is the entity whose key is the index's i-th live key, path and all.
    index = store.search_index
    assert isinstance(index, MilvusIndex)
    assert index.paths(np.arange(len(store))) == store.paths
    # Each entity's vector is its image's embedding.
    found = store.retrieve_by_vector(store.embeddings_of([images[12]]), 1)[0][0]
    assert found.path == images[12]


def test_from_embeddings_and_store_from_shards_write_paths(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(30, 6)).astype(np.float32)
    paths = [f"gallery/{i:03d}.jpg" for i in range(30)]
    uri = str(tmp_path / "g.db")
    InMemoryImageEmbeddingStore.from_embeddings(paths, vectors, search_index=MilvusIndex(uri, "direct"))
    assert sorted(collection_rows(uri, "direct").values()) == paths
    writer = ShardWriter(tmp_path / "shards", rows_per_shard=8)
    writer.write(paths, vectors)
    writer.close(skipped=["gallery/broken.jpg"])
    store = store_from_shards(tmp_path / "shards", MilvusIndex(uri, "sharded"))
    assert store.skipped == ["gallery/broken.jpg"]  # the public constructor path records them
    assert sorted(collection_rows(uri, "sharded").values()) == paths


def test_from_embeddings_records_skipped_paths() -> None:
    store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2), skipped=["c"])
    assert store.skipped == ["c"]
    with pytest.raises(TypeError, match="skipped"):
        InMemoryImageEmbeddingStore.from_embeddings(["a"], np.eye(1), skipped=[3])  # type: ignore[list-item]
