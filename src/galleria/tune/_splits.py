"""Validation splits of a labelled gallery and the scores of one setting on them."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from galleria.datasets.folder import stratified_split
from galleria.metrics import hit_rate, mean_average_precision, mean_reciprocal_rank, ranked_relevance
from galleria.retrieval import RetrievalConfig, Searcher
from galleria.store import Candidate, InMemoryImageEmbeddingStore
from galleria.tune._constants import _AUGMENTED, _DBA_MAX, _DEPTH


def score_lists(
    lists: Sequence[Sequence[Candidate]],
    query_labels: Sequence[Hashable],
    gallery_labels: Mapping[str, Hashable],
) -> dict[str, float]:
    """Recall@1, Recall@5, mAP@100, MRR (within 100) and mAP@R of ranked lists, against labels.

    mAP@R averages, over queries, ``Σ_{j ≤ R} P@j · rel_j / R`` with ``R`` the query's relevant
    gallery items; lists shorter than ``R`` count the missing positions as misses.
    """
    relevance = ranked_relevance(lists, query_labels, gallery_labels)
    hits = np.asarray(relevance.hits, dtype=bool)
    relevant = np.asarray(relevance.n_relevant, dtype=np.int64)
    top = hits[:, :_DEPTH]
    recall_1, recall_5 = hit_rate(top, [1, 5])
    positions = np.arange(1, hits.shape[1] + 1)
    precision = np.cumsum(hits, axis=1) / positions
    within = positions[None, :] <= relevant[:, None]
    map_r = float(np.mean((precision * hits * within).sum(axis=1) / np.maximum(relevant, 1)))
    return {
        "recall@1": float(recall_1),
        "recall@5": float(recall_5),
        "map@100": float(mean_average_precision(top, relevant, _DEPTH)),
        "mrr": float(mean_reciprocal_rank(top)),
        "map@r": map_r,
    }


@dataclass
class _Split:
    """One validation split: a store over the validation gallery and the validation queries' vectors."""

    seed: int
    store: InMemoryImageEmbeddingStore
    queries: np.ndarray
    query_labels: list[Hashable]
    gallery_labels: dict[str, Hashable]
    depth: int
    #: Prepared copies of the validation gallery, by (vector_power, centre[, neighbors, alpha]).
    normalised: dict[tuple[Any, ...], InMemoryImageEmbeddingStore] = field(default_factory=dict)
    augmented: dict[tuple[Any, ...], InMemoryImageEmbeddingStore] = field(default_factory=dict)
    neighbour_lists: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict)
    searches: dict[tuple[Any, ...], list[list[Candidate]]] = field(default_factory=dict)
    #: Plain retrieval's first result per validation query (set by its run).
    plain_firsts: list[str | None] | None = None

    def _prepared(
        self, power: float = 1.0, centre: bool = False, neighbors: int = 0, alpha: float = 3.0
    ) -> InMemoryImageEmbeddingStore:
        """The validation gallery normalised and/or DBA-augmented (a few copies kept for later trials)."""
        from galleria.rerank import augment_store
        from galleria.rerank.base import top_similar
        from galleria.rerank.normalise import normalised_store

        base_key: tuple[Any, ...] = (power, centre)
        base = self.store
        if base_key != (1.0, False):
            if base_key not in self.normalised:
                _make_room(self.normalised, 2)
                self.normalised[base_key] = normalised_store(self.store, vector_power=power, centre=centre)
            base = self.normalised[base_key]
        if not neighbors:
            return base
        key = (*base_key, neighbors, alpha)
        if key not in self.augmented:
            if base_key not in self.neighbour_lists:  # once per gallery, for the largest neighbourhood
                unit = base.embeddings
                _make_room(self.neighbour_lists, 2)
                self.neighbour_lists[base_key] = top_similar(
                    unit, unit, min(_DBA_MAX, len(unit) - 1), exclude_self=True
                )[0]
            _make_room(self.augmented, 2)
            self.augmented[key] = augment_store(
                base, neighbors=neighbors, alpha=alpha, neighbor_lists=self.neighbour_lists[base_key]
            )
        return self.augmented[key]

    def run(self, config: RetrievalConfig) -> dict[str, float]:
        prepared = None
        config = config.resolve(self.store)  # what the Searcher reads from this split's gallery
        if config.rerank:
            params = config.rerank_params
            if config.rerank_method == "dba":
                neighbors, alpha = int(params.get("neighbors", 10)), float(params.get("alpha", 3.0))
                prepared = self._prepared(neighbors=neighbors, alpha=alpha)
            elif config.rerank_method in _AUGMENTED:  # a diffusion on a prepared gallery
                prepared = self._prepared(
                    float(params.get("vector_power", 1.0)),
                    bool(params.get("centre", False)),
                    int(params.get("dba_neighbors", 0)),
                    float(params.get("dba_alpha", 3.0)),
                )
        # The one path (the prepared copies kept here, so trials share them)
        searcher = Searcher(self.store, config, prepared=prepared)
        config, store = searcher.config, searcher.searched
        k = min(searcher.depth(self.depth), len(store))
        key = (id(store), k, config.query_expansion, config.expansion_alpha, config.expansion_neighbors)
        lists = self.searches.get(key) if not config.query_expansion else None
        if lists is None:
            lists = searcher.candidates(self.queries, k)
            if not config.query_expansion and store is self.store:
                self.searches[key] = lists
        lists = searcher.finish(lists, k)
        scores = score_lists(lists, self.query_labels, self.gallery_labels)
        firsts = [candidates[0].path if candidates else None for candidates in lists]
        if not config.rerank and not config.query_expansion:
            self.plain_firsts = firsts
        if self.plain_firsts is not None:  # the share of queries whose first result is not plain's
            moved = sum(a != b for a, b in zip(firsts, self.plain_firsts, strict=True))
            scores["first_changed"] = moved / max(1, len(firsts))
        return scores


