"""Tests of the IVF-PQ index: parameters, recall, kept vectors, removal, files, parallel build."""

from __future__ import annotations

import json

import numpy as np
import pytest

from galleria import InMemoryImageEmbeddingStore
from galleria.index import (
    ExactIndex,
    IvfPqIndex,
    _serial,
    create_index,
    index_from_bytes,
    validate_index_params,
)
from galleria.index import ivfpq as ivfpq_module
from galleria.index._ivfpq_params import default_subquantizers


def clustered(count: int, dim: int, seed: int = 0, centres: int = 20) -> np.ndarray:
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(centres, dim))
    labels = rng.integers(0, centres, size=count)
    return (means[labels] + 0.3 * rng.normal(size=(count, dim))).astype(np.float32)


def recall_at(approx: np.ndarray, exact: np.ndarray) -> float:
    hits = [len(set(a.tolist()) & set(e.tolist())) for a, e in zip(approx, exact, strict=True)]
    return float(np.mean(hits)) / exact.shape[1]


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    return clustered(3000, 32)


SMALL = {"lists": 16, "bits": 6, "probe_lists": 4, "num_threads": 1}


def test_parameters_are_checked_by_name() -> None:
    checked = validate_index_params("ivfpq", {"lists": 64, "keep_vectors": True})
    assert checked["lists"] == 64 and checked["keep_vectors"] is True and checked["vector_dtype"] == "float16"
    with pytest.raises(ValueError, match="unknown ivfpq index parameter"):
        validate_index_params("ivfpq", {"nlist": 64})
    with pytest.raises(TypeError, match="'lists'"):
        validate_index_params("ivfpq", {"lists": 2.0})
    with pytest.raises(TypeError, match="'opq'"):
        validate_index_params("ivfpq", {"opq": 1})
    with pytest.raises(ValueError, match="'bits'"):
        validate_index_params("ivfpq", {"bits": 17})
    with pytest.raises(ValueError, match="vector_dtype"):
        validate_index_params("ivfpq", {"vector_dtype": "int8"})
    with pytest.raises(ValueError, match="needs keep_vectors=True"):
        IvfPqIndex(rerank_candidates=10)


def test_training_needs_enough_vectors_and_a_dividing_subquantizer_count(data: np.ndarray) -> None:
    index = IvfPqIndex("l2", lists=16, bits=8)
    with pytest.raises(ValueError, match="at least max\\(lists, 2\\*\\*bits\\) = 256"):
        index.add(data[:100])
    assert not index.is_trained and len(index) == 0 and index.dim is None
    with pytest.raises(ValueError, match="must divide the dimension 32"):
        IvfPqIndex("l2", subquantizers=5, **SMALL).add(data)
    assert default_subquantizers(32) == 32  # one sub-quantizer per dimension


@pytest.mark.parametrize("space", ["cosine", "l2"])
def test_recall_against_exact_and_exact_reranking(data: np.ndarray, space: str) -> None:
    queries = data[:200] + 0.05
    exact = ExactIndex(space)
    exact.add(data)
    truth, _ = exact.search(queries, 10)
    plain = IvfPqIndex(space, **SMALL)
    plain.add(data)
    reranked = IvfPqIndex(space, keep_vectors=True, vector_dtype="float32", rerank_candidates=100, **SMALL)
    reranked.add(data)
    plain_recall = recall_at(plain.search(queries, 10)[0], truth)
    reranked_recall = recall_at(reranked.search(queries, 10)[0], truth)
    assert plain_recall > 0.2
    assert reranked_recall > 0.9 and reranked_recall > plain_recall
    # Re-ranked scores are the exact distances of the rows returned.
    ids, scores = reranked.search(queries[:5], 3)
    expected = exact.search(queries[:5], len(exact))
    lookup = [dict(zip(i.tolist(), s.tolist(), strict=True)) for i, s in zip(*expected, strict=True)]
    for row in range(5):
        np.testing.assert_allclose(scores[row], [lookup[row][j] for j in ids[row]], rtol=1e-4, atol=1e-5)


def test_seeded_training_is_reproducible(data: np.ndarray) -> None:
    first, second, other = (IvfPqIndex("l2", train_size=1000, seed=s, **SMALL) for s in (3, 3, 4))
    for index in (first, second, other):
        index.add(data)
    assert first.to_bytes() == second.to_bytes()
    assert first.to_bytes() != other.to_bytes()


def test_reconstruct_exact_copy_or_pq_approximation(data: np.ndarray) -> None:
    rows = np.array([5, 0, 5])
    kept32 = IvfPqIndex("l2", keep_vectors=True, vector_dtype="float32", **SMALL)
    kept16 = IvfPqIndex("l2", keep_vectors=True, **SMALL)
    approx = IvfPqIndex("l2", **SMALL)
    for index in (kept32, kept16, approx):
        index.add(data)
    np.testing.assert_array_equal(kept32.reconstruct(rows), data[rows])
    np.testing.assert_allclose(kept16.reconstruct(rows), data[rows], rtol=1e-3, atol=1e-3)
    error = np.linalg.norm(approx.reconstruct(rows) - data[rows], axis=1)
    assert (error > 1e-3).all() and (error < np.linalg.norm(data[rows], axis=1)).all()
    assert approx.code_size == 32 * 6 // 8  # subquantizers: dim by default


