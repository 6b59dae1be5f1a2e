"""The IVF-PQ build on Ray (``build_engine="ray"``) equals the one-process build, and a killed
worker is retried or fails the add without touching the index or the saved store."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the galleria[ray] extra is not installed")

from _support.store_support import make_images  # noqa: E402
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder  # noqa: E402
from galleria.engines import build_ivfpq_with_ray  # noqa: E402
from galleria.index import IvfPqIndex, _ivfpq_build, _ivfpq_ray  # noqa: E402
from galleria.index import ivfpq as ivfpq_module  # noqa: E402

faiss: Any = pytest.importorskip("faiss")

SMALL = {"lists": 16, "bits": 6, "probe_lists": 4, "num_threads": 1}


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture
def small_shards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ivfpq_module, "MIN_ROWS_PER_WORKER", 500)


#: Rows of a batch that makes two shards (the second from row SHARD_ROWS, 131,072, with the tail).
TWO_SHARDS = 2 * _ivfpq_ray.SHARD_ROWS + 10_000
SMALL_TRAIN = {**SMALL, "train_size": 5_000}


def clustered(count: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(20, dim))
    return (means[rng.integers(0, 20, count)] + 0.3 * rng.normal(size=(count, dim))).astype(np.float32)


def lists_of(index: IvfPqIndex) -> list[tuple[bytes, bytes]]:
    """Codes and ids of every inverted list, in list order."""
    ivf = faiss.extract_index_ivf(index.faiss_index)
    lists, found = ivf.invlists, []
    for number in range(ivf.nlist):
        size = lists.list_size(number)
        codes = faiss.rev_swig_ptr(lists.get_codes(number), size * lists.code_size).tobytes()
        ids = faiss.rev_swig_ptr(lists.get_ids(number), size).tobytes()
        found.append((codes, ids))
    return found


@pytest.mark.parametrize(("space", "extra"), [("cosine", {"keep_vectors": True}), ("l2", {"opq": True})])
def test_ray_build_equals_the_one_process_build(
    local_ray: None, small_shards: None, space: str, extra: dict[str, Any]
) -> None:
    data = clustered(TWO_SHARDS + 3000, 8)
    local = IvfPqIndex(space, **SMALL_TRAIN, **extra)
    spread = IvfPqIndex(space, build_engine="ray", **SMALL_TRAIN, **extra)
    assert _ivfpq_ray.shard_bounds(TWO_SHARDS, _ivfpq_ray.SHARD_ROWS)[1][0] == _ivfpq_ray.SHARD_ROWS
    for part in (data[:3000], data[3000:]):
        local.add(part)
        spread.add(part)
    ivf = faiss.extract_index_ivf(spread.faiss_index)
    assert isinstance(faiss.downcast_InvertedLists(ivf.invlists), faiss.ArrayInvertedLists)
    assert lists_of(spread) == lists_of(local)
    assert bytes(faiss.serialize_index(spread.faiss_index)) == bytes(faiss.serialize_index(local.faiss_index))
    assert spread.build_report == local.build_report
    loaded = IvfPqIndex.from_bytes(spread.to_bytes())  # galleria's FAISS checks accept it
    reference = IvfPqIndex.from_bytes(local.to_bytes())
    for a, b in zip(loaded.search(data[:40], 10), reference.search(data[:40], 10), strict=True):
        np.testing.assert_array_equal(a, b)


def test_build_ivfpq_with_ray_and_its_argument_errors(local_ray: None, small_shards: None) -> None:
    data = clustered(1500, 16, seed=2)
    built = build_ivfpq_with_ray(data, "l2", **SMALL)
    local = IvfPqIndex("l2", **SMALL)
    local.add(data)
    assert built.params()["build_engine"] == "ray" and lists_of(built) == lists_of(local)
    with pytest.raises(ValueError, match="build_engine"):
        build_ivfpq_with_ray(data, "l2", build_engine="processes")
    with pytest.raises(ValueError, match="num_cpus"):
        build_ivfpq_with_ray(data, "l2", num_cpus=0)
    with pytest.raises(ValueError, match="build_engine"):
        IvfPqIndex("l2", build_engine="spark")


def _dying_encode(marker: str, deaths: int) -> Any:
    """A task that kills its worker the first ``deaths`` times it encodes the batch's second shard."""

    def encode(trained: bytes, vectors: np.ndarray, first_id: int) -> bytes:
        if first_id == 131_072:
            seen = Path(marker)
            count = int(seen.read_text()) if seen.exists() else 0
            if count < deaths:
                seen.write_text(str(count + 1))
                os._exit(1)  # the worker dies mid-task
        return _ivfpq_build._add_shard(trained, np.ascontiguousarray(vectors), first_id)

    return encode


