"""Checks the store applies at its public boundary (arguments, embedders and their output)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Container
from typing import Any

import numpy as np

from galleria._validation import check_bool, check_choice, check_positive_int
from galleria.distances import prepare_vectors
from galleria.expansion import check_expansion_alpha
from galleria.index import INDEX_NAMES, SearchIndex, check_vectors, create_index, validate_index_params
from galleria.index.base import SPACES

__all__ = [
    "absolute_paths",
    "check_embedder",
    "check_embedder_dim",
    "check_embedding_output",
    "check_query_vectors",
    "check_retrieval_args",
    "check_rows_agree",
    "describe_paths",
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
    """Check what an embedder returned for ``count`` inputs: an (count, d) finite array, d == dim if known.

    Returns a float32 copy, never a view of the output: an embedder may reuse its output buffer.
    """
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
    result = np.array(array, dtype=np.float32, order="C", copy=True)
    if not np.isfinite(result).all():
        raise ValueError(f"the embedder returned NaN or infinite values for {what}")
    return result


def check_query_vectors(name: str, vectors: Any, dim: int | None, space: str | None = None) -> np.ndarray:
    """Return query ``vectors`` ((d,) or (q, d), numeric, finite; within the ``ip`` / ``l2`` bound of
    :func:`galleria.index._checks.check_vectors`) as a (q, d) float32 array."""
    array = vectors if isinstance(vectors, np.ndarray) else np.asarray(vectors)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[0] == 0:
        raise ValueError(
            f"{name} must be a (dim,) or a non-empty (q, dim) array, got shape {np.shape(vectors)}"
        )
    return check_vectors(name, array, dim, space)


def check_rows_agree(index: SearchIndex, vectors: np.ndarray) -> None:
    """Check that ``vectors`` (one per row of a filled ``index``) are the vectors the index holds.

    Only where the index can give its vectors back; they are compared as the index stores them
    (L2-normalised for cosine), with a float32 rounding tolerance. ValueError names the first row
    that differs.
    """
    if not index.can_reconstruct:
        return
    given = prepare_vectors(vectors, index.space)
    held = np.asarray(index.reconstruct(np.arange(len(index), dtype=np.int64)), dtype=np.float32)
    close = np.isclose(given, held, rtol=1e-4, atol=1e-5).all(axis=1)
    if not close.all():
        row = int(np.flatnonzero(~close)[0])
        raise ValueError(
            f"embeddings row {row} differs from row {row} of the vectors search_index already holds; "
            "pass embeddings=None to use the index's own vectors"
        )


def check_retrieval_args(
    k: Any, expansion_alpha: Any, expansion_neighbors: Any, query_expansion: Any
) -> tuple[int, float, int, bool]:
    """Check the arguments of a retrieval call; return them in the order ``_search`` takes them."""
    return (
        check_positive_int("k", k),
        check_expansion_alpha("expansion_alpha", expansion_alpha),
        check_positive_int("expansion_neighbors", expansion_neighbors),
        check_bool("query_expansion", query_expansion),
    )


def describe_paths(paths: list[str], shown: int = 5) -> str:
    """The first ``shown`` paths, quoted and comma-separated, then "and N more" if there are more.

    Examples
    --------
    >>> describe_paths(["a", "b", "c"], shown=2)
    "'a', 'b' and 1 more"
    """
    listed = ", ".join(repr(path) for path in paths[:shown])
    return listed + (f" and {len(paths) - shown} more" if len(paths) > shown else "")


def drop_duplicates(paths: list[str], name: str, known: Container[str] | None = None) -> list[str]:
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
        warnings.warn(
            f"{name}: dropped {len(dropped)} duplicate path(s) (first occurrence kept): "
            f"{describe_paths(dropped)}",
            UserWarning,
            stacklevel=3,
        )
    return kept


def absolute_paths(paths: list[str]) -> list[str]:
    """Image paths made absolute against the working directory (already absolute ones unchanged)."""
    isabs, absolute = os.path.isabs, os.path.abspath
    return [path if isabs(path) else absolute(path) for path in paths]


#: Side of the probe image embedded to learn an embedder's output dimension when it declares none.
_PROBE_SIDE = 32


def check_embedder_dim(embedder: Any, dim: int, name: str) -> None:
    """Check that ``embedder`` outputs ``dim``-dimensional vectors: ValueError naming ``name`` otherwise.

    Uses the embedder's ``dim`` attribute when it has one, else embeds one small grey probe image.
    """
    declared = getattr(embedder, "dim", None)
    if declared is None or isinstance(declared, bool) or not isinstance(declared, (int, np.integer)):
        probe = np.full((_PROBE_SIDE, _PROBE_SIDE, 3), 127, dtype=np.uint8)
        output = check_embedding_output(embedder.embed([probe]), 1, None, "a probe image")
        declared = output.shape[1]
    if int(declared) != dim:
        raise ValueError(
            f"{name} ({type(embedder).__name__}) outputs dimension {int(declared)}, "
            f"but the store holds vectors of dimension {dim}"
        )
