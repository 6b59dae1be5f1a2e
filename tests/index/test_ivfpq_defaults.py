"""IVF-PQ chooses its shape from the gallery and tunes probe_lists at build time to a recall target."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from galleria import InMemoryImageEmbeddingStore
from galleria._warnings import RecallTargetWarning
from galleria.index import ExactIndex, IvfPqIndex, index_from_bytes, validate_index_params
from galleria.index._ivfpq_params import choose_shape, validate_ivfpq_params


def clustered(count: int, dim: int, seed: int = 0, centres: int = 50) -> np.ndarray:
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(centres, dim))
    labels = rng.integers(0, centres, size=count)
    return (means[labels] + 0.5 * rng.normal(size=(count, dim))).astype(np.float32)


def recall_without_self(index: IvfPqIndex, data: np.ndarray, rows: np.ndarray) -> float:
    """recall@10 of the index on gallery rows, leaving each query's own row out (a slow oracle)."""
    exact = ExactIndex(index.space)
    exact.add(data)
    found, truth = index.search(data[rows], 11)[0], exact.search(data[rows], 11)[0]
    hits = 0
    for row, a, b in zip(rows, found, truth, strict=True):
        hits += len(set(a[a != row][:10].tolist()) & set(b[b != row][:10].tolist()))
    return hits / (10 * rows.size)


