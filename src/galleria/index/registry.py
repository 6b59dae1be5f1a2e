"""Index names, parameter validation and construction by name (what the store and its files use)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from galleria._validation import check_choice
from galleria.index.base import SPACES, SearchIndex
from galleria.index.exact import ExactIndex
from galleria.index.external import ExternalSearchIndex
from galleria.index.hnsw import HnswIndex, validate_hnsw_params
from galleria.index.ivfpq import IvfPqIndex, validate_ivfpq_params
from galleria.index.milvus import MilvusIndex

__all__ = ["FAISS_BLOBS", "INDEX_NAMES", "create_index", "index_from_bytes", "validate_index_params"]

#: Built-in indexes that can be created by name.
INDEX_NAMES: tuple[str, ...] = ("exact", "hnsw", "ivfpq")
_SERIALISED_NAMES: tuple[str, ...] = ("exact", "hnsw", "ivfpq", "milvus", "external")


def validate_index_params(name: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check the parameters of the built-in index ``name``; return them complete (defaults filled in).

    Call it before any work starts: unknown names raise ValueError naming them, values of the wrong
    kind TypeError, out-of-range values ValueError. The exact index takes no parameters.

    Examples
    --------
    >>> validate_index_params("exact", None)
    {}
    >>> validate_index_params("hnsw", {"search_candidates": 128})["search_candidates"]
    128
    """
    check_choice("search_index", name, INDEX_NAMES)
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"index_params must be a mapping or None, got {type(params).__name__}")
    if name == "exact":
        if params:
            names = sorted(map(str, params))
            raise ValueError(f"the exact index takes no parameters, got index_params with {names}")
        return {}
    if name == "ivfpq":
        return validate_ivfpq_params(params)
    return validate_hnsw_params(params)


def create_index(name: str, space: str, params: Mapping[str, Any] | None = None) -> SearchIndex:
    """Create an empty built-in index by name (``"exact"``, ``"hnsw"`` or ``"ivfpq"``) in ``space``.

    Examples
    --------
    >>> create_index("hnsw", "l2", {"graph_degree": 8}).params()["graph_degree"]
    8
    """
    checked = validate_index_params(name, params)
    check_choice("space", space, SPACES)
    if name == "exact":
        return ExactIndex(space)
    if name == "ivfpq":
        return IvfPqIndex(space, **checked)
    return HnswIndex(space, **checked)


#: Per serialised index type, the arrays of its container that hold faiss's binary format: a store
#: file's loader hands faiss these bytes where they lie instead of reading them into an array.
FAISS_BLOBS: dict[str, frozenset[str]] = {
    "hnsw": frozenset({"graph"}),
    "ivfpq": frozenset({"faiss"}),
    "external": frozenset({"faiss"}),
}


def index_from_bytes(name: str, data: Any) -> SearchIndex:
    """Rebuild an index of type ``name`` (exact, hnsw, ivfpq, milvus or external) from its ``to_bytes()``.

    ``data`` may be bytes, a bytearray, a memoryview, a 1-D uint8 array, or a container a store
    file's loader has already read (:class:`galleria.index._serial.Unpacked`). Corrupt, truncated or
    mismatched data raises ValueError; nothing is unpickled.
    """
    check_choice("name", name, _SERIALISED_NAMES)
    if name == "exact":
        return ExactIndex.from_bytes(data)
    if name == "hnsw":
        return HnswIndex.from_bytes(data)
    if name == "ivfpq":
        return IvfPqIndex.from_bytes(data)
    if name == "milvus":
        return MilvusIndex.from_bytes(data)  # reconnects to the recorded uri and collection
    return ExternalSearchIndex.from_bytes(data)
