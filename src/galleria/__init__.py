"""galleria — search, re-rank and evaluate image galleries.

The public names are imported lazily, so ``import galleria`` stays cheap and optional
dependencies (torch, open_clip) are only touched when their objects are used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from galleria._version import __version__

_EXPORTS: dict[str, str] = {
    "Searcher": "galleria.retrieval",
    "RetrievalConfig": "galleria.retrieval",
    "recall_at_k": "galleria.metrics",
    "retrieval_ranks": "galleria.metrics",
    "ranks_from_embeddings": "galleria.metrics",
    "image_text_retrieval": "galleria.metrics",
    "Candidate": "galleria.store",
    "InMemoryImageEmbeddingStore": "galleria.store",
    "ExactIndex": "galleria.index",
    "HnswIndex": "galleria.index",
    "ExternalSearchIndex": "galleria.index",
    "IvfPqIndex": "galleria.index",
    "MilvusIndex": "galleria.index",
    "build_with_ray": "galleria.engines",
    "PixelEmbedder": "galleria.embedders",
    "ClipEmbedder": "galleria.embedders",
    "TimmEmbedder": "galleria.embedders",
    "KReciprocalReranker": "galleria.rerank",
    "k_reciprocal_rerank": "galleria.rerank",
    "k_reciprocal_rerank_features": "galleria.rerank",
    "iter_k_reciprocal_rerank_features": "galleria.rerank",
    "reid_evaluate": "galleria.metrics",
    "revisited_evaluate": "galleria.metrics",
    "precision_at_1": "galleria.metrics",
    "r_precision": "galleria.metrics",
    "map_at_r": "galleria.metrics",
    "alpha_query_expansion": "galleria.expansion",
    "GalleriaWarning": "galleria._warnings",
    "SkippedImageWarning": "galleria._warnings",
    "PluginWarning": "galleria._warnings",
    "PluginError": "galleria._plugin_guard",
    "tune_gallery": "galleria.tune",
    "neighbor_graph": "galleria.store.graph",
    "duplicates": "galleria.curation.dedup",
}

__all__ = [
    "Candidate",
    "ClipEmbedder",
    "ExactIndex",
    "ExternalSearchIndex",
    "GalleriaWarning",
    "HnswIndex",
    "InMemoryImageEmbeddingStore",
    "IvfPqIndex",
    "KReciprocalReranker",
    "MilvusIndex",
    "PixelEmbedder",
    "PluginError",
    "PluginWarning",
    "RetrievalConfig",
    "Searcher",
    "SkippedImageWarning",
    "TimmEmbedder",
    "__version__",
    "alpha_query_expansion",
    "build_with_ray",
    "duplicates",
    "image_text_retrieval",
    "iter_k_reciprocal_rerank_features",
    "k_reciprocal_rerank",
    "k_reciprocal_rerank_features",
    "map_at_r",
    "neighbor_graph",
    "precision_at_1",
    "r_precision",
    "ranks_from_embeddings",
    "recall_at_k",
    "reid_evaluate",
    "retrieval_ranks",
    "revisited_evaluate",
    "tune",
    "tune_gallery",
]

if TYPE_CHECKING:
    from galleria import tune
    from galleria._plugin_guard import PluginError
    from galleria._warnings import GalleriaWarning, PluginWarning, SkippedImageWarning
    from galleria.curation.dedup import duplicates
    from galleria.embedders import ClipEmbedder, PixelEmbedder, TimmEmbedder
    from galleria.engines import build_with_ray
    from galleria.expansion import alpha_query_expansion
    from galleria.index import ExactIndex, ExternalSearchIndex, HnswIndex, IvfPqIndex, MilvusIndex
    from galleria.metrics import (
        image_text_retrieval,
        map_at_r,
        precision_at_1,
        r_precision,
        ranks_from_embeddings,
        recall_at_k,
        reid_evaluate,
        retrieval_ranks,
        revisited_evaluate,
    )
    from galleria.rerank import (
        KReciprocalReranker,
        iter_k_reciprocal_rerank_features,
        k_reciprocal_rerank,
        k_reciprocal_rerank_features,
    )
    from galleria.retrieval import RetrievalConfig, Searcher
    from galleria.store import Candidate, InMemoryImageEmbeddingStore
    from galleria.store.graph import neighbor_graph
    from galleria.tune import tune_gallery


def __getattr__(name: str) -> Any:
    if name == "tune":  # the package (calling it is the deprecated spelling of tune_gallery)
        return importlib.import_module("galleria.tune")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'galleria' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    if module.startswith(("galleria.store", "galleria.retrieval")):
        # The re-rankers register the codecs of the records they keep in store files
        # (galleria.store.extensions), so a store reached from here reads them, as it always has.
        importlib.import_module("galleria.rerank")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