def _make_room(kept: dict[Any, Any], most: int) -> None:
    """Drop the oldest entries of ``kept`` until one more fits within ``most``."""
    while len(kept) >= most:
        kept.pop(next(iter(kept)))


def _labels_of(store: InMemoryImageEmbeddingStore, labels: Any) -> list[Hashable]:
    paths = store.paths
    if isinstance(labels, Mapping):
        missing = [path for path in paths if path not in labels]
        if missing:
            raise ValueError(f"labels has no label for {len(missing)} store path(s), e.g. {missing[0]!r}")
        return [labels[path] for path in paths]
    if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence):
        raise TypeError(f"labels must be a mapping path → label or a sequence, got {type(labels).__name__}")
    if len(labels) != len(paths):
        raise ValueError(f"labels must hold one label per store path ({len(paths)}), got {len(labels)}")
    return list(labels)


def _make_split(
    store: InMemoryImageEmbeddingStore,
    vectors: np.ndarray,
    labels: list[Hashable],
    seed: int,
    n_queries: int,
    metric: str,
) -> _Split:
    query_rows, gallery_rows = stratified_split(labels, n_queries=n_queries, seed=seed)
    paths = store.paths
    gallery_paths = [paths[row] for row in gallery_rows.tolist()]
    gallery = InMemoryImageEmbeddingStore.from_embeddings(
        gallery_paths, vectors[gallery_rows], search_index="exact", space=store.space
    )
    gallery_labels = {paths[row]: labels[row] for row in gallery_rows.tolist()}
    query_labels = [labels[row] for row in query_rows.tolist()]
    depth = _DEPTH
    if metric == "map@r":
        counts: dict[Hashable, int] = {}
        for label in gallery_labels.values():
            counts[label] = counts.get(label, 0) + 1
        depth = max(_DEPTH, max(counts[label] for label in query_labels))
    return _Split(seed, gallery, vectors[query_rows], query_labels, gallery_labels, min(depth, len(gallery)))
