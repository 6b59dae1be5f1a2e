"""The inverted-file neighbour graph on Ray tasks (``galleria.engines.ray_graph``) equals the
one-process build bit for bit for any sharding; a killed worker is retried; a dead cluster address
and a store changed during the build are clear errors, never a graph of two states."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the galleria[ray] extra is not installed")

from galleria import InMemoryImageEmbeddingStore  # noqa: E402
from galleria.engines import ray_graph  # noqa: E402
from galleria.index import ivf_graph  # noqa: E402
from galleria.index.neighbor_graph import approximate_graph, exact_graph, graph_recall  # noqa: E402
from galleria.store import graph as graph_module  # noqa: E402
from galleria.store.graph import graph_file_for, neighbor_graph, read_graph_header  # noqa: E402


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def clustered(count: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, dim))
    points = centres[rng.integers(0, 40, count)] + 0.4 * rng.normal(size=(count, dim))
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


SMALL = {"cell_size": 100, "probes": 8}


def test_the_ray_graph_equals_the_one_process_graph_for_any_sharding(
    local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    vectors = clustered(4000)
    local_ids, local_distances = approximate_graph(vectors, 10, "cosine", **SMALL)
    assert graph_recall(local_ids, exact_graph(vectors, 10, "cosine")[0]) >= 0.95
    for shard_items in (500, 1500, 1 << 16):  # 9, 3 and 1 shards
        monkeypatch.setattr(ivf_graph, "SHARD_ITEMS", shard_items)
        ids, distances = ray_graph.ray_ivf_graph(vectors, 10, "cosine", **SMALL)
        assert ids.tobytes() == local_ids.tobytes() and distances.tobytes() == local_distances.tobytes()
        again, _ = approximate_graph(vectors, 10, "cosine", **SMALL)  # one process, these shards
        assert again.tobytes() == local_ids.tobytes()


def _dying_shard(marker: str, deaths: int) -> Any:
    """A task that kills its worker the first ``deaths`` times it computes the shard holding row 0."""

    def shard(vectors: np.ndarray, work: list[tuple[np.ndarray, np.ndarray]], k: int, space: str) -> Any:
        if any((members == 0).any() for members, _ in work):
            seen = Path(marker)
            count = int(seen.read_text()) if seen.exists() else 0
            if count < deaths:
                seen.write_text(str(count + 1))
                os._exit(1)  # the worker dies mid-shard
        return ivf_graph.ivf_shard(vectors, work, k, space)

    return shard


@pytest.mark.parametrize("deaths", [1, 10])
def test_a_killed_worker_is_retried_or_the_build_fails_naming_the_shard(
    local_ray: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, deaths: int
) -> None:
    vectors = clustered(2000, seed=1)
    monkeypatch.setattr(ivf_graph, "SHARD_ITEMS", 500)
    monkeypatch.setattr(ray_graph, "_shard", _dying_shard(str(tmp_path / "deaths"), deaths))
    if deaths > ray_graph.MAX_RETRIES:
        with pytest.raises(RuntimeError, match=r"neighbour graph shard \d+ of \d+ failed on Ray"):
            ray_graph.ray_ivf_graph(vectors, 8, "l2", **SMALL)
        return
    ids, distances = ray_graph.ray_ivf_graph(vectors, 8, "l2", **SMALL)
    assert (tmp_path / "deaths").read_text() == "1"  # it died once, and was retried
    local_ids, local_distances = approximate_graph(vectors, 8, "l2", **SMALL)
    assert ids.tobytes() == local_ids.tobytes() and distances.tobytes() == local_distances.tobytes()


def _store(count: int) -> InMemoryImageEmbeddingStore:
    return InMemoryImageEmbeddingStore.from_embeddings(
        [f"/g/{i}.png" for i in range(count)], clustered(count)
    )


def test_a_stores_graph_built_on_ray_is_kept_and_read_by_its_users(
    local_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(1500)
    file = tmp_path / "s.safetensors"
    store.save_to_disk(file)
    ids, _ = ray_graph.ray_store_graph(store, 10, store_file=file, **SMALL)
    assert read_graph_header(graph_file_for(file))["method"] == "ivf"
    monkeypatch.setattr(graph_module, "build_graph", None)  # nothing may build another
    held, _ = neighbor_graph(store, 10)
    assert held.tobytes() == ids.tobytes()
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    read, _ = neighbor_graph(loaded, 10, store_file=file)
    assert read.tobytes() == ids.tobytes()


def test_a_store_changed_during_the_build_is_an_error_and_nothing_is_kept(
    local_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(1500)
    file = tmp_path / "s.safetensors"
    real = ray_graph.ray_ivf_graph

    def meanwhile(*args: Any, **kwargs: Any) -> Any:
        built = real(*args, **kwargs)
        store.remove_images(["/g/3.png"])  # another thread changes the store while the graph is built
        return built

    monkeypatch.setattr(ray_graph, "ray_ivf_graph", meanwhile)
    with pytest.raises(RuntimeError, match="the store changed while its neighbour graph was built"):
        ray_graph.ray_store_graph(store, 10, store_file=file, **SMALL)
    assert not os.path.exists(graph_file_for(file))
    assert graph_module._HELD.get(store) is None


def test_a_cluster_address_that_does_not_answer_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", None)  # never reached
    start = time.perf_counter()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(ConnectionError, match=f"Ray cluster at address '{address}' does not answer"):
            ray_graph.ray_ivf_graph(clustered(300), 5, "l2", cell_size=10, probes=2, address=address)
    assert time.perf_counter() - start < 60  # not Ray's minutes of retries (a bound, not a timing)
    with pytest.raises(ValueError, match="address must be"):
        ray_graph.ray_ivf_graph(clustered(300), 5, "l2", cell_size=10, probes=2, address="nowhere")
