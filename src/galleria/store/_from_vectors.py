"""Validated gallery state from vectors computed elsewhere (what ``from_embeddings`` is built on)."""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._validation import check_path_list
from galleria.index import MAX_MAGNITUDE, first_oversized
from galleria.store._checks import (
    check_embedder,
    check_embedder_dim,
    check_query_vectors,
    check_rows_agree,
    drop_duplicates,
    resolve_index,
)
from galleria.store._embedding import check_directions
from galleria.store._state import GalleryState, add_rows

__all__ = ["state_from_embeddings"]

#: Rows of a filled index read back at a time while their magnitudes are checked.
_CHECK_ROWS = 1 << 14


def _check_index_rows(index: Any) -> None:
    """Refuse a filled index whose rows (where it can give them back) would overflow float32
    distances (ValueError naming the row)."""
    if not index.can_reconstruct:
        return
    for start in range(0, len(index), _CHECK_ROWS):
        rows = np.arange(start, min(len(index), start + _CHECK_ROWS), dtype=np.int64)
        block = np.asarray(index.reconstruct(rows), dtype=np.float32)
        position = first_oversized(block)
        if position is not None:
            row = start + position // max(1, block.shape[1])
            raise ValueError(
                f"search_index row {row} holds a value beyond {MAX_MAGNITUDE:.3g} (or not finite): its "
                "distances would overflow float32"
            )


def state_from_embeddings(
    paths: Any,
    embeddings: Any,
    embedder: Any,
    search_index: Any,
    space: Any,
    index_params: Any,
    skipped: Any = None,
) -> GalleryState:
    """Check the arguments of :meth:`InMemoryImageEmbeddingStore.from_embeddings`; fill the index.

    Everything is validated before the index is touched, so a failing call changes nothing.
    """
    path_list = check_path_list("paths", paths)
    skipped_list = [] if skipped is None else check_path_list("skipped", skipped, allow_empty=True)
    check_embedder(embedder, allow_none=True)
    index = resolve_index(search_index, space, index_params)
    if embeddings is None:
        if len(index) == 0 or len(index) != len(path_list):
            raise ValueError(
                "embeddings=None needs a search_index object that already holds one row per path "
                f"({len(path_list)}), got an index with {len(index)} rows"
            )
        if len(set(path_list)) != len(path_list):
            raise ValueError("paths must be unique when the index already holds their rows")
        _check_index_rows(index)
        vectors = None
    else:
        vectors = check_query_vectors("embeddings", embeddings, index.dim, index.space)
        if np.ndim(embeddings) != 2 or vectors.shape[0] != len(path_list):
            raise ValueError(
                f"embeddings must have one row per path: shape {np.shape(embeddings)} "
                f"for {len(path_list)} paths"
            )
        if len(index) not in (0, len(path_list)):
            raise ValueError(
                f"search_index already holds {len(index)} rows, but {len(path_list)} paths were given"
            )
        if len(index):
            if len(set(path_list)) != len(path_list):
                raise ValueError("paths must be unique when the index already holds their rows")
            check_rows_agree(index, vectors)
        unique = drop_duplicates(path_list, "paths")
        if len(unique) != len(path_list):
            first: dict[str, int] = {}
            for row, path in enumerate(path_list):
                first.setdefault(path, row)
            vectors = vectors[[first[path] for path in unique]]
        path_list = unique
        check_directions(vectors, index.space, "embeddings")
    dim = index.dim if vectors is None else vectors.shape[1]
    if embedder is not None and dim is not None:
        check_embedder_dim(embedder, dim, "embedder")
    if vectors is not None and len(index) == 0:
        add_rows(index, vectors, path_list)
    return GalleryState(index, embedder, path_list, vectors, skipped_list)
