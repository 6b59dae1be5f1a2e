"""galleria — search, re-rank and evaluate image galleries.

The public names are imported lazily, so ``import galleria`` stays cheap and optional
dependencies (torch, open_clip) are only touched when their objects are used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "recall_at_k": "galleria.metrics",
    "retrieval_ranks": "galleria.metrics",
    "ranks_from_embeddings": "galleria.metrics",
    "image_text_retrieval": "galleria.metrics",
    "Candidate": "galleria.store",
    "InMemoryImageEmbeddingStore": "galleria.store",
    "ExactIndex": "galleria.index",
    "HnswIndex": "galleria.index",
    "ExternalSearchIndex": "galleria.index",
    "PixelEmbedder": "galleria.embedders",
    "ClipEmbedder": "galleria.embedders",
    "TimmEmbedder": "galleria.embedders",
    "KReciprocalReranker": "galleria.rerank",
    "k_reciprocal_rerank": "galleria.rerank",
    "k_reciprocal_rerank_features": "galleria.rerank",
    "alpha_query_expansion": "galleria.expansion",
    "tune": "galleria.tune",
}

__all__ = [
    "Candidate",
    "ClipEmbedder",
    "ExactIndex",
    "ExternalSearchIndex",
    "HnswIndex",
    "InMemoryImageEmbeddingStore",
    "KReciprocalReranker",
    "PixelEmbedder",
    "TimmEmbedder",
    "__version__",
    "alpha_query_expansion",
    "image_text_retrieval",
    "k_reciprocal_rerank",
    "k_reciprocal_rerank_features",
    "ranks_from_embeddings",
    "recall_at_k",
    "retrieval_ranks",
    "tune",
]

if TYPE_CHECKING:
    from galleria.embedders import ClipEmbedder, PixelEmbedder, TimmEmbedder
    from galleria.expansion import alpha_query_expansion
    from galleria.index import ExactIndex, ExternalSearchIndex, HnswIndex
    from galleria.metrics import image_text_retrieval, ranks_from_embeddings, recall_at_k, retrieval_ranks
    from galleria.rerank import KReciprocalReranker, k_reciprocal_rerank, k_reciprocal_rerank_features
    from galleria.store import Candidate, InMemoryImageEmbeddingStore
    from galleria.tune import tune


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'galleria' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
