"""Checks the store applies at its public boundary (arguments, embedders and their output)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from galleria._validation import check_choice, check_nonnegative_float, check_positive_int
from galleria.index import INDEX_NAMES, SearchIndex, create_index, validate_index_params
from galleria.index.base import SPACES

__all__ = [
    "check_embedder",
    "check_embedding_output",
    "check_query_vectors",
    "check_retrieval_args",
    "drop_duplicates",
    "resolve_index",
]


def check_embedder(embedder: Any, *, allow_none: bool) -> Any:
    """Return ``embedder`` if it has a callable ``embed`` (or is None where allowed), else TypeError."""
    if embedder is None and allow_none:
        return None
    if not callable(getattr(embedder, "embed", None)):
        raise TypeError(f"embedder must have an embed(images) method, got {type(embedder).__name__}")
    return embedder


def resolve_index(search_index: Any, space: Any, index_params: Any) -> SearchIndex:
    """Turn the store's ``search_index`` / ``space`` / ``index_params`` arguments into an index object.

    ``None`` means ``"exact"``. A name from ``INDEX_NAMES`` creates a fresh index in ``space``
    (``"cosine"`` when None) with ``index_params``. A :class:`SearchIndex` instance (for example an
    :class:`~galleria.index.ExternalSearchIndex`) is used as it is: its space is its own, so
    ``space`` must be None or agree with it, and ``index_params`` must be None.
    """
    if space is not None:
        check_choice("space", space, SPACES)
    if search_index is None or isinstance(search_index, str):
        name = check_choice("search_index", "exact" if search_index is None else search_index, INDEX_NAMES)
        params = validate_index_params(name, index_params)
        return create_index(name, "cosine" if space is None else space, params)
    if isinstance(search_index, SearchIndex):
        if space is not None and space != search_index.space:
            raise ValueError(
                f"space={space!r} disagrees with the given search index, whose space is "
                f"{search_index.space!r}; leave space=None to use the index's own"
            )
        if index_params is not None:
            raise ValueError(
                "index_params only apply to a named index ('exact' or 'hnsw'), not to an index object"
            )
        return search_index
    raise TypeError(
        f"search_index must be None, one of {INDEX_NAMES} or a SearchIndex such as ExternalSearchIndex, "
        f"got {type(search_index).__name__}"
    )


def check_embedding_output(output: Any, count: int, dim: int | None, what: str) -> np.ndarray:
    """Check what an embedder returned for ``count`` inputs: an (count, d) finite array, d == dim if known."""
    array = np.asarray(output)
    if array.dtype == np.bool_ or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise ValueError(f"the embedder returned a non-numeric array (dtype {array.dtype}) for {what}")
    if array.ndim != 2 or array.shape[0] != count or array.shape[1] == 0:
        raise ValueError(
            f"the embedder returned shape {array.shape} for {count} {what}; expected ({count}, dim)"
        )
    if dim is not None and array.shape[1] != dim:
        raise ValueError(
            f"the embedder returned dimension {array.shape[1]} for {what}, "
            f"but the index holds dimension {dim}"
        )
    result = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(result).all():
        raise ValueError(f"the embedder returned NaN or infinite values for {what}")
    return result


def check_query_vectors(name: str, vectors: Any, dim: int | None) -> np.ndarray:
    """Return query ``vectors`` ((d,) or (q, d), numeric, finite) as a (q, d) float32 array."""
    array = np.asarray(vectors)
    if array.dtype == np.bool_ or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise TypeError(f"{name} must be a numeric array, got dtype {array.dtype}")
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(
            f"{name} must be a (dim,) or a non-empty (q, dim) array, got shape {np.shape(vectors)}"
        )
    if dim is not None and array.shape[1] != dim:
        raise ValueError(f"{name} have dimension {array.shape[1]}, but the store holds dimension {dim}")
    result = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(result).all():
        raise ValueError(f"{name} contain NaN or infinite values")
    return result


def check_retrieval_args(k: Any, expansion_alpha: Any, expansion_neighbors: Any) -> tuple[int, float, int]:
    """Check ``k``, ``expansion_alpha`` and ``expansion_neighbors`` of a retrieval call."""
    return (
        check_positive_int("k", k),
        check_nonnegative_float("expansion_alpha", expansion_alpha),
        check_positive_int("expansion_neighbors", expansion_neighbors),
    )


def drop_duplicates(paths: list[str], name: str, known: set[str] | dict[str, int] | None = None) -> list[str]:
    """Keep the first occurrence of every path (and drop those in ``known``), warning about any dropped."""
    seen: set[str] = set()
    kept: list[str] = []
    dropped: list[str] = []
    for path in paths:
        if path in seen or (known is not None and path in known):
            dropped.append(path)
            continue
        seen.add(path)
        kept.append(path)
    if dropped:
        shown = ", ".join(repr(path) for path in dropped[:5])
        more = f" and {len(dropped) - 5} more" if len(dropped) > 5 else ""
        warnings.warn(
            f"{name}: dropped {len(dropped)} duplicate path(s) (first occurrence kept): {shown}{more}",
            UserWarning,
            stacklevel=3,
        )
    return kept
