"""DBA and Iscen diffusion take their neighbour lists from the store's one neighbour graph
(:func:`galleria.neighbor_graph`) when it is kept for the store's state: nothing builds another."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import galleria
from galleria import InMemoryImageEmbeddingStore
from galleria.index.neighbor_graph import build_graph
from galleria.rerank import DiffusionReranker, _dba_core, _diffusion_graph, augment_store
from galleria.store import graph as graph_module


def _store() -> InMemoryImageEmbeddingStore:
    vectors = np.random.default_rng(5).normal(size=(120, 8)).astype(np.float32)
    return InMemoryImageEmbeddingStore.from_embeddings([f"img{i}.png" for i in range(120)], vectors)


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def counting(vectors: np.ndarray, k: int, *args: Any, **kwargs: Any) -> Any:
        calls.append(k)
        return build_graph(vectors, k, *args, **kwargs)

    for module in (graph_module, _dba_core, _diffusion_graph):
        monkeypatch.setattr(module, "build_graph", counting)
    return calls


def test_dba_and_diffusion_read_the_kept_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store()
    calls = _counted(monkeypatch)
    ids, _ = galleria.neighbor_graph(store, 40)
    assert calls == [40]
    augmented = augment_store(store, neighbors=10)
    reranker = DiffusionReranker(store, k=20)
    ranked = reranker.rerank(store.retrieve_by_vector(store.embeddings_of(["img3.png"])[0], k=60)[0], 10)
    assert calls == [40] and len(ranked) == 10  # neither built a graph of its own
    # The lists DBA used are the graph's: augmenting with them given explicitly is the same store.
    given = augment_store(store, neighbors=10, neighbor_lists=np.asarray(ids[:, :10]))
    assert np.array_equal(augmented.embeddings_of(["img7.png"]), given.embeddings_of(["img7.png"]))


def test_without_a_kept_graph_they_build_it_once_for_everyone(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store()
    calls = _counted(monkeypatch)
    augment_store(store, neighbors=10)
    ids, _ = galleria.neighbor_graph(store, 10)
    assert calls == [10] and ids.shape == (120, 10)  # the graph DBA asked for is the store's
