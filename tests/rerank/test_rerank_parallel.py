"""Full re-ranking on several threads gives the single-threaded results bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from galleria.rerank import (
    _common,
    _full_blocks,
    _full_neighbours,
    iter_k_reciprocal_rerank_features,
    k_reciprocal_rerank,
    k_reciprocal_rerank_features,
)
from galleria.rerank._common import parallel_blocks


def test_parallel_blocks_keeps_the_order_and_bounds_the_work_ahead() -> None:
    seen: list[int] = []

    def work(start: int, made: None) -> int:
        seen.append(start)
        return start * start

    results = parallel_blocks(work, list(range(20)), workers=3)
    assert next(results) == 0
    assert len(seen) <= 4  # the first result and at most `workers` more were started
    assert [0, *results] == [i * i for i in range(20)]
    assert list(parallel_blocks(work, [], workers=2)) == []
    assert list(parallel_blocks(work, [5], workers=1)) == [25]


def test_parallel_blocks_passes_errors_on() -> None:
    def work(start: int, made: int) -> int:
        if start == 3:
            raise ValueError("block 3")
        return start

    with pytest.raises(ValueError, match="block 3"):
        list(parallel_blocks(work, list(range(8)), lambda start: start, workers=2))


def _features(seed: int, probes: int, gallery: int, dim: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, dim))
    draw = lambda n: centres[rng.integers(0, 12, n)] + 0.7 * rng.normal(size=(n, dim))  # noqa: E731
    return draw(probes).astype(np.float32), draw(gallery).astype(np.float32)


@pytest.mark.parametrize("mode", ["paper", "reference"])
@pytest.mark.parametrize("seed", [0, 1])
def test_threads_do_not_change_a_bit(monkeypatch: pytest.MonkeyPatch, mode: str, seed: int) -> None:
    probe, gallery = _features(seed, 37, 150)
    monkeypatch.setattr(_full_blocks, "BLOCK_ELEMENTS", 1500)  # blocks of ~8 rows: many blocks
    monkeypatch.setattr(_full_blocks, "TRIPLES", 500)
    results = {}
    for workers in (1, 2, 3):
        monkeypatch.setattr(_common, "BLOCK_WORKERS", workers)
        matrix = k_reciprocal_rerank_features(probe, gallery, k1=9, k2=4, mode=mode)
        streamed = np.concatenate(
            [block for _, block in iter_k_reciprocal_rerank_features(probe, gallery, k1=9, k2=4, mode=mode)]
        )
        pp, pg, gg = (1 - a @ b.T for a, b in ((probe, probe), (probe, gallery), (gallery, gallery)))
        distances = k_reciprocal_rerank(pg, pp, gg, k1=9, k2=4, mode=mode)
        results[workers] = (matrix, streamed, distances)
    for workers in (2, 3):
        for one, many in zip(results[1], results[workers], strict=True):
            assert one.tobytes() == many.tobytes()
    assert results[1][0].tobytes() == results[1][1].tobytes()


@pytest.mark.parametrize("mode", ["paper", "reference"])
@pytest.mark.parametrize("duplicates", [False, True])
def test_chunked_neighbour_search_equals_whole_rows(
    monkeypatch: pytest.MonkeyPatch, mode: str, duplicates: bool
) -> None:
    """The strided-chunk search on cosine Gram blocks ranks exactly as the whole scaled rows do."""
    probe, gallery = _features(3, 30, 260, dim=6)
    if duplicates:  # exact ties everywhere: rows whose cut is unsure are ranked whole
        gallery[1::2] = gallery[::2][: len(gallery[1::2])]
        probe[::3] = gallery[: len(probe[::3])]
    monkeypatch.setattr(_full_blocks, "BLOCK_ELEMENTS", 4000)
    results = {}
    calls: list[int] = []
    original = _full_neighbours.chunked_lists

    def counted(*args: Any) -> Any:
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(_full_neighbours, "chunked_lists", counted)
    for chunk in (3, 4, 7, 10_000):  # 10,000: no chunked search
        monkeypatch.setattr(_full_blocks, "CHUNK", chunk)
        calls.clear()
        matrix = k_reciprocal_rerank_features(probe, gallery, k1=9, k2=4, mode=mode)
        streamed = np.concatenate(
            [block for _, block in iter_k_reciprocal_rerank_features(probe, gallery, k1=9, k2=4, mode=mode)]
        )
        assert matrix.tobytes() == streamed.tobytes()
        assert bool(calls) == (chunk != 10_000)
        results[chunk] = matrix
    for chunk in (3, 4, 7):
        assert results[chunk].tobytes() == results[10_000].tobytes()