@pytest.mark.parametrize("keep", [False, True])
def test_remove_renumbers_and_add_continues(data: np.ndarray, keep: bool) -> None:
    index = IvfPqIndex("l2", keep_vectors=keep, **SMALL)
    index.add(data[:2000])
    before = index.reconstruct(np.array([10, 11]))
    index.remove(np.array([0, 3, 3, 7]))
    assert len(index) == 1997
    np.testing.assert_array_equal(index.reconstruct(np.array([7, 8])), before)  # rows 10, 11 moved down 3
    index.add(data[2000:])
    assert len(index) == 2997
    ids, _ = index.search(index.reconstruct(np.array([2996])), 1)
    assert ids.max() < len(index) and ids.min() >= 0
    with pytest.raises(ValueError, match="rows must lie"):
        index.remove(np.array([2997]))


def test_few_rows_in_probed_lists_still_returns_k(data: np.ndarray) -> None:
    index = IvfPqIndex("l2", lists=64, bits=6, probe_lists=1, num_threads=1)
    index.add(data[:1000])
    ids, scores = index.search(data[:4], 200)
    assert ids.shape == (4, 200) and (ids >= 0).all()
    assert (np.diff(scores, axis=1) >= 0).all()
    assert all(len(set(row.tolist())) == 200 for row in ids)


@pytest.mark.parametrize(
    "params",
    [
        SMALL,
        {**SMALL, "opq": True, "train_size": 1000},
        {**SMALL, "keep_vectors": True, "rerank_candidates": 50},
        {**SMALL, "keep_vectors": True, "vector_dtype": "float32"},
    ],
)
def test_round_trip_gives_identical_results(data: np.ndarray, params: dict[str, object]) -> None:
    index = IvfPqIndex("cosine", **params)  # type: ignore[arg-type]
    index.add(data)
    index.reconstruct(np.array([1]))  # builds faiss's id lookup table, which is not written
    index.remove(np.array([2, 9]))
    copy = index_from_bytes("ivfpq", index.to_bytes())
    assert isinstance(copy, IvfPqIndex) and copy.params() == index.params() and len(copy) == len(index)
    for a, b in zip(index.search(data[:30], 7), copy.search(data[:30], 7), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(index.reconstruct(np.arange(20)), copy.reconstruct(np.arange(20)))
    empty = IvfPqIndex.from_bytes(IvfPqIndex("l2").to_bytes())
    assert len(empty) == 0 and empty.dim is None


def test_tampered_files_are_rejected(data: np.ndarray) -> None:
    index = IvfPqIndex("l2", keep_vectors=True, **SMALL)
    index.add(data)
    meta, arrays = _serial.unpack(index.to_bytes(), "ivfpq")
    cases = {
        "ids in its inverted lists": (meta, {**arrays, "live": arrays["live"][:-1]}),
        "kept": (meta, {**arrays, "kept": arrays["kept"][:-1]}),
        "does not match its faiss index": ({**meta, "params": {**meta["params"], "lists": 32}}, arrays),
        "invalid parameters": ({**meta, "params": {**meta["params"], "bogus": 1}}, arrays),
        # truncated faiss bytes: refused by galleria's walk before faiss parses anything
        "more than the data holds|runs past the end": (meta, {**arrays, "faiss": arrays["faiss"][:100]}),
    }
    for message, (bad_meta, bad_arrays) in cases.items():
        with pytest.raises(ValueError, match=message):
            IvfPqIndex.from_bytes(_serial.pack("ivfpq", json.loads(json.dumps(bad_meta)), bad_arrays))
    hnsw_bytes = create_index("hnsw", "l2").to_bytes()
    with pytest.raises(ValueError, match="kind"):
        IvfPqIndex.from_bytes(hnsw_bytes)


def test_parallel_build_equals_serial(data: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ivfpq_module, "MIN_ROWS_PER_WORKER", 500)
    serial = IvfPqIndex("cosine", keep_vectors=True, **SMALL)
    parallel = IvfPqIndex("cosine", keep_vectors=True, build_workers=2, **SMALL)
    serial.add(data[:1000])
    parallel.add(data[:1000])  # trains, then encodes two shards in worker processes and merges them
    serial.add(data[1000:])
    parallel.add(data[1000:])
    assert len(parallel) == len(serial) == 3000
    for a, b in zip(serial.search(data[:50], 10), parallel.search(data[:50], 10), strict=True):
        np.testing.assert_array_equal(a, b)
    plain_serial, plain_parallel = IvfPqIndex("l2", **SMALL), IvfPqIndex("l2", build_workers=2, **SMALL)
    plain_serial.add(data)
    plain_parallel.add(data)
    rows = np.array([0, 1499, 1500, 2999])
    np.testing.assert_array_equal(plain_serial.reconstruct(rows), plain_parallel.reconstruct(rows))


def test_store_with_ivfpq_saves_loads_and_expands(tmp_path: object, data: np.ndarray) -> None:
    paths = [f"img/{i:04d}.png" for i in range(len(data))]
    params = {**SMALL, "keep_vectors": True, "rerank_candidates": 50}
    store = InMemoryImageEmbeddingStore.from_embeddings(
        paths, data, search_index="ivfpq", index_params=params
    )
    target = f"{tmp_path}/gallery.safetensors"
    store.save_to_disk(target)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(target)
    assert loaded.search_index.name == "ivfpq" and loaded.search_index.params() == store.search_index.params()
    for expand in (False, True):
        a = store.retrieve_by_vector(data[:5], 5, query_expansion=expand, expansion_neighbors=10)
        b = loaded.retrieve_by_vector(data[:5], 5, query_expansion=expand, expansion_neighbors=10)
        assert a == b
    plain = store.retrieve_by_vector(data[:5], 5)
    exact = InMemoryImageEmbeddingStore.from_embeddings(paths, data).retrieve_by_vector(data[:5], 5)
    overlap = [len({c.path for c in p} & {c.path for c in e}) for p, e in zip(plain, exact, strict=True)]
    assert sum(overlap) >= 15  # approximate (6-bit codes), yet mostly the exact store's answers
