"""Tests of MilvusIndex against Milvus Lite (pymilvus + milvus-lite, the galleria[milvus] extra)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymilvus", reason="the galleria[milvus] extra is not installed")
pytest.importorskip("milvus_lite", reason="the galleria[milvus] extra is not installed")

from safetensors import safe_open
from sklearn.datasets import load_digits

from galleria import InMemoryImageEmbeddingStore, MilvusIndex
from galleria.index import ExactIndex, index_from_bytes


@pytest.fixture(scope="module")
def digits() -> tuple[list[str], np.ndarray]:
    vectors = load_digits().data.astype(np.float32)
    return [f"digits/{i:04d}.png" for i in range(len(vectors))], vectors


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return str(tmp_path / "gallery.db")


def _candidates(results: list[list[object]]) -> list[list[tuple[str, float]]]:
    return [[(c.path, round(c.score, 3)) for c in hits] for hits in results]  # type: ignore[attr-defined]


@pytest.mark.parametrize("space", ["cosine", "l2"])
def test_flat_store_equals_the_exact_store_on_the_digits(
    digits: tuple[list[str], np.ndarray], uri: str, space: str
) -> None:
    paths, vectors = digits
    exact = InMemoryImageEmbeddingStore.from_embeddings(paths, vectors, space=space)
    milvus = InMemoryImageEmbeddingStore.from_embeddings(
        paths, vectors, search_index=MilvusIndex(uri, f"digits_{space}", space=space)
    )
    queries = vectors[::97] + 0.5
    expected = exact.retrieve_by_vector(queries, 10)
    got = milvus.retrieve_by_vector(queries, 10)
    assert [[c.path for c in hits] for hits in got] == [[c.path for c in hits] for hits in expected]
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose([c.score for c in a], [c.score for c in b], rtol=1e-4, atol=1e-4)
    # αQE and re-ranking read candidate vectors back from Milvus.
    np.testing.assert_allclose(milvus.embeddings_of(paths[:3]), exact.embeddings_of(paths[:3]), atol=1e-6)
    expanded = milvus.retrieve_by_vector(queries, 5, query_expansion=True, expansion_neighbors=10)
    reference = exact.retrieve_by_vector(queries, 5, query_expansion=True, expansion_neighbors=10)
    assert [[c.path for c in hits] for hits in expanded] == [[c.path for c in hits] for hits in reference]


@pytest.mark.parametrize(
    ("index_type", "params"),
    [("HNSW", {"graph_degree": 16, "search_candidates": 64}), ("IVF_PQ", {"lists": 16, "subquantizers": 16})],
)
def test_hnsw_and_ivf_pq_find_the_exact_neighbours(
    digits: tuple[list[str], np.ndarray], uri: str, index_type: str, params: dict[str, int]
) -> None:
    _, vectors = digits
    index = MilvusIndex(uri, index_type.lower(), space="l2", index_type=index_type, index_params=params)
    index.add(vectors)
    exact = ExactIndex("l2")
    exact.add(vectors)
    found, _ = index.search(vectors[:100], 10)
    truth, _ = exact.search(vectors[:100], 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found.tolist(), truth.tolist(), strict=True)])
    assert recall >= 0.8
    assert index.params()["index_params"]["lists" if index_type == "IVF_PQ" else "graph_degree"] == 16


def test_add_remove_renumber_and_paths(uri: str) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(40, 8)).astype(np.float32)
    index = MilvusIndex(uri, "rows", space="l2")
    index.add(vectors[:30], paths=[f"p{i}" for i in range(30)])
    index.add(vectors[30:])
    index.remove(np.array([0, 5, 5]))
    assert len(index) == 38
    np.testing.assert_array_equal(index.reconstruct(np.array([4, 5])), vectors[[6, 7]])
    assert index.paths(np.array([0, 27, 28])) == ["p1", "p29", ""]
    ids, scores = index.search(vectors[[7]], 1)
    assert ids.tolist() == [[5]] and scores[0, 0] == pytest.approx(0.0, abs=1e-5)


def test_save_records_uri_and_collection_and_loading_reconnects(
    digits: tuple[list[str], np.ndarray], uri: str, tmp_path: Path
) -> None:
    paths, vectors = digits
    index = MilvusIndex(uri, "saved", token="secret-token", index_type="HNSW")
    store = InMemoryImageEmbeddingStore.from_embeddings(paths[:300], vectors[:300], search_index=index)
    store.remove_images(paths[:2])
    target = tmp_path / "store.safetensors"
    store.save_to_disk(target)
    with safe_open(str(target), framework="numpy") as reader:
        header = json.loads(reader.metadata()["galleria"])
        raw = reader.get_tensor("index").tobytes()
    assert header["index"]["name"] == "milvus"
    assert header["index"]["params"]["uri"] == uri and header["index"]["params"]["collection"] == "saved"
    assert b"secret-token" not in target.read_bytes() and b"secret-token" not in raw
    with pytest.raises(ValueError, match=r"never chooses what galleria connects to.*connect=True"):
        InMemoryImageEmbeddingStore.load_from_disk(target)  # the file alone never makes galleria connect
    loaded = InMemoryImageEmbeddingStore.load_from_disk(target, connect=True)
    assert isinstance(loaded.search_index, MilvusIndex) and len(loaded) == 298
    assert _candidates(loaded.retrieve_by_vector(vectors[5:8], 5)) == _candidates(
        store.retrieve_by_vector(vectors[5:8], 5)
    )
    # The collection changed behind the file's back, or vanished: clear errors, nothing is created.
    index.remove(np.array([0]))
    with pytest.raises(ValueError, match="differ from the 298 rows"):
        InMemoryImageEmbeddingStore.load_from_disk(target, connect=True)
    index.drop()
    with pytest.raises(ValueError, match="does not exist"):
        InMemoryImageEmbeddingStore.load_from_disk(target, connect=True)


def test_clear_errors(uri: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"folder .* does not exist"):
        MilvusIndex(str(tmp_path / "missing" / "x.db"), "c")
    with pytest.raises(ValueError, match=r"ending in '\.db'"):
        MilvusIndex(str(tmp_path / "x.sqlite"), "c")
    with pytest.raises(TypeError, match="collection"):
        MilvusIndex(uri, "")
    with pytest.raises(ValueError, match="does not exist"):
        MilvusIndex(uri, "absent", create=False)
    with pytest.raises(ValueError, match="index_type"):
        MilvusIndex(uri, "c", index_type="DISKANN")
    with pytest.raises(ValueError, match="unknown parameter"):
        MilvusIndex(uri, "c", index_type="HNSW", index_params={"lists": 8})
    index = MilvusIndex(uri, "dims")
    index.add(np.ones((3, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="dimension 5"):
        index.add(np.ones((2, 5), dtype=np.float32))
    with pytest.raises(ValueError, match="dimension 5"):
        MilvusIndex(uri, "dims").search(np.ones((1, 5), dtype=np.float32), 1)
    with pytest.raises(ValueError, match="metric"):
        MilvusIndex(uri, "dims", space="l2")
    assert len(MilvusIndex(uri, "dims")) == 3  # an existing collection is reused, rows in key order
    with pytest.raises(ValueError, match="kind"):
        index_from_bytes("milvus", ExactIndex("l2").to_bytes())
