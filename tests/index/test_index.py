"""Tests of the search indexes: exact oracle, HNSW, wrapped faiss indexes, registry, serialisation."""

from __future__ import annotations

import os

import faiss
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from galleria.distances import pairwise_distances, prepare_vectors
from galleria.index import (
    HNSW_PARAMETERS,
    INDEX_NAMES,
    SPACES,
    ExactIndex,
    ExternalSearchIndex,
    HnswIndex,
    SearchIndex,
    create_index,
    index_from_bytes,
    validate_index_params,
)
from galleria.index import exact as exact_module
from galleria.index.exact import top_k_smallest

RNG = np.random.default_rng(1234)


def brute_force(
    gallery: np.ndarray, queries: np.ndarray, k: int, space: str
) -> tuple[np.ndarray, np.ndarray]:
    """A literal oracle: every distance, then a sort of each row by (distance, row)."""
    distances = pairwise_distances(prepare_vectors(queries, space), prepare_vectors(gallery, space), space)
    ids, scores = [], []
    for row in distances:
        order = sorted(range(len(row)), key=lambda j: (row[j], j))[:k]
        ids.append(order)
        scores.append([row[j] for j in order])
    return np.array(ids, dtype=np.int64).reshape(len(queries), -1), np.array(scores, np.float32).reshape(
        len(queries), -1
    )


def gaussian(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, truth, strict=True)]))


# --------------------------------------------------------------------------- exact index


@given(
    data=st.data(),
    space=st.sampled_from(SPACES),
    n=st.integers(1, 25),
    q=st.integers(1, 4),
    dim=st.integers(1, 4),
    k=st.integers(1, 30),
)
def test_exact_matches_brute_force_with_ties(
    data: st.DataObject, space: str, n: int, q: int, dim: int, k: int
) -> None:
    # Small integers make exact ties (equal distances) frequent.
    gallery = data.draw(hnp.arrays(np.float32, (n, dim), elements=st.integers(-2, 2).map(float)))
    queries = data.draw(hnp.arrays(np.float32, (q, dim), elements=st.integers(-2, 2).map(float)))
    index = ExactIndex(space)
    index.add(gallery)
    ids, scores = index.search(queries, k)
    expected_ids, expected_scores = brute_force(gallery, queries, k, space)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    assert ids.shape == (q, min(k, n))
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(scores, expected_scores)


