"""Writing a store file: its tensors and header for a gallery state, streamed into the file atomically
(:mod:`galleria.store.persistence` describes the format and writes it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria.embedders import embedder_config
from galleria.index import ExactIndex, HnswIndex, IvfPqIndex, Packed
from galleria.store._checks import check_query_vectors
from galleria.store._extslot import SLOT_KEY, encode_records
from galleria.store._header import (
    DIGEST_TENSOR,
    FORMAT_NAME,
    FORMAT_VERSION,
)
from galleria.store._paths import PathTable, path_error
from galleria.store._state import GalleryState

__all__ = ["encode_store"]

#: Indexes whose serialised bytes are written part by part, in place (``packed()``).
_PACKED_INDEXES = (ExactIndex, HnswIndex, IvfPqIndex)


def encode_store(
    state: GalleryState, vectors: Any = None
) -> tuple[dict[str, np.ndarray | Packed], dict[str, Any]]:
    """The tensors and the header of a store file for ``state`` (call while the store cannot change,
    and write with :func:`write_store` before it may: the tensors are views of what the index holds).

    The header's ``tensors`` digests are filled in by :func:`write_store` as it writes them."""
    index = state.index
    paths = state.paths if isinstance(state.paths, PathTable) else PathTable.from_paths(state.paths)
    problem = path_error(paths)
    if problem is not None:
        raise ValueError(f"the store cannot be saved: {problem}")
    count = len(paths)
    if len(index) != count:  # never write a file that would not load
        raise RuntimeError(
            f"the store cannot be saved: its index holds {len(index)} rows but it names {count} paths"
        )
    dim = index.dim if index.dim is not None else None if state.vectors is None else state.vectors.shape[1]
    tensors: dict[str, np.ndarray | Packed] = {}
    if vectors is not None:
        given = check_query_vectors("vectors", vectors, dim, index.space)
        if np.ndim(vectors) != 2 or given.shape[0] != count:
            raise ValueError(f"vectors must have shape ({count}, {dim}), got {np.shape(vectors)}")
        from galleria.distances import prepare_vectors

        tensors["vectors"] = prepare_vectors(given, index.space)
    elif state.vectors is not None:
        tensors["vectors"] = state.vectors
    elif not index.can_reconstruct:
        raise ValueError(
            f"the {index.name!r} index cannot reconstruct its vectors and the store holds no copy; "
            "pass vectors= (the gallery vectors in row order) to save_to_disk"
        )
    try:
        # The built-in indexes give their bytes as parts (written in place, never joined); any
        # other SearchIndex (an external one wraps whatever faiss index it was given) gives them whole.
        packed = index.packed() if isinstance(index, _PACKED_INDEXES) else None
        blob = None if packed is not None else index.to_bytes()
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        if "vectors" not in tensors:
            raise
        packed = blob = None  # an external index FAISS cannot serialise: loading will need it passed back
    if packed is not None:
        tensors["index"] = packed
    elif blob is not None:
        tensors["index"] = np.frombuffer(blob, dtype=np.uint8)
    tensors["path_offsets"] = paths.offsets
    tensors["path_bytes"] = paths.data
    if state.pixel_digests is not None:
        tensors[DIGEST_TENSOR] = state.pixel_digests
    slot, extension_tensors = encode_records(state)  # the codecs' records, then the opaque ones
    tensors.update(extension_tensors)
    embedder = state.embedder
    header = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "rows": count,
        "space": index.space,
        "dim": dim,
        "index": {"name": index.name, "params": index.params()},
        "embedder": None if embedder is None else {"config": embedder_config(embedder)},
        "skipped": list(state.skipped),
        "tensors": {name: {"sha256": ""} for name in tensors},
    }
    if slot:
        header[SLOT_KEY] = slot
    if state.labels_root is not None:  # the folder the labels were drawn from at build
        header["labels_root"] = state.labels_root
    return tensors, header
