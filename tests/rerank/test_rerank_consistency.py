"""Re-ranking stays right while the gallery changes: every method reads the candidates' rows and
every gallery-derived structure (graph, offline table) from one state of the store.

Two checks: a writer step injected deterministically between a re-ranker's reads (it moves a row
of the gallery to the end, which shifts the rows of the candidates), and threads re-ranking with
every method beside a writer that adds, removes and moves rows. Answers are compared with the
same re-ranker on a quiet store holding the same gallery.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _support.store_support import make_images, pixel_embedder
from galleria import Candidate, InMemoryImageEmbeddingStore
from galleria.images.reading import read_rgb
from galleria.rerank.registry import RERANK_METHODS, make_reranker
from galleria.store._rwlock import ReadWriteLock

#: Small explicit parameters (the adaptive defaults would read the moving gallery).
PARAMS: dict[str, dict[str, Any]] = {
    "k-reciprocal": {"k1": 6, "k2": 3},
    "diffusion": {"k": 6, "query_k": 3},
    "decoupled-diffusion": {"k": 6, "truncation": 12, "query_k": 3},
    "gnn": {"k1": 6, "k2": 3},
    "dba": {"neighbors": 3, "aqe_neighbors": 3},
    "ecn": {"t": 2, "q": 3},
}


def test_every_method_is_covered() -> None:
    assert set(PARAMS) == set(RERANK_METHODS)


class HookedLock(ReadWriteLock):
    """A store lock that runs ``hook`` once, right after a read section ends: the ``after``-th
    read section from the time the hook is set (1: the next one)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Any = None
        self.after = 1

    @contextmanager
    def reading(self) -> Iterator[None]:
        with super().reading():
            yield
        if self.hook is None:
            return
        self.after -= 1
        if self.after <= 0:
            hook, self.hook = self.hook, None
            hook()


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("consistency")
    stable = make_images(folder / "stable", 36, seed=3)
    churn = make_images(folder / "churn", 6, seed=4)
    embedder = pixel_embedder()
    everything = stable + churn
    vectors = np.asarray(embedder.embed([read_rgb(path) for path in everything]), dtype=np.float32)
    return {
        "stable": stable,
        "churn": churn,
        "embedder": embedder,
        "vectors": dict(zip(everything, vectors, strict=True)),
    }


