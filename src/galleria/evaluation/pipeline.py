"""Run retrieval configurations on a built store and score them against labels.

A result is relevant when its label equals the query's. Per configuration the pipeline reports
Recall@1 and Recall@5 (share of queries with a relevant result among the first K), mAP@100
(AP@100 normalised by min(R, 100), R the relevant gallery items), MRR (reciprocal rank of the first
relevant result within the first 100, 0 when there is none) and milliseconds per query — wall time
of the whole answer (reading and embedding the query, searching, expanding, re-ranking) divided by
the number of queries — plus the interpolated precision-recall curve over the full ranked lists.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from galleria._validation import check_positive_int
from galleria.metrics import (
    average_precision,
    hit_rate,
    interpolated_pr_curve,
    mean_reciprocal_rank,
    ranked_relevance,
)
from galleria.retrieval import Searcher
from galleria.retrieval.config import RetrievalConfig
from galleria.store import Candidate, InMemoryImageEmbeddingStore

__all__ = ["METRIC_DEPTH", "ConfigResult", "evaluate_retrieval"]

#: Depth of mAP and MRR (mAP@100, MRR within the first 100).
METRIC_DEPTH = 100
#: The K of the reported Recall@K values.
RECALL_KS: tuple[int, ...] = (1, 5)
#: Recall levels of the interpolated precision-recall curve: 0, 0.05, ..., 1.
PR_LEVELS = np.linspace(0.0, 1.0, 21)


@dataclass(frozen=True)
class ConfigResult:
    """The scores of one retrieval configuration on one query set."""

    config: RetrievalConfig
    n_queries: int
    recall_at_1: float
    recall_at_5: float
    map_at_100: float
    mrr: float
    ms_per_query: float
    #: Recall levels and interpolated precisions of the PR curve (equal lengths).
    pr_recall: np.ndarray
    pr_precision: np.ndarray
    #: AP@100 of every query, in query order (what ``map_at_100`` averages; empty when not kept).
    average_precisions: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def to_dict(self) -> dict[str, Any]:
        """The configuration's entry of ``metrics.json`` (see ``docs/report-schema.md``)."""
        return {
            "name": self.config.name,
            "title": self.config.title,
            "settings": self.config.settings(),
            "recall@1": self.recall_at_1,
            "recall@5": self.recall_at_5,
            "map@100": self.map_at_100,
            "mrr": self.mrr,
            "ms_per_query": self.ms_per_query,
        }


def _are_vectors(queries: Any) -> bool:
    """Whether ``queries`` is a 2-D float array of query vectors (rather than images or paths)."""
    return isinstance(queries, np.ndarray) and queries.ndim == 2 and queries.dtype.kind == "f"


def evaluate_retrieval(
    store: InMemoryImageEmbeddingStore,
    queries: Sequence[Any],
    query_labels: Sequence[Hashable],
    gallery_labels: Mapping[str, Hashable],
    configs: Sequence[RetrievalConfig],
    *,
    depth: int = 200,
    batch_size: int = 256,
    on_config: Callable[[RetrievalConfig], None] | None = None,
    on_lists: Callable[[RetrievalConfig, list[list[Candidate]]], None] | None = None,
) -> list[ConfigResult]:
    """Score each configuration on the same queries against the same built store.

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        A built store over the gallery; the query images must not be in it.
    queries : sequence
        Query images in any form the store's ``retrieve_top_k_similar`` takes (paths, arrays...),
        or a 2-D float array of query vectors in the store's space (answered by
        ``retrieve_by_vector``: nothing is embedded).
    query_labels : sequence of hashable
        The label of each query.
    gallery_labels : mapping of str to hashable
        The label of every gallery path in the store.
    configs : sequence of RetrievalConfig
        The configurations to run, in order; their names must differ.
    depth : int
        Length of each ranked list (metrics use the first 100; the PR curve uses all of it).
        A re-ranked configuration searches ``max(depth, pool)`` candidates and re-ranks the first
        ``pool`` of them; when ``pool < depth`` the rest follow in search order.
    batch_size : int
        Queries answered per call (a small untimed warm-up query runs first for each configuration).
    on_config : callable, optional
        Called with each configuration before it runs (progress reporting).
    on_lists : callable, optional
        Called with each configuration and its ranked lists (one per query, in query order) after
        it ran, e.g. to keep the lists an HTML report shows.

    Returns
    -------
    list of ConfigResult
        One per configuration, in order.

    Raises
    ------
    TypeError
        If ``store`` is not a store or ``configs`` holds something else than RetrievalConfig.
    ValueError
        If there are no queries, the label count differs from the query count, a query path is
        in the store, configurations share a name, a gallery path has no label, or a query's
        label has no gallery image.
    RuntimeError
        If the store is not built.
    """
    query_list, label_list, config_list = _checked_inputs(store, queries, query_labels, configs)
    depth = check_positive_int("depth", depth)
    batch_size = check_positive_int("batch_size", batch_size)
    _check_gallery(store, query_list, label_list, gallery_labels)
    results: list[ConfigResult] = []
    for config in config_list:
        # The one path: adaptive values are read from this gallery; DBA + αQE searches its augmented
        # store (made once, here, outside the timing).
        searcher = Searcher(store, config)
        config = searcher.config
        if on_config is not None:
            on_config(config)
        searcher.search(query_list[:1], depth)  # warm-up: lazy imports, thread pools
        lists: list[list[Candidate]] = []
        started = time.perf_counter()
        for start in range(0, len(query_list), batch_size):
            lists.extend(searcher.search(query_list[start : start + batch_size], depth))
        elapsed = time.perf_counter() - started
        results.append(_score(config, lists, label_list, gallery_labels, elapsed))
        if on_lists is not None:
            on_lists(config, lists)
    return results


