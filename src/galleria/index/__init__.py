"""Search indexes: exact (numpy/BLAS), HNSW and IVF-PQ (faiss), Milvus, and wrapped user faiss indexes.

All follow :class:`SearchIndex`: rows are positions, scores are distances for the built-in indexes.
"""

from __future__ import annotations

from galleria.index._checks import MAX_MAGNITUDE, all_finite, check_magnitude, check_vectors, first_oversized
from galleria.index._faiss import deserialize
from galleria.index._ivfpq_build import MIN_MEASURED_ROWS, SAMPLE_QUERIES, measure_recall, tune_probes
from galleria.index._ivfpq_params import DEFAULT_RECALL_TARGET, IVFPQ_PARAMETERS
from galleria.index._ivfpq_ray import ray_module
from galleria.index._serial import Packed, Unpacked
from galleria.index.base import SPACES, SearchIndex, Space
from galleria.index.exact import ExactIndex
from galleria.index.external import ExternalSearchIndex
from galleria.index.hnsw import HNSW_PARAMETERS, HnswIndex
from galleria.index.ivfpq import IvfPqIndex
from galleria.index.milvus import MilvusIndex
from galleria.index.registry import INDEX_NAMES, create_index, index_from_bytes, validate_index_params

__all__ = [
    "DEFAULT_RECALL_TARGET",
    "HNSW_PARAMETERS",
    "INDEX_NAMES",
    "IVFPQ_PARAMETERS",
    "MAX_MAGNITUDE",
    "MIN_MEASURED_ROWS",
    "SAMPLE_QUERIES",
    "SPACES",
    "ExactIndex",
    "ExternalSearchIndex",
    "HnswIndex",
    "IvfPqIndex",
    "MilvusIndex",
    "Packed",
    "SearchIndex",
    "Space",
    "Unpacked",
    "all_finite",
    "check_magnitude",
    "check_vectors",
    "create_index",
    "deserialize",
    "first_oversized",
    "index_from_bytes",
    "measure_recall",
    "ray_module",
    "tune_probes",
    "validate_index_params",
]