def quiet_ranking(
    vectors: dict[str, np.ndarray],
    method: str,
    paths: list[str],
    pool: list[tuple[str, float]],
    augmentation: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Every pool member's score from ``method`` on a quiet store of ``paths`` (hand-made candidates);
    ``augmentation``: the vectors are already DBA-augmented so (the record the live store has)."""
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, np.stack([vectors[p] for p in paths]))
    store._augmentation = augmentation
    reranker = make_reranker(method, store, **PARAMS[method])
    ranked = reranker.rerank([Candidate(path, score) for path, score in pool], top_k=len(pool))
    return {candidate.path: candidate.score for candidate in ranked}


def agrees(result: list[Candidate], expected: dict[str, float], top_k: int) -> bool:
    """``result`` is the best ``top_k`` of ``expected`` with its scores (ties within rounding)."""
    scale = 1e-4 * max(1.0, max(abs(v) for v in expected.values()))
    if len(result) != min(top_k, len(expected)) or any(c.path not in expected for c in result):
        return False
    if any(abs(c.score - expected[c.path]) > scale for c in result):
        return False
    left_out = [v for p, v in expected.items() if p not in {c.path for c in result}]
    return not left_out or max(expected[c.path] for c in result) <= min(left_out) + scale


def live_store(gallery: dict[str, Any]) -> InMemoryImageEmbeddingStore:
    store = InMemoryImageEmbeddingStore(gallery["stable"], gallery["embedder"], num_workers=1)
    store.build_store(progress=False)
    store._lock = HookedLock()
    return store


@pytest.mark.parametrize("after", [1, 2, 3], ids=["after-read-1", "after-read-2", "after-read-3"])
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("method", sorted(PARAMS))
def test_a_row_moved_between_the_reads_changes_no_answer(
    gallery: dict[str, Any], method: str, warm: bool, after: int
) -> None:
    store = live_store(gallery)
    reranker = make_reranker(method, store, **PARAMS[method])
    target = reranker.store
    if target is not store:  # dba re-ranks on its augmented copy: the writer moves rows there
        target._lock = HookedLock()
    query = gallery["vectors"][gallery["stable"][5]] + 0.01
    candidates = target.retrieve_by_vector(query, k=10)[0]
    pool = [(c.path, c.score) for c in candidates]
    moved = next(p for p in target.paths if p not in {c.path for c in candidates})  # row 0 or near it
    before = dict(zip(target.paths, target.embeddings, strict=True))

    def move_to_the_end() -> None:
        target.remove_images([moved])
        target.add_images([moved])

    if warm:  # the gallery structure is already kept for the state the candidates were read in
        reranker.rerank(candidates, top_k=5)
    target._lock.after = after  # between which two of the re-ranker's reads the writer steps in
    target._lock.hook = move_to_the_end
    result = reranker.rerank(candidates, top_k=5)
    if target._lock.hook is not None:  # this method read fewer times: nothing to test at that point
        target._lock.hook = None
        return
    assert target.paths[-1] == moved, "the writer step did not run"
    expected = quiet_ranking(before, method, gallery["stable"], pool, target.augmentation)
    assert agrees(result, expected, 5), (method, [(c.path, c.score) for c in result], expected)


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


@pytest.mark.parametrize("method", sorted(PARAMS))
def test_readers_of_every_method_beside_a_writer(
    gallery: dict[str, Any], method: str, frequent_thread_switches: None
) -> None:
    stable, churn = gallery["stable"], gallery["churn"]
    store = InMemoryImageEmbeddingStore(stable, gallery["embedder"], num_workers=1)
    store.build_store(progress=False)
    reranker = make_reranker(method, store, **PARAMS[method])
    target = reranker.store
    augmented = target is not store
    moved = stable[0]

    def known(paths: list[str], *args: Any, **kwargs: Any) -> tuple[list[str], np.ndarray, list[str]]:
        return list(paths), np.stack([gallery["vectors"][p] for p in paths]), []

    target._embed_files = known  # type: ignore[method-assign]  # re-adds known images at once: many more edits
    answers: list[tuple[list[tuple[str, float]], list[Candidate]]] = []
    misses: list[str] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not done.is_set() or len(answers) < 40:
            query = gallery["vectors"][stable[int(rng.integers(len(stable)))]] + 0.01
            candidates = target.retrieve_by_vector(query, k=10)[0]
            try:
                result = reranker.rerank(candidates, top_k=5)
            except KeyError as error:  # documented: a candidate removed since it was retrieved
                assert any(Path(p).name in str(error) for p in [*churn, moved]), error
                misses.append(str(error))
                continue
            answers.append(([(c.path, c.score) for c in candidates], result))
            if len(answers) > 400:
                return

    def writer() -> None:
        try:
            for _ in range(60):
                target.add_images(churn)
                for _ in range(0 if augmented else 3):  # an augmented store would not re-augment it
                    target.remove_images([moved])
                    target.add_images([moved])
                target.remove_images(churn)
        finally:
            done.set()

    def guarded(run: Any) -> None:
        try:
            run()
        except BaseException as error:
            errors.append(error)
            done.set()

    threads = [
        threading.Thread(target=guarded, args=(t,))
        for t in [writer] + [lambda s=s: reader(s) for s in range(3)]
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
        assert not thread.is_alive(), "a thread did not finish: deadlock?"
    assert errors == []
    assert len(answers) >= 40
    reference = {p: gallery["vectors"][p] for p in stable + churn}
    if augmented:  # dba scores only the pool's own vectors: the live store's vectors decide
        reference.update(zip(target.paths, target.embeddings, strict=True))
    contents = [stable, stable + churn, stable[1:] + churn, stable[1:]]
    memo: dict[tuple[Any, ...], dict[str, float]] = {}
    wrong = []
    for pool, result in answers:
        names = {p for p, _ in pool}
        fits = False
        for number, content in enumerate(contents):
            if not names <= set(content):
                continue
            key = (number, tuple(pool))
            if key not in memo:
                memo[key] = quiet_ranking(reference, method, content, pool, target.augmentation)
            if agrees(result, memo[key], 5):
                fits = True
                break
        if not fits:
            wrong.append((pool, [(c.path, c.score) for c in result]))
    assert wrong == [], f"{len(wrong)} of {len(answers)} answers wrong, e.g. {wrong[0]}"


@pytest.mark.parametrize("method", ["diffusion", "decoupled-diffusion"])
def test_a_gallery_that_keeps_moving_falls_back_to_one_lock(gallery: dict[str, Any], method: str) -> None:
    """A writer step after each of the first read sections: every rebuilt structure is stale at once,
    so the re-ranker must take rows and gallery under one lock (and still answer right)."""
    store = live_store(gallery)
    reranker = make_reranker(method, store, **PARAMS[method])
    candidates = store.retrieve_by_vector(gallery["vectors"][gallery["stable"][7]] + 0.01, k=10)[0]
    pool = [(c.path, c.score) for c in candidates]
    before = dict(zip(store.paths, store.embeddings, strict=True))
    outside = [p for p in store.paths if p not in {c.path for c in candidates}]
    moves = []

    def move() -> None:
        if len(moves) < 12:
            moved = outside[len(moves) % len(outside)]
            moves.append(moved)
            store.remove_images([moved])
            store.add_images([moved])
            store._lock.hook = move  # type: ignore[attr-defined]

    store._lock.hook = move  # type: ignore[attr-defined]
    result = reranker.rerank(candidates, top_k=5)
    assert len(moves) >= 4, "the gallery did not keep moving"
    store._lock.hook = None  # type: ignore[attr-defined]
    expected = quiet_ranking(before, method, gallery["stable"], pool)
    assert agrees(result, expected, 5), (method, [(c.path, c.score) for c in result], expected)