def test_shape_follows_the_gallery_and_the_budget() -> None:
    for count in (5_000, 50_000, 1_000_000):
        shape = choose_shape(count, 96, validate_ivfpq_params(None))
        assert shape.lists == max(1, min(round(4 * math.sqrt(count)), min(count, 100_000) // 39))
        assert shape.subquantizers == 96 and shape.bits == 8
    budget = choose_shape(1_000_000, 96, validate_ivfpq_params({"memory_budget": 40_000_000}))
    assert budget.subquantizers == 32  # 40 bytes a row: 8 for the id, 32 for the code
    given = choose_shape(1_000_000, 96, validate_ivfpq_params({"lists": 7, "subquantizers": 3, "bits": 4}))
    assert (given.lists, given.subquantizers, given.bits) == (7, 3, 4)
    assert choose_shape(500, 8, validate_ivfpq_params(None)).bits < 8  # too few rows for 256 centroids
    with pytest.raises(ValueError, match="memory_budget"):
        choose_shape(1_000, 96, validate_ivfpq_params({"memory_budget": 8_000}))


@pytest.mark.parametrize(("count", "dim", "lists"), [(200_000, 128, 1789), (1_000_000, 512, 2564)])
def test_benchmarked_default_shapes_are_a_byte_per_dimension(count: int, dim: int, lists: int) -> None:
    """The shapes measured in docs/benchmarks.md: one byte per dimension, so codes + ids + lists
    stay near a quarter of the float32 vectors alone (22 % of the whole exact store, measured)."""
    shape = choose_shape(count, dim, validate_ivfpq_params(None))
    assert (shape.lists, shape.subquantizers, shape.bits) == (lists, dim, 8)
    compressed = count * (shape.subquantizers + 8) + shape.lists * dim * 4
    assert compressed <= 0.28 * count * 4 * dim
    # Every explicit value is kept as given, whatever the gallery.
    explicit = {"lists": 100, "subquantizers": dim // 4, "bits": 6, "memory_budget": 10**6}
    kept = choose_shape(count, dim, validate_ivfpq_params(explicit))
    assert (kept.lists, kept.subquantizers, kept.bits) == (100, dim // 4, 6)


def test_recall_target_is_a_checked_parameter() -> None:
    assert validate_index_params("ivfpq", {"recall_target": 0.95})["recall_target"] == 0.95
    for bad, error in ((1.5, ValueError), ("high", TypeError), (True, TypeError), (float("nan"), ValueError)):
        with pytest.raises(error, match="recall_target"):
            validate_index_params("ivfpq", {"recall_target": bad})


def test_defaults_meet_the_target_measured_on_the_gallery() -> None:
    data = clustered(6_000, 32)
    index = IvfPqIndex("l2", recall_target=0.9, num_threads=1)
    index.add(data)
    report = index.build_report
    assert report is not None and set(report["chosen"]) == {"lists", "subquantizers", "bits", "probe_lists"}
    assert report["recall_at_10"] >= 0.9 and report["sample_queries"] == 300
    params = index.params()
    assert params["probe_lists"] == report["probe_lists"] and params["lists"] == 6_000 // 39  # 39 rows a list
    # The report is what an independent measurement on other gallery rows finds (within noise).
    rows = np.random.default_rng(9).choice(len(data), 300, replace=False)
    assert recall_without_self(index, data, rows) >= 0.85
    # Fewer probes would have missed the target: probe_lists is the smallest power of two that meets it.
    if report["probe_lists"] > 1:
        fewer = IvfPqIndex(
            "l2", **{**params, "probe_lists": report["probe_lists"] // 2, "recall_target": 0.9}
        )
        with pytest.warns(RecallTargetWarning):
            fewer.add(data)
    # Saved and read back with the index.
    copy = index_from_bytes("ivfpq", index.to_bytes())
    assert isinstance(copy, IvfPqIndex) and copy.build_report == report and copy.params() == params


def test_explicit_parameters_are_kept_and_an_unreachable_target_warns() -> None:
    data = clustered(3_000, 32)
    index = IvfPqIndex(
        "l2", lists=16, subquantizers=2, bits=4, probe_lists=2, recall_target=0.99, num_threads=1
    )
    with pytest.warns(RecallTargetWarning, match=r"recall@10 0\.\d+ .* below recall_target=0.99"):
        index.add(data)
    params = index.params()
    assert (params["lists"], params["subquantizers"], params["bits"], params["probe_lists"]) == (16, 2, 4, 2)
    assert index.build_report is not None and index.build_report["chosen"] == []
    # Explicit probe_lists and no target: nothing is measured.
    quiet = IvfPqIndex("l2", lists=16, probe_lists=4, num_threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecallTargetWarning)
        quiet.add(data)
    assert quiet.build_report is not None and quiet.build_report["recall_at_10"] is None


def test_keep_vectors_reranking_reaches_higher_recall() -> None:
    data = clustered(6_000, 32)
    index = IvfPqIndex("l2", keep_vectors=True, rerank_candidates=100, recall_target=0.99, num_threads=1)
    index.add(data)
    assert index.build_report is not None and index.build_report["recall_at_10"] >= 0.99


def test_the_store_records_the_report_in_its_file(tmp_path: object) -> None:
    data = clustered(2_000, 16)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"p{i}" for i in range(len(data))], data, search_index="ivfpq", index_params={"num_threads": 1}
    )
    file = f"{tmp_path}/s.safetensors"
    store.save_to_disk(file)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file).search_index
    assert isinstance(loaded, IvfPqIndex) and loaded.build_report == store.search_index.build_report
    assert loaded.build_report is not None and loaded.build_report["recall_at_10"] is not None


def test_galleria_info_shows_what_the_build_chose_and_measured(tmp_path: object) -> None:
    import json
    import os
    import subprocess
    import sys

    data = clustered(3_000, 16)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"p{i}" for i in range(len(data))],
        data,
        search_index="ivfpq",
        index_params={"num_threads": 1, "lists": 40, "recall_target": 0.5},
    )
    file = f"{tmp_path}/s.safetensors"
    store.save_to_disk(file)
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "galleria", "info", file]
    text = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    report = store.search_index.build_report
    assert report is not None
    assert f"recall@10 {report['recall_at_10']:.3f} on 300 gallery vectors" in text
    assert "chosen from the gallery: subquantizers, bits, probe_lists" in text
    described = json.loads(
        subprocess.run([*command, "--json"], capture_output=True, text=True, env=env).stdout
    )
    assert described["index_build"] == report and described["index"]["params"]["lists"] == 40


def test_no_l2_table_larger_than_the_codes_is_built_or_restored() -> None:
    data = clustered(2_000, 16)
    big = IvfPqIndex("l2", lists=64, subquantizers=16, bits=8, probe_lists=8, num_threads=1)
    big.add(data)  # the table would be 64 × 16 × 256 floats = 1 MiB, the codes 48 KB
    ivf = faiss_ivf(big)
    assert ivf.use_precomputed_table == -1 and ivf.precomputed_table.size() == 0
    copy = index_from_bytes("ivfpq", big.to_bytes())
    assert isinstance(copy, IvfPqIndex) and faiss_ivf(copy).precomputed_table.size() == 0
    np.testing.assert_array_equal(copy.search(data[:20], 5)[0], big.search(data[:20], 5)[0])
    small = IvfPqIndex("l2", lists=4, subquantizers=4, bits=4, probe_lists=2, num_threads=1)
    small.add(data)  # 4 × 4 × 16 floats: far smaller than the codes, so faiss keeps its table
    assert faiss_ivf(small).precomputed_table.size() > 0


def faiss_ivf(index: IvfPqIndex) -> object:
    import faiss

    return faiss.downcast_index(faiss.extract_index_ivf(index.faiss_index))
