"""Saving a gallery store to one safetensors file and loading it back, without pickle.

File layout (safetensors; readable by any safetensors reader):

* tensor ``"index"`` — the serialised search index (``SearchIndex.to_bytes()``) as a 1-D uint8
  tensor. The HNSW graph is in it, so loading does not rebuild anything and gives the same
  results. The built-in indexes hold their vectors inside these bytes, so the vectors are not
  written a second time. Left out when the index cannot be serialised (some external indexes).
* tensor ``"vectors"`` — the (n, d) float32 gallery vectors in row order, written when the index
  cannot give them back (an external index) or when ``vectors=`` is passed to ``save_to_disk``.
* metadata key ``"galleria"`` — a JSON header::

      {"format": "galleria-store", "format_version": 1, "paths": [...], "space": "cosine",
       "dim": 512, "index": {"name": "hnsw", "params": {...}}, "embedder": {"config": {...}} | null,
       "skipped": [...], "tensors": {"index": {"sha256": "..."}, "vectors": {"sha256": "..."}},
       "augmentation": {"method": "dba", "neighbors": 10, "alpha": 3.0}}

  ``augmentation`` is present only for a store whose vectors were replaced by database-side
  augmentation (:func:`galleria.rerank.dba.augment_store`); the augmented vectors are then the
  index's own, so the file keeps them and loading restores the record.

  ``embedder`` is null for a store without an embedder and ``{"config": null}`` for one whose
  embedder has no ``config()``.

Every tensor's SHA-256 is recorded and checked on load, so a tampered or damaged file raises
ValueError before its bytes reach FAISS. A file from a newer format version is refused.

Loading rules for the index: a ``search_index=`` argument wins (it must already hold the
store's rows, or be empty and then filled from the saved ``"vectors"``); otherwise the saved
``"index"`` bytes are deserialised; a file with neither requires ``search_index=``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from galleria._files import atomic_path
from galleria.embedders import embedder_config, embedder_from_config
from galleria.index import SearchIndex, index_from_bytes
from galleria.index.base import SPACES
from galleria.store._checks import check_embedder, check_query_vectors

if TYPE_CHECKING:
    from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "load_store", "save_store"]

FORMAT_NAME = "galleria-store"
FORMAT_VERSION = 1
_HEADER_KEY = "galleria"


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data).hexdigest()


def _check_path(path: Any) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"path must be a str or os.PathLike, got {path!r} ({type(path).__name__})")
    if not path:
        raise ValueError("path must not be empty")
    return path


def save_store(store: InMemoryImageEmbeddingStore, path: Any, vectors: Any = None) -> None:
    """Write ``store`` to ``path`` as described in the module docstring (temp file + ``os.replace``)."""
    from safetensors.numpy import save_file

    target = _check_path(path)
    store._require_built()
    index = store._index
    count = len(store._paths)
    dim = store.dim
    tensors: dict[str, np.ndarray] = {}
    if vectors is not None:
        given = check_query_vectors("vectors", vectors, dim)
        if np.ndim(vectors) != 2 or given.shape[0] != count:
            raise ValueError(f"vectors must have shape ({count}, {dim}), got {np.shape(vectors)}")
        from galleria.distances import prepare_vectors

        tensors["vectors"] = prepare_vectors(given, index.space)
    elif store._vectors is not None:
        tensors["vectors"] = store._vectors
    elif not index.can_reconstruct:
        raise ValueError(
            f"the {index.name!r} index cannot reconstruct its vectors and the store holds no copy; "
            "pass vectors= (the gallery vectors in row order) to save_to_disk"
        )
    try:
        blob = index.to_bytes()
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        if "vectors" not in tensors:
            raise
        blob = None  # an external index FAISS cannot serialise: loading will need it passed back
    if blob is not None:
        tensors["index"] = np.frombuffer(blob, dtype=np.uint8)
    embedder = store._embedder
    header = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "paths": store._paths,
        "space": index.space,
        "dim": dim,
        "index": {"name": index.name, "params": index.params()},
        "embedder": None if embedder is None else {"config": embedder_config(embedder)},
        "skipped": store._skipped,
        "tensors": {name: {"sha256": _digest(array)} for name, array in tensors.items()},
    }
    if store._augmentation is not None:  # database-side augmentation (galleria.rerank.dba)
        header["augmentation"] = store._augmentation
    metadata = {_HEADER_KEY: json.dumps(header, ensure_ascii=False, separators=(",", ":"))}
    with atomic_path(target) as temporary:
        save_file(tensors, temporary, metadata=metadata)


def _valid_augmentation(record: Any) -> bool:
    """Whether ``record`` is ``{"method": "dba", "neighbors": int >= 1, "alpha": finite float >= 0}``."""
    if not isinstance(record, dict) or set(record) != {"method", "neighbors", "alpha"}:
        return False
    neighbors, alpha = record["neighbors"], record["alpha"]
    return (
        record["method"] == "dba"
        and isinstance(neighbors, int)
        and not isinstance(neighbors, bool)
        and neighbors >= 1
        and isinstance(alpha, (int, float))
        and not isinstance(alpha, bool)
        and math.isfinite(alpha)
        and alpha >= 0
    )


def _read_header(name: str, metadata: dict[str, str] | None) -> dict[str, Any]:
    """Parse and check the JSON header; raise ValueError naming the file on any problem."""
    if not metadata or _HEADER_KEY not in metadata:
        raise ValueError(f"{name!r} is a safetensors file but not a galleria store (no galleria header)")
    try:
        header = json.loads(metadata[_HEADER_KEY])
    except json.JSONDecodeError as error:
        raise ValueError(f"{name!r} has a corrupt galleria header: {error}") from error
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise ValueError(f"{name!r} is not a galleria store file (format {header.get('format')!r})")
    version = header.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{name!r} has an invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{name!r} was written in store format version {version}, newer than this galleria reads "
            f"({FORMAT_VERSION}); upgrade galleria to load it"
        )
    paths = header.get("paths")
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise ValueError(f"{name!r} has an invalid 'paths' list in its header")
    if len(set(paths)) != len(paths):
        raise ValueError(f"{name!r} lists a path twice in its header")
    if header.get("space") not in SPACES:
        raise ValueError(f"{name!r} has an invalid space {header.get('space')!r}")
    dim = header.get("dim")
    if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool) or dim < 1):
        raise ValueError(f"{name!r} has an invalid dim {dim!r}")
    index = header.get("index")
    if not isinstance(index, dict) or not isinstance(index.get("name"), str):
        raise ValueError(f"{name!r} has an invalid 'index' entry")
    if not isinstance(index.get("params"), dict):
        raise ValueError(f"{name!r} has invalid index params")
    embedder = header.get("embedder")
    if embedder is not None and (
        not isinstance(embedder, dict) or not isinstance(embedder.get("config"), (dict, type(None)))
    ):
        raise ValueError(f"{name!r} has an invalid 'embedder' entry")
    skipped = header.get("skipped", [])
    if not isinstance(skipped, list) or not all(isinstance(p, str) for p in skipped):
        raise ValueError(f"{name!r} has an invalid 'skipped' list")
    augmentation = header.get("augmentation")
    if augmentation is not None and not _valid_augmentation(augmentation):
        raise ValueError(f"{name!r} has an invalid 'augmentation' entry {augmentation!r}")
    tensors = header.get("tensors")
    if not isinstance(tensors, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("sha256"), str) for entry in tensors.values()
    ):
        raise ValueError(f"{name!r} has an invalid 'tensors' entry")
    return header


def _read_tensors(name: str) -> tuple[dict[str, str] | None, dict[str, np.ndarray]]:
    from safetensors import safe_open

    with open(name, "rb"):  # a missing or unreadable file raises its own OSError here
        pass
    try:
        with safe_open(name, framework="numpy") as reader:
            metadata = reader.metadata()
            arrays = {key: reader.get_tensor(key) for key in reader.keys()}
    except OSError:
        raise
    except Exception as error:  # safetensors raises its own error type for damaged files
        raise ValueError(
            f"{name!r} is not a readable safetensors file (truncated or damaged?): {error}"
        ) from error
    return metadata, arrays


def load_store(
    cls: type[InMemoryImageEmbeddingStore], path: Any, embedder: Any = None, search_index: Any = None
) -> InMemoryImageEmbeddingStore:
    """Read a store written by :func:`save_store`; see the module docstring for the rules."""
    name = _check_path(path)
    check_embedder(embedder, allow_none=True)
    if search_index is not None and not isinstance(search_index, SearchIndex):
        raise TypeError(f"search_index must be a SearchIndex or None, got {type(search_index).__name__}")
    metadata, arrays = _read_tensors(name)
    header = _read_header(name, metadata)
    recorded = header["tensors"]
    if set(arrays) != set(recorded) or not set(arrays) <= {"index", "vectors"}:
        raise ValueError(f"{name!r} holds tensors {sorted(arrays)}, but its header lists {sorted(recorded)}")
    for key, array in arrays.items():
        if _digest(array) != recorded[key]["sha256"]:
            raise ValueError(
                f"{name!r}: tensor {key!r} does not match its checksum (file damaged or tampered)"
            )
    paths: list[str] = header["paths"]
    space: str = header["space"]
    dim: int | None = header["dim"]
    vectors = arrays.get("vectors")
    if vectors is not None and (vectors.dtype != np.float32 or vectors.shape != (len(paths), dim)):
        raise ValueError(
            f"{name!r}: vectors of shape {vectors.shape} do not match {len(paths)} paths of dim {dim}"
        )

    if search_index is not None:
        if search_index.space != space:
            raise ValueError(
                f"search_index has space {search_index.space!r}, but the store was saved in {space!r}"
            )
        if len(search_index) == 0 and paths:
            if vectors is None:
                raise ValueError(
                    f"{name!r} holds no vectors to fill the empty search_index; pass an index that holds "
                    f"the store's {len(paths)} rows"
                )
            index: SearchIndex = search_index
            fill = True
        elif len(search_index) == len(paths):
            index, fill = search_index, False
        else:
            raise ValueError(
                f"search_index holds {len(search_index)} rows, but the store has {len(paths)} paths"
            )
    elif "index" in arrays:
        try:
            index = index_from_bytes(header["index"]["name"], arrays["index"].tobytes())
        except (TypeError, ValueError, RuntimeError) as error:
            raise ValueError(f"{name!r}: the saved index cannot be restored: {error}") from error
        fill = False
        if len(index) != len(paths) or index.space != space:
            raise ValueError(f"{name!r}: the saved index does not match the header (rows or space)")
    else:
        raise ValueError(
            f"{name!r} was saved with a {header['index']['name']!r} index that could not be serialised; "
            "pass it back with search_index="
        )
    if index.dim is not None and dim is not None and index.dim != dim:
        raise ValueError(f"the index has dimension {index.dim}, but the store was saved with dimension {dim}")

    saved_embedder = header["embedder"]
    if embedder is None and saved_embedder is not None:
        if saved_embedder["config"] is None:
            raise ValueError(
                f"{name!r} was saved with an embedder that has no config(); pass embedder= to load it"
            )
        try:
            embedder = embedder_from_config(saved_embedder["config"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{name!r}: cannot rebuild the saved embedder: {error}") from error

    if fill:
        assert vectors is not None
        index.add(vectors)
    store = cls.__new__(cls)
    store._init_state(index, embedder)
    store._skipped = list(header["skipped"])
    if header.get("augmentation") is not None:
        store._augmentation = dict(header["augmentation"])
    store._set_gallery(paths, vectors)
    return store
