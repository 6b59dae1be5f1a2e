"""The re-ranker contract of galleria.components: the batched default, PoolReranker's public hook, and
a plugin's re-ranker behind the guard (galleria.rerank._plugin)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from galleria import InMemoryImageEmbeddingStore
from galleria.components import PLUGIN_API_VERSION, Candidate, Component, PluginError, PoolReranker, Reranker
from galleria.rerank._plugin import PluginReranker
from galleria.retrieval import RetrievalConfig, Searcher


def _store() -> InMemoryImageEmbeddingStore:
    vectors = np.random.default_rng(1).normal(size=(30, 6)).astype(np.float32)
    return InMemoryImageEmbeddingStore.from_embeddings([f"/g/{i}.png" for i in range(30)], vectors)


class Reverse(Reranker):
    """Implements rerank only: the base gives rerank_batch."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def rerank(self, candidates: Any, top_k: int) -> list[Candidate]:
        return [c.rescored(-c.score) for c in candidates][::-1][:top_k]


def test_a_reranker_with_only_rerank_gets_the_batched_default() -> None:
    store = _store()
    lists = store.retrieve_by_vector(store.embeddings[:4], 8)
    reranker = Reverse(store)
    batched = reranker.rerank_batch(lists, 3)
    assert batched == [reranker.rerank(candidates, 3) for candidates in lists]
    assert [c.path for c in batched[0]] == [c.path for c in lists[0][::-1][:3]]
    assert all(c.store_id == store.store_id for found in batched for c in found)  # rescored keeps the tag
    assert isinstance(reranker, Reranker)


class Nearest(PoolReranker):
    """The public hook: scores by the probe similarity alone (the plain order)."""

    def __init__(self, store: Any) -> None:
        super().__init__(store, "nearest")

    def pool_scores(self, probe: np.ndarray, among: np.ndarray) -> np.ndarray:
        result: np.ndarray = -probe
        return result


def test_a_pool_reranker_implements_the_public_hook() -> None:
    store = _store()
    lists = store.retrieve_by_vector(store.embeddings[:3], 10)
    found = Nearest(store).rerank_batch(lists, 4)
    assert [[c.path for c in one] for one in found] == [[c.path for c in one[:4]] for one in lists]
    with pytest.raises(TypeError, match="store must be an InMemoryImageEmbeddingStore"):
        Nearest(object())
    with pytest.raises(NotImplementedError, match="must implement pool_scores"):
        PoolReranker(store).rerank(lists[0], 2)


def _guarded(rerank: Any) -> PluginReranker:
    class Plain:
        def __init__(self) -> None:
            self.rerank = rerank

    component = Component("reranker", "demo", (), build=Plain, api_version=PLUGIN_API_VERSION)
    component = Component(**{**component.__dict__, "origin": "plugin package 'demo'"})
    return PluginReranker(component, Plain(), _store())


def test_a_plugin_reranker_is_checked_and_its_failures_are_one_error() -> None:
    store = _store()
    lists = store.retrieve_by_vector(store.embeddings[:2], 5)
    kept = _guarded(lambda candidates, top_k: list(candidates)[:top_k])
    assert kept.rerank_batch(lists, 2) == [one[:2] for one in lists]
    assert kept.store is not None
    with pytest.raises(PluginError, match=r"the re-ranking method 'demo' \(plugin package 'demo'\) failed "
                       r"while re-ranking: KeyError: 'x'"):  # fmt: skip
        _guarded(lambda candidates, top_k: {}["x"]).rerank_batch(lists, 2)
    with pytest.raises(PluginError, match="returned a NoneType"):
        _guarded(lambda candidates, top_k: None).rerank(lists[0], 2)
    with pytest.raises(PluginError, match="which was not among the candidates"):
        _guarded(lambda candidates, top_k: [Candidate("/elsewhere.png", 0.0)]).rerank(lists[0], 2)
    with pytest.raises(KeyboardInterrupt):
        _guarded(lambda candidates, top_k: (_ for _ in ()).throw(KeyboardInterrupt)).rerank(lists[0], 2)


def test_the_searcher_calls_a_base_subclass_through_rerank_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """What docs/extending.md shows is what the one retrieval path calls."""
    store = _store()
    searcher = Searcher(store, RetrievalConfig("plain"))
    searcher.reranker = Reverse(store)
    searcher.config = RetrievalConfig("r", rerank=True, pool=6).resolve(store)
    found = searcher.search(store.embeddings[:1], 3)
    plain = store.retrieve_by_vector(store.embeddings[:1], 6)[0]
    assert [c.path for c in found[0]] == [c.path for c in plain[::-1][:3]]
