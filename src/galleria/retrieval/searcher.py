"""The one retrieval path: search → αQE → pool → re-rank → tail, for every caller.

:class:`Searcher` binds a :class:`~galleria.retrieval.RetrievalConfig` to a built store once: it reads
the values the configuration leaves to the gallery (adaptive αQE and re-ranking parameters) from
*that* store, builds the re-ranker, and swaps in the store the re-ranker searches (DBA's augmented
gallery, a power-normalised view). Then it answers queries of any kind — vectors, gallery paths,
images or texts — with ranked :class:`~galleria.store.Candidate` lists. ``galleria search``,
``evaluate``, ``demo``, the tuner's trials, the page and ``/api/search`` all answer through it, so a
configuration means the same on every one of them for the same gallery.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from galleria._validation import check_choice, check_positive_int
from galleria.retrieval.config import RetrievalConfig
from galleria.store import Candidate, InMemoryImageEmbeddingStore

__all__ = ["QUERY_KINDS", "Searcher"]

#: What a query can be: ``"auto"`` tells vectors (a 2-D float array) from images.
QUERY_KINDS: tuple[str, ...] = ("auto", "vector", "image", "text", "path")
#: Queries searched together in one call to the store (bounds αQE's neighbour block and memory).
QUERY_BATCH = 256


def _are_vectors(queries: Any) -> bool:
    return isinstance(queries, np.ndarray) and queries.ndim == 2 and queries.dtype.kind == "f"


class Searcher:
    """Answer queries on ``store`` the way ``config`` says, the same for every caller.

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        A built store: the gallery searched, whose statistics give the adaptive values.
    config : RetrievalConfig, optional
        The recipe (default: plain search).
    prepared : InMemoryImageEmbeddingStore, optional
        ``store`` already prepared as the method's parameters say (normalised, DBA-augmented), kept
        by a caller that tries many settings (the tuner); the re-ranker then uses it as it is.

    Attributes
    ----------
    config : RetrievalConfig
        The configuration with every value it uses (read from ``store`` where it left them out).
    searched : InMemoryImageEmbeddingStore
        The store the candidates come from: ``store``, or the re-ranker's prepared one.

    Examples
    --------
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c"], np.eye(3))
    >>> searcher = Searcher(store, RetrievalConfig("q", query_expansion=True))
    >>> searcher.config.expansion_neighbors, [c.path for c in searcher.search(np.eye(3)[:1], 2)[0]]
    (1, ['a', 'b'])
    """

    def __init__(
        self,
        store: InMemoryImageEmbeddingStore,
        config: RetrievalConfig | None = None,
        *,
        prepared: InMemoryImageEmbeddingStore | None = None,
    ) -> None:
        if not isinstance(store, InMemoryImageEmbeddingStore):
            raise TypeError(f"store must be an InMemoryImageEmbeddingStore, got {type(store).__name__}")
        if not store.is_built:
            raise RuntimeError("store is not built; call store.build_store() before searching")
        config = RetrievalConfig("search") if config is None else config
        if not isinstance(config, RetrievalConfig):
            raise TypeError(f"config must be a RetrievalConfig, got {type(config).__name__}")
        self.store = store
        self.config = config.resolve(store)
        self.reranker: Any = None
        self.searched = store
        if self.config.rerank:
            from galleria.rerank.registry import make_reranker

            base = store if prepared is None else prepared
            self.reranker = make_reranker(self.config.rerank_method, base, **self.config.reranker_params())
            self.searched = self.reranker.store

    def depth(self, k: int) -> int:
        """How many candidates a list of ``k`` results searches for: ``k``, or the pool when larger."""
        return max(k, self.config.pool) if self.config.rerank else k

    def used(self) -> dict[str, Any]:
        """The exact values this searcher answers with (what ``/api/search`` echoes)."""
        config = self.config
        result: dict[str, Any] = {"expand": config.query_expansion, "rerank": config.rerank}
        if config.query_expansion:
            result.update(alpha=config.expansion_alpha, neighbors=config.expansion_neighbors)
        if config.rerank:
            result.update(method=config.rerank_method, params=dict(config.rerank_params), pool=config.pool)
        return result

    def candidates(
        self, queries: Any, depth: int, *, kind: str = "auto", plain: bool = False
    ) -> list[list[Candidate]]:
        """The first stage: each query's ``depth`` nearest candidates (after αQE when it is on).

        ``plain`` searches ``store`` itself rather than the re-ranker's prepared store (the page's
        left column). Path queries are searched by their stored vectors, their files are not read.
        """
        depth = check_positive_int("depth", depth)
        kind = check_choice("kind", kind, QUERY_KINDS)
        if kind == "auto":
            kind = "vector" if _are_vectors(queries) else "image"
        target = self.store if plain else self.searched
        config = self.config
        expansion: dict[str, Any] = {
            "query_expansion": config.query_expansion,
            "expansion_alpha": config.expansion_alpha,
            "expansion_neighbors": config.expansion_neighbors,
        }
        if kind == "path":
            queries = self.store.embeddings_of(list(queries))
            kind = "vector"
        items: Any = queries if kind == "vector" else list(queries)
        retrieve = {
            "vector": target.retrieve_by_vector,
            "image": target.retrieve_top_k_similar,
            "text": target.retrieve_by_text,
        }[kind]
        lists: list[list[Candidate]] = []
        for start in range(0, len(items), QUERY_BATCH):
            lists.extend(retrieve(items[start : start + QUERY_BATCH], depth, **expansion))
        return lists

    def finish(self, lists: list[list[Candidate]], k: int) -> list[list[Candidate]]:
        """Re-rank each list's pool and keep ``k``: the pool re-ranked, then (``tail``) the rest in order."""
        if self.reranker is None:
            return [candidates[:k] for candidates in lists]
        pool = self.config.pool
        heads = self.reranker.rerank_batch([candidates[:pool] for candidates in lists], top_k=k)
        if not self.config.tail:
            return [head[:k] for head in heads]
        return [(head + candidates[pool:])[:k] for head, candidates in zip(heads, lists, strict=True)]

    def search(
        self,
        queries: Any,
        k: int,
        *,
        kind: str = "auto",
        exclude: Sequence[Any] | None = None,
    ) -> list[list[Candidate]]:
        """The ranked lists of ``queries``: ``k`` candidates each, best first.

        Parameters
        ----------
        queries
            A (q, d) float array of vectors (``kind="auto"`` or ``"vector"``), images (arrays, PIL
            images, files), texts (``kind="text"``) or gallery paths (``kind="path"``).
        k : int
            Results per query.
        exclude : sequence, optional
            Per query, a path or a collection of paths left out of its list (before re-ranking);
            each list still holds ``k`` candidates where the gallery has them. Path queries leave
            themselves out.
        """
        k = check_positive_int("k", k)
        if kind == "path" and exclude is None:
            exclude = list(queries)
        extra = 0 if exclude is None else max((_excluded_count(left) for left in exclude), default=0)
        depth = self.depth(k)
        lists = self.candidates(queries, depth + extra, kind=kind)
        if exclude is not None:
            lists = [
                [c for c in candidates if not _excluded(c.path, left_out)][:depth]
                for candidates, left_out in zip(lists, exclude, strict=True)
            ]
        return self.finish(lists, k)


def _excluded_count(left_out: Any) -> int:
    """How many candidates ``left_out`` can remove from one list (searched for on top of the depth)."""
    if left_out is None:
        return 0
    return 1 if isinstance(left_out, str) else len(left_out)


def _excluded(path: str, left_out: Any) -> bool:
    if left_out is None:
        return False
    if isinstance(left_out, str):
        return path == left_out
    return path in left_out
