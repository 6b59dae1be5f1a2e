"""One store shared by threads: readers run together, writers alone, nothing torn (bounded, seeded loops)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _support.store_support import make_images, pixel_embedder
from galleria import InMemoryImageEmbeddingStore, KReciprocalReranker
from galleria.images.reading import read_rgb
from galleria.store._rwlock import ReadWriteLock


@pytest.fixture(autouse=True)
def frequent_thread_switches() -> Any:
    """Switch threads every microsecond, so interleavings that a torn update needs actually happen."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def run_threads(targets: list[Any]) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(target: Any) -> None:
        try:
            target()
        except BaseException as error:  # collected and re-raised by the test
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(target,)) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
        assert not thread.is_alive(), "a thread did not finish: deadlock?"
    return errors


@pytest.mark.parametrize("index", ["exact", "hnsw"])
def test_readers_and_writers_share_a_store(tmp_path: Path, index: str) -> None:
    stable = make_images(tmp_path / "stable", 40, seed=1)
    churn = make_images(tmp_path / "churn", 16, seed=2)
    embedder = pixel_embedder()
    everything = stable + churn
    known = {
        path: vector
        for path, vector in zip(everything, embedder.embed([read_rgb(p) for p in everything]), strict=True)
    }
    store = InMemoryImageEmbeddingStore(stable, embedder, index, num_workers=2)
    store.build_store(progress=False)
    reranker = KReciprocalReranker(store, k1=6, k2=3)
    rng = np.random.default_rng(7)
    queries = [
        known[path] + rng.normal(scale=0.05, size=known[path].shape).astype(np.float32) for path in stable[:8]
    ]
    bad_scores: list[tuple[str, float, float]] = []
    rerank_misses: list[str] = []
    saved: list[Path] = []

    def reader(seed: int) -> None:
        local = np.random.default_rng(seed)
        for step in range(150):
            query = queries[int(local.integers(len(queries)))]
            expand = bool(step % 3 == 0)
            ranked = store.retrieve_by_vector(query, k=12, query_expansion=expand, expansion_neighbors=5)[0]
            if not expand:
                unit = query / np.linalg.norm(query)
                for candidate in ranked:
                    vector = known[candidate.path] / np.linalg.norm(known[candidate.path])
                    expected = max(0.0, 1.0 - float(unit @ vector))
                    if abs(candidate.score - expected) > 1e-4:
                        bad_scores.append((candidate.path, candidate.score, expected))
            try:
                reranked = reranker.rerank(ranked, top_k=5)
                assert len(reranked) == min(5, len(ranked))
            except KeyError as error:  # a churn image removed between retrieval and re-ranking
                assert any(Path(path).name in str(error) for path in churn), error
                rerank_misses.append(str(error))
            held = store.embeddings
            assert len(stable) <= held.shape[0] <= len(stable) + len(churn)

    def writer() -> None:
        for cycle in range(30):
            part = churn[(cycle % 4) * 4 : (cycle % 4) * 4 + 4]
            store.add_images(part)
            store.remove_images(part)

    def saver() -> None:
        for step in range(6):
            file = tmp_path / f"save_{step}.safetensors"
            store.save_to_disk(file)
            saved.append(file)

    errors = run_threads([lambda s=s: reader(s) for s in range(4)] + [writer, saver])
    assert errors == []
    assert bad_scores == []
    for file in saved:
        loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
        assert set(stable) <= set(loaded.paths) <= set(stable + churn)
        got = loaded.embeddings_of(loaded.paths)
        want = np.stack([known[p] / np.linalg.norm(known[p]) for p in loaded.paths])
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert sorted(store.paths) == sorted(stable)


def test_concurrent_adds_of_the_same_images_keep_one_row_each(tmp_path: Path) -> None:
    stable = make_images(tmp_path / "stable", 5, seed=3)
    extra = make_images(tmp_path / "extra", 6, seed=4)
    store = InMemoryImageEmbeddingStore(stable, pixel_embedder(), num_workers=1)
    store.build_store(progress=False)
    errors = run_threads([lambda: store.add_images(extra) for _ in range(4)])
    assert errors == []
    assert len(store.paths) == len(set(store.paths)) == 11
    assert len(store.search_index) == 11


def test_writer_waits_for_readers_and_blocks_new_ones() -> None:
    lock = ReadWriteLock()
    order: list[str] = []
    reading = threading.Event()
    release = threading.Event()

    def long_reader() -> None:
        with lock.reading():
            reading.set()
            release.wait(10)
            order.append("reader done")

    def writer() -> None:
        reading.wait(10)
        with lock.writing():
            order.append("writer")

    first = threading.Thread(target=long_reader)
    second = threading.Thread(target=writer)
    first.start()
    second.start()
    reading.wait(10)
    # The writer cannot get in while the reader holds the lock.
    second.join(timeout=0.2)
    assert second.is_alive() and order == []
    release.set()
    first.join(10)
    second.join(10)
    assert order == ["reader done", "writer"]