@given(
    matrix=hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=2, max_dims=2, max_side=40),
        elements=st.integers(0, 3).map(float),
    ),
    k=st.integers(1, 45),
)
def test_top_k_smallest_equals_stable_sort(matrix: np.ndarray, k: int) -> None:
    ids, values = top_k_smallest(matrix, k)
    order = np.argsort(matrix, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(ids, order)
    np.testing.assert_array_equal(values, np.take_along_axis(matrix, order, axis=1))


@pytest.mark.parametrize("space", SPACES)
def test_exact_blocked_search_equals_single_block(space: str, monkeypatch: pytest.MonkeyPatch) -> None:
    gallery, queries = gaussian(300, 8, 1), gaussian(37, 8, 2)
    index = ExactIndex(space)
    index.add(gallery)
    whole = index.search(queries, 7)
    monkeypatch.setattr(exact_module, "BLOCK_ENTRIES", 300 * 5)  # 5 queries per block
    blocked = index.search(queries, 7)
    np.testing.assert_array_equal(whole[0], blocked[0])
    np.testing.assert_allclose(whole[1], blocked[1], rtol=1e-5, atol=1e-6)
    expected_ids, expected_scores = brute_force(gallery, queries, 7, space)
    np.testing.assert_array_equal(whole[0], expected_ids)
    np.testing.assert_allclose(whole[1], expected_scores, rtol=1e-5, atol=1e-5)


def test_exact_scores_per_space() -> None:
    gallery = np.array([[3.0, 4.0], [1.0, 0.0]], dtype=np.float32)
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    for space, expected in {"cosine": [0.0, 0.4], "ip": [-2.0, 0.0], "l2": [0.0, 20.0]}.items():
        index = ExactIndex(space)
        index.add(gallery)
        _, scores = index.search(query, 2)
        np.testing.assert_allclose(sorted(scores[0]), expected, atol=1e-6)
    cosine = ExactIndex("cosine")
    cosine.add(gallery)
    np.testing.assert_allclose(cosine.reconstruct(np.array([0])), [[0.6, 0.8]], atol=1e-6)


def test_exact_add_grows_and_keeps_order() -> None:
    index = ExactIndex("l2")
    parts = [gaussian(n, 4, seed) for seed, n in enumerate([1, 20, 0, 50, 3])]
    for part in parts:
        index.add(part)
    allv = np.concatenate(parts)
    assert len(index) == len(allv)
    np.testing.assert_array_equal(index.reconstruct(np.arange(len(allv))), allv)
    np.testing.assert_array_equal(index.vectors, allv)
    with pytest.raises(ValueError):
        index.vectors[0, 0] = 1.0


# --------------------------------------------------------------------------- validation, all indexes


def all_indexes(space: str = "l2") -> list[SearchIndex]:
    return [
        ExactIndex(space),
        HnswIndex(space, graph_degree=8),
        ExternalSearchIndex.from_faiss_index(faiss.IndexFlatL2(6), name="flat"),
    ]


@pytest.mark.parametrize("index", all_indexes(), ids=lambda index: type(index).__name__)
def test_input_validation(index: SearchIndex) -> None:
    assert isinstance(index, SearchIndex)
    ids, scores = index.search(np.zeros((3, 6), np.float32), 5)  # empty index
    assert ids.shape == (3, 0) and scores.shape == (3, 0) and ids.dtype == np.int64
    index.add(gaussian(10, 6))
    with pytest.raises(ValueError, match=r"dimension 5.*dimension 6"):
        index.add(gaussian(2, 5))
    with pytest.raises(ValueError, match="2-D"):
        index.add(np.zeros(6, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        index.add(np.full((1, 6), np.nan, np.float32))
    with pytest.raises(TypeError, match="dtype"):
        index.add(np.ones((1, 6), bool))
    with pytest.raises(TypeError, match="dtype"):
        index.add(np.array([["a"] * 6]))
    assert len(index) == 10  # nothing was added by the failed calls
    for bad_k, error in [
        (0, ValueError),
        (-1, ValueError),
        (1.5, TypeError),
        (True, TypeError),
        ("3", TypeError),
    ]:
        with pytest.raises(error, match="k"):
            index.search(gaussian(1, 6), bad_k)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dimension 4"):
        index.search(gaussian(1, 4), 3)
    with pytest.raises(ValueError, match="2-D"):
        index.search(np.zeros(6, np.float32), 3)
    with pytest.raises(ValueError, match="NaN"):
        index.search(np.full((1, 6), np.inf, np.float32), 3)
    ids, scores = index.search(gaussian(2, 6, 5), np.int64(50))
    assert ids.shape == (2, 10) and sorted(ids[0].tolist()) == list(range(10))
    with pytest.raises(ValueError, match="rows"):
        index.reconstruct(np.array([10]))
    with pytest.raises(ValueError, match="rows"):
        index.remove(np.array([-1]))
    with pytest.raises(TypeError, match="rows"):
        index.remove(np.array([0.5]))
    assert len(index) == 10
    assert index.reconstruct(np.array([], dtype=np.int64)).shape == (0, 6)


def test_space_validation() -> None:
    with pytest.raises(ValueError, match="space"):
        ExactIndex("euclid")
    with pytest.raises(TypeError, match="space"):
        HnswIndex(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="space"):
        create_index("exact", "dot", None)


# --------------------------------------------------------------------------- remove / renumber


def check_remove_semantics(index: SearchIndex, vectors: np.ndarray, removals: list[list[int]]) -> None:
    index.add(vectors)
    kept = list(range(len(vectors)))
    for rows in removals:
        index.remove(np.array(rows))
        kept = [original for position, original in enumerate(kept) if position not in set(rows)]
        assert len(index) == len(kept)
        expected = prepare_vectors(vectors[kept], index.space)
        np.testing.assert_allclose(index.reconstruct(np.arange(len(kept))), expected, rtol=1e-6, atol=1e-6)
        ids, _ = index.search(vectors, len(vectors))
        assert ids.shape == (len(vectors), len(kept))
        assert (ids >= 0).all() and (ids < len(kept)).all()
        expected_first, _ = brute_force(vectors[kept], vectors, 1, index.space)
        np.testing.assert_array_equal(ids[:, :1], expected_first)
        if index.space != "ip":  # each live vector finds itself first
            assert [ids[original, 0] for original in kept] == list(range(len(kept)))
        for row in ids:
            assert len(set(row.tolist())) == len(kept)


@pytest.mark.parametrize("space", SPACES)
def test_exact_remove(space: str) -> None:
    check_remove_semantics(ExactIndex(space), gaussian(30, 8, 3), [[3, 7, 7], [0], [], [25, 1]])


@pytest.mark.parametrize("space", SPACES)
def test_hnsw_remove_masked_then_compacted(space: str) -> None:
    index = HnswIndex(space, graph_degree=8)
    vectors = gaussian(40, 8, 4)
    check_remove_semantics(index, vectors[:40], [[3, 7]])
    assert index.removed_count == 2  # masked, not yet compacted
    index.remove(np.arange(10, 20))  # more than a quarter masked → compacted
    assert index.removed_count == 0 and len(index) == 28
    assert index.faiss_index.ntotal == 28


def test_hnsw_heavily_masked_still_returns_k_exact_rows() -> None:
    index = HnswIndex("l2", graph_degree=4, search_candidates=1)
    index.compact_fraction = 1.0  # never compact: the graph walk must skip most rows
    vectors = gaussian(200, 8, 5)
    index.add(vectors)
    index.remove(np.arange(0, 195))
    assert len(index) == 5 and index.removed_count == 195
    ids, scores = index.search(vectors[195:], 5)
    expected_ids, expected_scores = brute_force(vectors[195:], vectors[195:], 5, "l2")
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-4, atol=1e-4)
    index.add(vectors[:2])  # adds after masking get the next positions
    np.testing.assert_allclose(index.reconstruct(np.array([5, 6])), vectors[:2])
    assert index.search(vectors[:1], 1)[0][0, 0] == 5


def test_external_remove_native_and_masked() -> None:
    vectors = gaussian(30, 8, 6)
    flat = ExternalSearchIndex.from_faiss_index(faiss.IndexFlatL2(8), name="flat")
    check_remove_semantics(flat, vectors, [[3, 7], [0, 29 - 2]])
    assert flat.faiss_index.ntotal == len(flat)  # removed natively
    raw = faiss.IndexHNSWFlat(8, 8)
    raw.hnsw.efSearch = 64  # the user's own setting: wide enough for k = 30
    hnsw = ExternalSearchIndex.from_faiss_index(raw, name="user-hnsw")
    check_remove_semantics(hnsw, vectors, [[3, 7], [0, 10, 11]])
    assert hnsw.faiss_index.ntotal == 30  # masked


# --------------------------------------------------------------------------- HNSW


@pytest.fixture(scope="module")
def clustered() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(20, 32))
    gallery = centres[rng.integers(0, 20, 3000)] + 0.6 * rng.normal(size=(3000, 32))
    queries = centres[rng.integers(0, 20, 60)] + 0.6 * rng.normal(size=(60, 32))
    return gallery.astype(np.float32), queries.astype(np.float32)


@pytest.mark.parametrize("space", SPACES)
def test_hnsw_recall_against_exact(space: str, clustered: tuple[np.ndarray, np.ndarray]) -> None:
    gallery, queries = clustered
    exact, hnsw = ExactIndex(space), HnswIndex(space)
    exact.add(gallery)
    hnsw.add(gallery)
    truth, _ = exact.search(queries, 10)
    found, scores = hnsw.search(queries, 10)
    assert recall(found, truth) >= 0.95
    # Scores are the same distances as the exact index's, best first.
    assert (np.diff(scores, axis=1) >= 0).all()
    rows = np.arange(len(queries))[:, None]
    exact_distances = pairwise_distances(
        prepare_vectors(queries, space), prepare_vectors(gallery, space), space
    )[rows, found]
    np.testing.assert_allclose(scores, exact_distances, rtol=1e-4, atol=1e-4)


def test_hnsw_search_width_is_at_least_k_and_never_left_changed(
    clustered: tuple[np.ndarray, np.ndarray],
) -> None:
    gallery, queries = clustered
    narrow = HnswIndex("l2", search_candidates=1)
    narrow.add(gallery)
    exact = ExactIndex("l2")
    exact.add(gallery)
    found, _ = narrow.search(queries, 50)
    assert found.shape == (len(queries), 50)
    assert recall(found, exact.search(queries, 50)[0]) >= 0.9  # ef = 50, not 1
    assert narrow.faiss_index.hnsw.efSearch == 1
    assert narrow.params()["search_candidates"] == 1
    # A per-call width changes this call only.
    wide, _ = narrow.search(queries, 10, search_candidates=200)
    assert recall(wide, exact.search(queries, 10)[0]) >= 0.99
    assert narrow.faiss_index.hnsw.efSearch == 1 and narrow.params()["search_candidates"] == 1
    with pytest.raises(ValueError, match="search_candidates"):
        narrow.search(queries, 10, search_candidates=0)
    with pytest.raises(TypeError, match="search_candidates"):
        narrow.search(queries, 10, search_candidates=2.0)  # type: ignore[arg-type]


def test_hnsw_ties_are_ordered_by_row() -> None:
    index = HnswIndex("l2", graph_degree=4)
    index.add(np.repeat(np.eye(3, dtype=np.float32), 4, axis=0))  # every vector 4 times
    ids, _ = index.search(np.eye(3, dtype=np.float32), 6)
    for row, first in zip(ids, [0, 4, 8], strict=True):
        assert row[:4].tolist() == [first, first + 1, first + 2, first + 3]
        assert row[4:].tolist() == sorted(row[4:].tolist())


def test_hnsw_num_threads_restored() -> None:
    before = faiss.omp_get_max_threads()
    index = HnswIndex("cosine", num_threads=1)
    index.add(gaussian(100, 8))
    index.search(gaussian(5, 8), 3)
    assert faiss.omp_get_max_threads() == before


# --------------------------------------------------------------------------- parameters / registry


def test_parameter_table_and_defaults() -> None:
    assert INDEX_NAMES == ("exact", "hnsw", "ivfpq")
    assert set(HNSW_PARAMETERS) == {"graph_degree", "build_candidates", "search_candidates", "num_threads"}
    assert all(spec.meaning for spec in HNSW_PARAMETERS.values())
    assert validate_index_params("hnsw", None) == {
        "graph_degree": 16,
        "build_candidates": 200,
        "search_candidates": 64,
        "num_threads": None,
    }
    assert HnswIndex().params() == validate_index_params("hnsw", {})
    assert validate_index_params("exact", None) == {} == validate_index_params("exact", {})
    checked = validate_index_params("hnsw", {"graph_degree": np.int32(32), "num_threads": 2})
    assert checked["graph_degree"] == 32 and type(checked["graph_degree"]) is int
    index = create_index("hnsw", "ip", {"search_candidates": 10})
    assert isinstance(index, HnswIndex) and index.space == "ip" and index.params()["search_candidates"] == 10
    assert isinstance(create_index("exact", "l2", None), ExactIndex)


@pytest.mark.parametrize(
    ("name", "params", "error", "match"),
    [
        ("hnsw", {"M": 16}, ValueError, "'M'"),
        ("hnsw", {"graph_degree": 16, "ef": 3, "zz": 1}, ValueError, r"\['ef', 'zz'\]"),
        ("hnsw", {"graph_degree": 1}, ValueError, "graph_degree"),
        ("hnsw", {"graph_degree": 10_000}, ValueError, "graph_degree"),
        ("hnsw", {"graph_degree": 16.0}, TypeError, "graph_degree"),
        ("hnsw", {"graph_degree": True}, TypeError, "graph_degree"),
        ("hnsw", {"build_candidates": 0}, ValueError, "build_candidates"),
        ("hnsw", {"search_candidates": "64"}, TypeError, "search_candidates"),
        ("hnsw", {"search_candidates": None}, TypeError, "search_candidates"),
        ("hnsw", {"num_threads": 0}, ValueError, "num_threads"),
        ("hnsw", [("graph_degree", 3)], TypeError, "index_params"),
        ("exact", {"graph_degree": 16}, ValueError, "graph_degree"),
        ("exact", 5, TypeError, "index_params"),
        ("flat", None, ValueError, "search_index"),
        ("external", None, ValueError, "search_index"),
        (None, None, TypeError, "search_index"),
    ],
)
def test_parameter_validation_errors(
    name: object, params: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        validate_index_params(name, params)  # type: ignore[arg-type]
    with pytest.raises(error, match=match):
        create_index(name, "cosine", params)  # type: ignore[arg-type]


def test_hnsw_constructor_validates() -> None:
    with pytest.raises(ValueError, match="graph_degree"):
        HnswIndex(graph_degree=0)
    with pytest.raises(TypeError, match="num_threads"):
        HnswIndex(num_threads=1.0)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- serialisation


def filled_indexes() -> list[SearchIndex]:
    vectors = gaussian(400, 12, 8)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(12), 12, 4, faiss.METRIC_INNER_PRODUCT)
    ivf.train(vectors)
    ivf.nprobe = 4
    indexes: list[SearchIndex] = [
        ExactIndex("cosine"),
        ExactIndex("l2"),
        HnswIndex("cosine", graph_degree=8),
        HnswIndex("l2", graph_degree=8),
        ExternalSearchIndex.from_faiss_index(faiss.IndexFlatIP(12), name="ip"),
        ExternalSearchIndex.from_faiss_index(ivf, name="ivf"),
    ]
    for index in indexes:
        index.add(vectors)
        index.remove(np.array([5, 17, 100]))  # masked in the HNSW and IVF cases
    return indexes


@pytest.mark.parametrize("index", filled_indexes(), ids=lambda index: f"{type(index).__name__}-{index.space}")
def test_serialisation_round_trip_gives_identical_results(index: SearchIndex) -> None:
    data = index.to_bytes()
    assert isinstance(data, bytes)
    assert b"pickle" not in data[:200]
    restored = index_from_bytes(index.name, data)
    assert type(restored) is type(index)
    assert (restored.space, restored.dim, len(restored), restored.params()) == (
        index.space,
        index.dim,
        len(index),
        index.params(),
    )
    queries = gaussian(25, 12, 9)
    for expected, actual in zip(index.search(queries, 10), restored.search(queries, 10), strict=True):
        np.testing.assert_array_equal(expected, actual)
    if index.can_reconstruct:
        rows = np.arange(len(index))
        np.testing.assert_array_equal(index.reconstruct(rows), restored.reconstruct(rows))
    as_array = index_from_bytes(index.name, np.frombuffer(data, dtype=np.uint8))
    np.testing.assert_array_equal(as_array.search(queries, 3)[0], index.search(queries, 3)[0])
    if isinstance(index, HnswIndex):
        assert isinstance(restored, HnswIndex)
        assert restored.removed_count == index.removed_count  # graph kept, not rebuilt


def test_empty_indexes_round_trip() -> None:
    for index in [ExactIndex("ip"), HnswIndex("l2", graph_degree=5)]:
        restored = index_from_bytes(index.name, index.to_bytes())
        assert len(restored) == 0 and restored.dim is None and restored.params() == index.params()
        restored.add(gaussian(20, 3))
        assert restored.search(gaussian(1, 3), 2)[0].shape == (1, 2)


@pytest.mark.parametrize("name", ["exact", "hnsw", "external"])
def test_garbage_bytes_rejected(name: str) -> None:
    index = {
        "exact": ExactIndex(),
        "hnsw": HnswIndex(graph_degree=4),
        "external": ExternalSearchIndex.from_faiss_index(faiss.IndexFlatL2(4)),
    }[name]
    index.add(gaussian(30, 4))
    data = index.to_bytes()
    other = "hnsw" if name == "exact" else "exact"
    bad_inputs = [
        b"",
        b"garbage" * 10,
        data[:-7],
        data[: len(data) // 2],
        data + b"\x00",
        data.replace(b'"format":1', b'"format":9'),
        data.replace(b'"kind":"', b'"kinx":"'),
        data[:12] + b"[" + data[13:],
        data.replace(b'"dtype":"', b'"dtype":"|O'),
        data.replace(b'"nbytes":', b'"nbytes":1'),
    ]
    for bad in bad_inputs:
        with pytest.raises(ValueError):
            index_from_bytes(name, bad)
    with pytest.raises(ValueError, match="kind"):
        index_from_bytes(other, data)
    with pytest.raises(TypeError):
        index_from_bytes(name, "not bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name"):
        index_from_bytes("flat", data)


def test_corrupt_faiss_payload_rejected() -> None:
    index = HnswIndex(graph_degree=4)
    index.add(gaussian(30, 4))
    data = bytearray(index.to_bytes())
    graph_start = data.index(b"IHNf")  # faiss's fourcc for IndexHNSWFlat
    data[graph_start : graph_start + 4] = b"XXXX"
    with pytest.raises(ValueError, match="faiss"):
        HnswIndex.from_bytes(bytes(data))


# --------------------------------------------------------------------------- external


def test_external_flat_l2_and_ip_keep_faiss_scores() -> None:
    vectors, queries = gaussian(200, 10, 10), gaussian(15, 10, 11)
    for factory, space in [(faiss.IndexFlatL2, "l2"), (faiss.IndexFlatIP, "ip")]:
        raw = factory(10)
        raw.add(vectors)
        wrapped = ExternalSearchIndex.from_faiss_index(raw, name="mine")
        assert wrapped.name == "external" and wrapped.label == "mine"
        assert wrapped.space == space and wrapped.dim == 10 and len(wrapped) == 200
        assert wrapped.higher_is_better == (space == "ip")
        assert wrapped.params() == {"name": "mine", "faiss_type": factory.__name__}
        assert wrapped.can_reconstruct
        ids, scores = wrapped.search(queries, 7)
        expected_scores, expected_ids = raw.search(queries, 7)
        np.testing.assert_array_equal(ids, expected_ids)
        np.testing.assert_array_equal(scores, expected_scores)
        np.testing.assert_array_equal(wrapped.reconstruct(np.array([3, 4])), vectors[3:5])
        # The same neighbours as the exact index in the matching space.
        exact = ExactIndex(space)
        exact.add(vectors)
        np.testing.assert_array_equal(exact.search(queries, 7)[0], ids)


def test_external_non_reconstructable_index() -> None:
    vectors = gaussian(600, 16, 12)
    ivfpq = faiss.IndexIVFPQ(faiss.IndexFlatL2(16), 16, 4, 4, 4)
    wrapped = ExternalSearchIndex.from_faiss_index(ivfpq, name="ivfpq")
    with pytest.raises(ValueError, match="not trained"):
        wrapped.add(vectors)
    assert len(wrapped) == 0 and not wrapped.can_reconstruct
    ivfpq.train(vectors)
    wrapped.add(vectors)
    assert not wrapped.can_reconstruct
    with pytest.raises(RuntimeError, match="cannot reconstruct"):
        wrapped.reconstruct(np.array([0]))
    ids, _ = wrapped.search(vectors[:3], 5)
    assert ids.shape == (3, 5)
    lsh = ExternalSearchIndex.from_faiss_index(faiss.IndexLSH(16, 8))
    assert lsh.space == "l2"


def test_external_small_nprobe_pads_missing_results() -> None:
    vectors = gaussian(400, 8, 13)
    quantizer = faiss.IndexFlatL2(8)
    ivf = faiss.IndexIVFFlat(quantizer, 8, 16)
    ivf.train(vectors)
    ivf.nprobe = 1
    wrapped = ExternalSearchIndex.from_faiss_index(ivf)
    wrapped.add(vectors)
    ids, scores = wrapped.search(vectors[:4], 300)  # one list cannot hold 300 vectors
    assert ids.shape == (4, 300)
    assert (ids == -1).any() and np.isinf(scores[ids == -1]).all()
    assert (scores[ids >= 0] < np.inf).all()


def test_external_index_changed_behind_our_back() -> None:
    raw = faiss.IndexFlatL2(4)
    wrapped = ExternalSearchIndex.from_faiss_index(raw)
    wrapped.add(gaussian(5, 4))
    raw.add(gaussian(2, 4))
    with pytest.raises(RuntimeError, match="changed outside galleria"):
        wrapped.search(gaussian(1, 4), 3)


def test_external_rejections() -> None:
    with pytest.raises(TypeError, match="faiss index"):
        ExternalSearchIndex.from_faiss_index(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="metric"):
        ExternalSearchIndex.from_faiss_index(faiss.IndexFlat(4, faiss.METRIC_L1))
    with pytest.raises(ValueError, match="IndexIDMap"):
        ExternalSearchIndex.from_faiss_index(faiss.IndexIDMap(faiss.IndexFlatL2(4)))
    with pytest.raises(TypeError, match="name"):
        ExternalSearchIndex.from_faiss_index(faiss.IndexFlatL2(4), name=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name"):
        ExternalSearchIndex.from_faiss_index(faiss.IndexFlatL2(4), name="")


def test_hnsw_and_ivfpq_builds_run_on_every_thread_faiss_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """With num_threads unset nothing lowers faiss's OpenMP threads while a store builds its index."""
    from galleria import InMemoryImageEmbeddingStore

    seen: list[int] = []
    for cls in (faiss.IndexHNSWFlat, faiss.IndexIVFPQ):
        original = cls.add_with_ids if cls is faiss.IndexIVFPQ else cls.add

        def recording(self: object, *args: object, _original: object = original) -> object:
            seen.append(faiss.omp_get_max_threads())
            return _original(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(cls, "add_with_ids" if cls is faiss.IndexIVFPQ else "add", recording)
    default = faiss.omp_get_max_threads()
    if "OMP_NUM_THREADS" not in os.environ:
        assert default == len(os.sched_getaffinity(0))  # faiss's own default: every usable core
    vectors = RNG.normal(size=(1_200, 16)).astype(np.float32)
    paths = [f"v{i}" for i in range(len(vectors))]
    for name, params in (("hnsw", {}), ("ivfpq", {"lists": 8, "probe_lists": 8})):
        InMemoryImageEmbeddingStore.from_embeddings(paths, vectors, search_index=name, index_params=params)
    assert seen == [default, default]
    # An explicit num_threads is what faiss gets during the add, and is restored afterwards.
    seen.clear()
    HnswIndex("l2", num_threads=1).add(vectors[:50])
    assert seen == [1] and faiss.omp_get_max_threads() == default