def _checked_inputs(
    store: Any, queries: Sequence[Any], query_labels: Sequence[Hashable], configs: Sequence[RetrievalConfig]
) -> tuple[Any, list[Hashable], list[RetrievalConfig]]:
    """The queries, their labels and the configurations, checked (see :func:`evaluate_retrieval`)."""
    if not isinstance(store, InMemoryImageEmbeddingStore):
        raise TypeError(f"store must be an InMemoryImageEmbeddingStore, got {type(store).__name__}")
    if not store.is_built:
        raise RuntimeError("store is not built; call store.build_store() before evaluating")
    query_list: Any = queries if _are_vectors(queries) else list(queries)
    label_list = list(query_labels)
    if len(query_list) == 0:
        raise ValueError("queries must not be empty")
    if len(label_list) != len(query_list):
        raise ValueError(
            f"query_labels must hold one label per query, got {len(label_list)} for {len(query_list)} queries"
        )
    config_list = list(configs)
    if not config_list:
        raise ValueError("configs must not be empty")
    for position, config in enumerate(config_list):
        if not isinstance(config, RetrievalConfig):
            raise TypeError(f"configs[{position}] must be a RetrievalConfig, got {type(config).__name__}")
    names = [config.name for config in config_list]
    if len(set(names)) != len(names):
        raise ValueError(f"configs must have distinct names, got {names!r}")
    return query_list, label_list, config_list


def _check_gallery(
    store: InMemoryImageEmbeddingStore,
    query_list: Any,
    label_list: list[Hashable],
    gallery_labels: Mapping[str, Hashable],
) -> None:
    """ValueError when a query is in the gallery, a gallery path has no label or a query label no image."""
    in_gallery = [query for query in query_list if isinstance(query, str) and query in store]
    if in_gallery:
        raise ValueError(
            f"{len(in_gallery)} query image(s) are also in the gallery, e.g. {in_gallery[0]!r}; "
            "split queries from the gallery so nothing matches itself"
        )
    unlabelled = [path for path in store.paths if path not in gallery_labels]
    if unlabelled:
        raise ValueError(
            f"gallery_labels has no label for {len(unlabelled)} store path(s), e.g. {unlabelled[0]!r}"
        )
    present = {gallery_labels[path] for path in store.paths}
    orphans = [label for label in label_list if label not in present]
    if orphans:
        raise ValueError(
            f"query label {orphans[0]!r} has no image in the gallery, so no result can be relevant"
        )


def _score(
    config: RetrievalConfig,
    lists: list[list[Candidate]],
    query_labels: list[Hashable],
    gallery_labels: Mapping[str, Hashable],
    elapsed: float,
) -> ConfigResult:
    relevance = ranked_relevance(lists, query_labels, gallery_labels)
    hits = np.asarray(relevance.hits, dtype=bool)
    n_relevant = np.asarray(relevance.n_relevant)
    top = hits[:, :METRIC_DEPTH]
    recall_1, recall_5 = hit_rate(top, list(RECALL_KS))
    levels, precisions = interpolated_pr_curve(hits, n_relevant, PR_LEVELS)
    per_query = average_precision(top, n_relevant, METRIC_DEPTH)
    return ConfigResult(
        config=config,
        n_queries=len(lists),
        recall_at_1=round(float(recall_1), 4),
        recall_at_5=round(float(recall_5), 4),
        map_at_100=round(float(per_query.mean()), 4),
        mrr=round(float(mean_reciprocal_rank(top)), 4),
        ms_per_query=round(1000.0 * elapsed / len(lists), 3),
        pr_recall=np.asarray(levels, dtype=np.float64),
        pr_precision=np.asarray(precisions, dtype=np.float64),
        average_precisions=np.asarray(per_query, dtype=np.float64),
    )
