"""The remaining tampered-header and tampered-index cases of a store file: a ValueError naming the file."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _support.store_files import read_parts, write_sealed
from _support.store_support import make_images, pixel_embedder
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.index import _serial


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return make_images(tmp_path_factory.mktemp("edges"), 6)


@pytest.fixture
def saved(gallery: list[str], tmp_path: Path) -> Path:
    store = InMemoryImageEmbeddingStore(gallery, pixel_embedder(), "hnsw")
    store.build_store(progress=False)
    file = tmp_path / "good.safetensors"
    store.save_to_disk(file)
    return file


def tampered(saved: Path, tmp_path: Path, **changes: Any) -> Path:
    header, tensors = read_parts(saved)
    header.update(changes)
    return write_sealed(tmp_path / "crafted.safetensors", header, tensors)


def test_skipped_of_the_wrong_type(saved: Path, tmp_path: Path) -> None:
    for value in (5, "a", [1], None):
        file = tampered(saved, tmp_path, skipped=value)
        with pytest.raises(ValueError, match=r"crafted\.safetensors.*header key 'skipped'"):
            InMemoryImageEmbeddingStore.load_from_disk(file)


@pytest.mark.parametrize("key", ["dim", "format_version"])
def test_integers_of_thousands_of_digits_name_the_file(saved: Path, tmp_path: Path, key: str) -> None:
    header, tensors = read_parts(saved)
    import json

    text = json.dumps(header).replace(f'"{key}": {header[key]}', f'"{key}": ' + "9" * 5000)
    file = tmp_path / "crafted.safetensors"
    from safetensors.numpy import save_file

    save_file(tensors, str(file), metadata={"galleria": text, "galleria_sha256": "0" * 64})
    with pytest.raises(ValueError, match=r"crafted\.safetensors.* corrupt galleria header"):
        InMemoryImageEmbeddingStore.load_from_disk(file)
    # 4000 digits still parse: refused as out of range, with a short message naming the key
    file = tampered(saved, tmp_path, **{key: int("9" * 4000)})
    with pytest.raises(ValueError, match=rf"crafted\.safetensors.*'{key}'.*a huge integer") as caught:
        InMemoryImageEmbeddingStore.load_from_disk(file)
    assert len(str(caught.value)) < 300


def test_dimension_mismatch_names_the_file(saved: Path) -> None:
    with pytest.raises(ValueError, match=r"good\.safetensors.*outputs dimension 48.*dimension 192"):
        InMemoryImageEmbeddingStore.load_from_disk(saved, embedder=PixelEmbedder(size=4))


def test_foreign_embedder_config_is_checked_before_anything_is_embedded(saved: Path, tmp_path: Path) -> None:
    """A config of pixel 1024² with batch 4096 once made ``add`` allocate gigabytes before any check."""
    for config, problem in (
        ({"type": "pixel", "size": [1024, 1024], "batch_size": 4096}, r"cannot rebuild the saved embedder"),
        ({"type": "pixel", "size": [160, 160], "grayscale": True, "batch_size": 4096}, r"batch_size"),
        ({"type": "pixel", "size": 16, "batch_size": 4096}, r"saved embedder .* outputs dimension 768"),
    ):
        file = tampered(saved, tmp_path, embedder={"config": config})
        with pytest.raises(ValueError, match=rf"crafted\.safetensors.*{problem}"):
            InMemoryImageEmbeddingStore.load_from_disk(file)


@pytest.mark.parametrize("shape", [[2**64], [2**63, 2], [2**32, 2**32, 2], [-1]])
def test_index_container_shape_that_overflows(saved: Path, tmp_path: Path, shape: list[int]) -> None:
    header, tensors = read_parts(saved)
    blob = tensors["index"].tobytes()
    length = struct.unpack_from("<I", blob, 8)[0]
    container = __import__("json").loads(blob[12 : 12 + length])
    container["arrays"][0]["shape"] = shape
    encoded = __import__("json").dumps(container, separators=(",", ":")).encode()
    forged = blob[:8] + struct.pack("<I", len(encoded)) + encoded + blob[12 + length :]
    tensors["index"] = np.frombuffer(forged, dtype=np.uint8)
    file = write_sealed(tmp_path / "crafted.safetensors", header, tensors)
    with pytest.raises(ValueError, match=r"crafted\.safetensors.*(shape|invalid)"):
        InMemoryImageEmbeddingStore.load_from_disk(file)


def test_tampered_hnsw_graph_in_a_store_is_refused_at_load(saved: Path, tmp_path: Path) -> None:
    """A valid-digest store whose HNSW neighbour id is ntotal: faiss would write out of bounds."""
    header, tensors = read_parts(saved)
    meta, arrays = _serial.unpack(tensors["index"].tobytes(), "hnsw")
    graph = bytearray(arrays["graph"].tobytes())
    position = 4 + 4 + 8 + 16 + 1 + 4
    for item in (8, 4, 4, 8):  # probabilities, cumulative counts, levels, offsets
        (count,) = struct.unpack_from("<Q", graph, position)
        position += 8 + count * item
    struct.pack_into("<i", graph, position + 8, 6)  # the first neighbour: id 6 of 6 nodes
    arrays["graph"] = np.frombuffer(bytes(graph), dtype=np.uint8)
    tensors["index"] = np.frombuffer(_serial.pack("hnsw", meta, arrays), dtype=np.uint8)
    file = write_sealed(tmp_path / "crafted.safetensors", header, tensors)
    with pytest.raises(ValueError, match=r"crafted\.safetensors.*HNSW neighbour ids must lie in \[-1, 6\)"):
        InMemoryImageEmbeddingStore.load_from_disk(file)


def test_ivfpq_store_with_removed_rows_round_trips(tmp_path: Path) -> None:
    """Removed IVF-PQ rows stay masked: their ids exceed ntotal but stay below the total ever added."""
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(400, 16)).astype(np.float32)
    paths = [f"/g/{i}.png" for i in range(400)]
    store = InMemoryImageEmbeddingStore.from_embeddings(
        paths, vectors, search_index="ivfpq", index_params={"lists": 8, "bits": 4, "subquantizers": 4}
    )
    store.remove_images(paths[:150])
    file = tmp_path / "ivfpq.safetensors"
    store.save_to_disk(file)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    query = vectors[200:203]
    before = [[c.path for c in row] for row in store.retrieve_by_vector(query, k=5)]
    after = [[c.path for c in row] for row in loaded.retrieve_by_vector(query, k=5)]
    assert before == after