@pytest.mark.parametrize("deaths", [1, 10])
def test_a_killed_worker_is_retried_or_the_add_fails_leaving_the_index_as_it_was(
    local_ray: None, small_shards: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, deaths: int
) -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(_ivfpq_ray, "_encode", _dying_encode(str(tmp_path / "deaths"), deaths))
    data = clustered(2 * TWO_SHARDS, 8, seed=1)
    first, later = data[:TWO_SHARDS], data[TWO_SHARDS:]
    local, spread = IvfPqIndex("l2", **SMALL_TRAIN), IvfPqIndex("l2", build_engine="ray", **SMALL_TRAIN)
    local.add(first)
    if deaths <= _ivfpq_ray.MAX_RETRIES:
        spread.add(first)
        assert lists_of(spread) == lists_of(local)
        assert (tmp_path / "deaths").read_text() == str(deaths)
        return
    params = spread.params()
    message = f"encoding rows 131072:{TWO_SHARDS} of the ivfpq index failed on Ray"
    with pytest.raises(RuntimeError, match=message):
        spread.add(first)  # the first add: trained, then its encoding failed
    assert not spread.is_trained and len(spread) == 0 and spread.params() == params
    # A later add that fails leaves the trained index and its rows as they were.
    (tmp_path / "deaths").unlink()
    monkeypatch.setattr(_ivfpq_ray, "_encode", _dying_encode(str(tmp_path / "deaths"), 0))
    spread.add(first)
    before = spread.to_bytes()
    monkeypatch.setattr(_ivfpq_ray, "_encode", _dying_encode(str(tmp_path / "later"), deaths))
    with pytest.raises(RuntimeError, match=message):
        spread.add(later)
    assert spread.to_bytes() == before and len(spread) == TWO_SHARDS


def test_a_failed_ray_add_leaves_the_saved_store_and_the_store_unchanged(
    local_ray: None, small_shards: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(ivfpq_module, "MIN_ROWS_PER_WORKER", 5)
    embedder = PixelEmbedder(size=4, grayscale=True)  # 16 dimensions
    paths = [f"old/{number:04d}.png" for number in range(1200)]
    params = {**SMALL, "build_engine": "ray"}
    store = InMemoryImageEmbeddingStore.from_embeddings(
        paths, clustered(1200, 16, seed=3), embedder, "ivfpq", space="l2", index_params=params
    )
    target = tmp_path / "gallery.safetensors"
    store.save_to_disk(target)
    saved = target.read_bytes()
    loaded = InMemoryImageEmbeddingStore.load_from_disk(target, embedder=embedder)
    before = loaded.search_index.to_bytes()
    new = make_images(tmp_path / "new", 8, size=8)
    monkeypatch.setattr(_ivfpq_ray, "_encode", _dying_encode_at(0))
    with pytest.raises(RuntimeError, match="failed on Ray"):
        loaded.add_images(new)
    assert len(loaded) == 1200 and loaded.search_index.to_bytes() == before
    assert target.read_bytes() == saved


def _dying_encode_at(first: int) -> Any:
    """A task that always kills its worker when it encodes the shard from row ``first`` of its batch."""

    def encode(trained: bytes, vectors: np.ndarray, first_id: int) -> bytes:
        if first_id == first:
            os._exit(1)
        return _ivfpq_build._add_shard(trained, np.ascontiguousarray(vectors), first_id)

    return encode
