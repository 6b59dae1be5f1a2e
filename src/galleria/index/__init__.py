"""Search indexes: exact (numpy/BLAS), HNSW and IVF-PQ (faiss), Milvus, and wrapped user faiss indexes.

All follow :class:`SearchIndex`: rows are positions, scores are distances for the built-in indexes.
"""

from __future__ import annotations

from galleria.index._ivfpq_params import IVFPQ_PARAMETERS
from galleria.index.base import SPACES, SearchIndex, Space
from galleria.index.exact import ExactIndex
from galleria.index.external import ExternalSearchIndex
from galleria.index.hnsw import HNSW_PARAMETERS, HnswIndex
from galleria.index.ivfpq import IvfPqIndex
from galleria.index.milvus import MilvusIndex
from galleria.index.registry import INDEX_NAMES, create_index, index_from_bytes, validate_index_params

__all__ = [
    "HNSW_PARAMETERS",
    "INDEX_NAMES",
    "IVFPQ_PARAMETERS",
    "SPACES",
    "ExactIndex",
    "ExternalSearchIndex",
    "HnswIndex",
    "IvfPqIndex",
    "MilvusIndex",
    "SearchIndex",
    "Space",
    "create_index",
    "index_from_bytes",
    "validate_index_params",
]
