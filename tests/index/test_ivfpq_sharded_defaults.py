"""IVF-PQ at its defaults on the sharded paths: ``store_from_shards`` and the parallel shard build
choose the same shape and probes as a plain build of the same rows (the rules of ``choose_shape``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")
pytest.importorskip("pyarrow", reason="shards need the galleria[ray] extra's pyarrow")

from galleria.engines import ShardWriter, store_from_shards
from galleria.index import IvfPqIndex
from galleria.index import ivfpq as ivfpq_module
from galleria.index._ivfpq_params import choose_shape, validate_ivfpq_params

SHAPE = ("lists", "subquantizers", "bits")


def clustered(count: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, dim)).astype(np.float32)
    vectors = centres[rng.integers(0, 40, size=count)] + 0.3 * rng.normal(size=(count, dim)).astype(
        np.float32
    )
    return np.ascontiguousarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), dtype=np.float32)


@pytest.fixture()
def small_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ivfpq_module, "MIN_ROWS_PER_WORKER", 500)  # shards of a few thousand rows


def test_store_from_shards_builds_ivfpq_at_the_default_rules(tmp_path: Path, small_workers: None) -> None:
    vectors = clustered(3000, 16)
    paths = [f"photos/{i:05d}.jpg" for i in range(len(vectors))]
    writer = ShardWriter(tmp_path / "shards", rows_per_shard=700)
    for start in range(0, len(paths), 1000):
        writer.write(paths[start : start + 1000], vectors[start : start + 1000])
    writer.close()
    plain = store_from_shards(tmp_path / "shards", "ivfpq")
    parallel = store_from_shards(tmp_path / "shards", "ivfpq", index_params={"build_workers": 2})
    expected = choose_shape(len(vectors), 16, validate_ivfpq_params(None))
    for store in (plain, parallel):
        params = store.search_index.params()
        assert tuple(params[name] for name in SHAPE) == (
            expected.lists,
            expected.subquantizers,
            expected.bits,
        )
        assert params["probe_lists"] is not None and params["recall_target"] == 0.9
        report = store.search_index.build_report
        assert set(report["chosen"]) == {*SHAPE, "probe_lists"}
        assert report["sample_queries"] == 300
    assert parallel.search_index.params()["probe_lists"] == plain.search_index.params()["probe_lists"]
    assert (
        parallel.search_index.build_report["recall_at_10"] == plain.search_index.build_report["recall_at_10"]
    )
    assert parallel.paths == plain.paths == paths
    for a, b in zip(
        plain.search_index.search(vectors[:40], 10),
        parallel.search_index.search(vectors[:40], 10),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)


def test_chunked_adds_take_their_defaults_from_the_first_chunk(small_workers: None) -> None:
    """bench_10m.py's way: the first chunk chooses the shape and probes, later chunks keep them."""
    vectors = clustered(4000, 16, seed=1)
    chunked = IvfPqIndex("ip", build_workers=2)
    for start in range(0, len(vectors), 2000):
        chunked.add(vectors[start : start + 2000])
    first = IvfPqIndex("ip")
    first.add(vectors[:2000])
    expected = choose_shape(2000, 16, validate_ivfpq_params(None))
    assert tuple(chunked.params()[name] for name in SHAPE) == (
        expected.lists,
        expected.subquantizers,
        expected.bits,
    )
    assert chunked.params()["probe_lists"] == first.params()["probe_lists"]
    assert len(chunked) == 4000
    first.add(vectors[2000:])
    for a, b in zip(first.search(vectors[:40], 10), chunked.search(vectors[:40], 10), strict=True):
        np.testing.assert_array_equal(a, b)
