"""Searching a store: by image, text or vector, with optional alpha query expansion."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from galleria.embedders.base import batch_size_of
from galleria.expansion import EXPANSION, alpha_query_expansion, fill_expansion
from galleria.images.queries import as_image_list, as_text_list
from galleria.images.reading import reader_for
from galleria.store._checks import check_query_vectors, check_retrieval_args
from galleria.store._core import StoreCore
from galleria.store._embedding import check_directions, embed_queries
from galleria.store._snapshot import store_statistics
from galleria.store.candidate import Candidate

__all__ = ["RetrievalMixin"]

#: Queries expanded together in one αQE block (bounds the (q, m, d) neighbour array).
_EXPANSION_BLOCK = 256


class RetrievalMixin(StoreCore):
    """The ``retrieve_*`` methods of :class:`~galleria.InMemoryImageEmbeddingStore`."""

    # ------------------------------------------------------------------ retrieval

    def retrieve_top_k_similar(
        self,
        queries: Any,
        k: int,
        *,
        query_expansion: bool = False,
        expansion_alpha: float | None = None,
        expansion_neighbors: int | None = None,
    ) -> list[list[Candidate]]:
        """Find the ``k`` gallery images nearest to each query image.

        Parameters
        ----------
        queries
            One image ((H, W, 3) uint8 array, PIL image or path), a list of them, or an
            (N, H, W, 3) uint8 array.
        k : int
            Results per query; above the gallery size the whole gallery is returned.
        query_expansion : bool
            Apply alpha query expansion (``docs/reranking.md``) before the final search.
        expansion_alpha : float, optional
            αQE exponent (finite, ≥ 0). None (the default): the adaptive rule's, read from this
            gallery (3; see :func:`galleria.rerank.adaptive.params_from_statistics`).
        expansion_neighbors : int, optional
            Matches αQE reads back per query (fewer if the gallery is smaller). None (the default):
            the adaptive rule's, read from this gallery (2, or 1 where neighbours are not reciprocal).
            Until galleria 0.2.0 the defaults were the paper's α 3, n 50; pass them to keep that.

        Returns
        -------
        list of list of Candidate
            One list per query, best first, no padding.

        Raises
        ------
        TypeError, ValueError
            Bad arguments; query arrays of the wrong dtype (TypeError) or shape (ValueError); an
            embedder output of the wrong shape, NaN, or another dimension (ValueError).
        RuntimeError
            The store is not built, or has no embedder.
        ImageReadError
            A query path cannot be read.
        """
        checked = self._retrieval_args(k, expansion_alpha, expansion_neighbors, query_expansion)
        self._require_built()
        embedder = self._require_embedder("query images")
        images = as_image_list(queries, reader=reader_for(embedder))
        vectors = self._embed_queries(embedder.embed, images, "query images")
        return self._search(vectors, *checked)

    def retrieve_by_vector(
        self,
        vectors: Any,
        k: int,
        *,
        query_expansion: bool = False,
        expansion_alpha: float | None = None,
        expansion_neighbors: int | None = None,
    ) -> list[list[Candidate]]:
        """Find the ``k`` gallery images nearest to each query vector.

        ``vectors`` is one (d,) vector or a (q, d) array in the store's embedding space; the other
        arguments and the result are as in :meth:`retrieve_top_k_similar`.
        """
        checked = self._retrieval_args(k, expansion_alpha, expansion_neighbors, query_expansion)
        self._require_built()
        queries = check_query_vectors("vectors", vectors, self.dim, self.space)
        check_directions(queries, self._index.space, "vectors")
        return self._search(queries, *checked)

    def retrieve_by_text(
        self,
        texts: str | Sequence[str],
        k: int,
        *,
        query_expansion: bool = False,
        expansion_alpha: float | None = None,
        expansion_neighbors: int | None = None,
    ) -> list[list[Candidate]]:
        """Find the ``k`` gallery images nearest to each text (needs an embedder with ``embed_text``).

        Raises
        ------
        TypeError
            The embedder has no text side, or ``texts`` is not a string / list of strings.
        """
        checked = self._retrieval_args(k, expansion_alpha, expansion_neighbors, query_expansion)
        self._require_built()
        embedder = self._require_embedder("texts")
        if not callable(getattr(embedder, "embed_text", None)):
            raise TypeError(f"the store's embedder ({type(embedder).__name__}) has no embed_text method")
        vectors = self._embed_queries(embedder.embed_text, as_text_list(texts), "texts")
        return self._search(vectors, *checked)

    def _retrieval_args(
        self, k: Any, alpha: Any, neighbors: Any, query_expansion: Any
    ) -> tuple[int, float, int, bool]:
        """The checked arguments of a retrieval call, αQE's left-out values read from this gallery."""
        if query_expansion is True and (alpha is None or neighbors is None):
            self._require_built()
            rule = EXPANSION.resolve(lambda: store_statistics(self))  # the one resolver of adaptive values
            alpha, neighbors = fill_expansion(rule, alpha, neighbors)
        alpha = 3.0 if alpha is None else alpha  # unused without expansion: any valid value
        neighbors = 1 if neighbors is None else neighbors
        return check_retrieval_args(k, alpha, neighbors, query_expansion)

    def _embed_queries(self, embed: Any, items: list[Any], what: str) -> np.ndarray:
        batch = batch_size_of(self._embedder)
        return embed_queries(embed, items, batch, self.dim, self._index.space, what)

    def _search(
        self, queries: np.ndarray, k: int, alpha: float, neighbors: int, expand: bool
    ) -> list[list[Candidate]]:
        """Search (q, d) float32 queries, optionally after αQE, and turn rows into candidates."""
        if self._query_transform is not None:  # a normalised view: the queries as its gallery
            queries = self._query_transform(queries)
        with self._lock.reading():
            size = len(self._paths)
            if size == 0:
                return [[] for _ in range(len(queries))]
            if expand:
                queries = np.concatenate(
                    [
                        self._expand(queries[start : start + _EXPANSION_BLOCK], alpha, min(neighbors, size))
                        for start in range(0, len(queries), _EXPANSION_BLOCK)
                    ]
                )
            ids, scores = self._index.search(queries, k)
            paths = self._paths
        if getattr(self._index, "higher_is_better", False):  # an external inner-product index: as
            scores = np.float32(1.0) - scores  # every store, a distance (1 - <q, v>, ascending)
        make, token, table = Candidate._from_store, self._id, paths.token
        return [
            [
                make(paths[row], score, token, (table, row))
                for row, score in zip(id_row, score_row, strict=True)
                if row >= 0 and math.isfinite(score)  # a non-finite score is never returned
            ]
            for id_row, score_row in zip(ids.tolist(), scores.tolist(), strict=True)
        ]

    def _expand(self, queries: np.ndarray, alpha: float, neighbors: int) -> np.ndarray:
        ids, _ = self._index.search(queries, neighbors)
        valid = ids >= 0
        padded = np.zeros((*ids.shape, queries.shape[1]), dtype=np.float32)
        padded[valid] = self._gallery_vectors(ids[valid])
        return alpha_query_expansion(queries, padded, alpha=alpha, mask=valid)
