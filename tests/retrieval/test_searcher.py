"""Searcher.search's ``exclude``: the paths left out do not shorten the lists (issue 35 §4)."""

from __future__ import annotations

import numpy as np
import pytest

from galleria.retrieval import RetrievalConfig, Searcher
from galleria.store import InMemoryImageEmbeddingStore


def _store(n: int = 40, dim: int = 8) -> InMemoryImageEmbeddingStore:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    return InMemoryImageEmbeddingStore.from_embeddings([f"g{i:02d}" for i in range(n)], vectors)


@pytest.mark.parametrize("config", [None, RetrievalConfig("rr", rerank=True, pool=5)])
def test_excluding_three_paths_still_gives_k_results(config: RetrievalConfig | None) -> None:
    store = _store()
    searcher = Searcher(store, config)
    queries = store.embeddings_of(["g00", "g01"])
    plain = searcher.search(queries, 8)
    left_out = [[c.path for c in candidates[:3]] for candidates in plain]
    lists = searcher.search(queries, 5, exclude=left_out)
    assert [len(candidates) for candidates in lists] == [5, 5]
    for candidates, gone in zip(lists, left_out, strict=True):
        assert not {c.path for c in candidates} & set(gone)
    if config is None:  # plain search: the same order with the three taken out
        assert [[c.path for c in candidates] for candidates in lists] == [
            [c.path for c in candidates[3:8]] for candidates in plain
        ]


def test_a_set_a_single_path_and_none_per_query() -> None:
    store = _store()
    searcher = Searcher(store)
    queries = store.embeddings_of(["g00", "g01", "g02"])
    first = [c[0].path for c in searcher.search(queries, 1)]
    lists = searcher.search(queries, 4, exclude=[set(first[:1]) | {"g39", "g38"}, first[1], None])
    assert [len(candidates) for candidates in lists] == [4, 4, 4]
    assert first[0] not in {c.path for c in lists[0]}
    assert first[1] not in {c.path for c in lists[1]}
    assert lists[2][0].path == first[2]


def test_path_queries_leave_themselves_out_and_keep_k() -> None:
    store = _store()
    lists = Searcher(store).search(["g05", "g06"], 5, kind="path")
    assert [len(candidates) for candidates in lists] == [5, 5]
    assert "g05" not in {c.path for c in lists[0]}


def test_excluding_more_than_the_gallery_holds_gives_what_is_left() -> None:
    store = _store(n=6)
    lists = Searcher(store).search(store.embeddings_of(["g00"]), 5, exclude=[["g00", "g01", "g02"]])
    assert sorted(c.path for c in lists[0]) == ["g03", "g04", "g05"]
