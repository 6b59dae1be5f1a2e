"""Store files: one safetensors file, written atomically and read as untrusted input (no pickle).

File layout (safetensors; readable by any safetensors reader):

* tensor ``"index"`` — the serialised search index (``SearchIndex.to_bytes()``) as a 1-D uint8
  tensor. The HNSW graph is in it, so loading does not rebuild anything and gives the same
  results. The built-in indexes hold their vectors in these bytes (not written a second time).
  Left out when the index cannot be serialised (some external indexes).
* tensor ``"vectors"`` — the (n, d) float32 gallery vectors in row order, written when the index
  cannot give them back (an external index) or when ``vectors=`` is passed to ``save_to_disk``.
* tensors ``"path_bytes"`` and ``"path_offsets"`` — the gallery paths in row order: their UTF-8
  bytes back to back (1-D uint8) and ``rows + 1`` int64 offsets, path ``i`` being
  ``path_bytes[path_offsets[i]:path_offsets[i + 1]]`` (format version 3; loading reads them
  straight into the store's :class:`~galleria.store._paths.PathTable`, no Python str per row).
  Checked on load: offsets from 0 to the bytes' length, rising strictly (no empty path), each at
  the start of a character; strict UTF-8 without NUL bytes; no path twice.
* metadata key ``"galleria"`` — a JSON header::

      {"format": "galleria-store", "format_version": 4, "rows": 1000, "space": "cosine",
       "dim": 512, "index": {"name": "hnsw", "params": {...}}, "embedder": {"config": {...}} | null,
       "skipped": [...], "tensors": {"index": {"sha256": "..."}, "vectors": {"sha256": "..."}},
       "extensions": {"augmentation": {"method": "dba", "neighbors": 10, "alpha": 3.0}}}

  ``extensions`` (optional) holds the **extension records**: what other packages compute over the
  gallery and keep with it (database-side augmentation, the offline half of decoupled diffusion,
  the gallery statistics, a plugin's tables), each under its name, its tensors named
  ``"ext/<name>/<tensor>"``. The store interprets none of them: the codec their owner registers
  (:mod:`galleria.store.extensions`) checks and bounds each one as the file is read, and encodes it
  when the store is saved. A record without a registered codec is kept opaque and bounded, written
  back unchanged, used by nothing, and listed by ``galleria info``. Files written before the slot
  kept three records at the top of the header (``augmentation``, ``offline_diffusion`` with the
  tensors ``diffusion_positions`` / ``diffusion_values``, ``rerank_statistics``); they load as
  before, each checked by the codec that declares the old key, and a save moves them into the slot,
  in format version 4 (galleria 0.2.0 and earlier ask to be upgraded to read it).

  ``embedder`` is null for a store without an embedder and ``{"config": null}`` for one whose
  embedder has no ``config()``.
* metadata key ``"galleria_sha256"`` — the SHA-256 of the header's canonical JSON form (sorted keys,
  no spaces), so the header is covered like the tensors (format version 2; version-1 files, which
  lack it, still load).

Versions 1 and 2 kept the paths in the header (``"paths": [...]`` instead of ``"rows"`` and the
two path tensors); such files still load, with the same checks on the paths.

Reading validates everything before it builds anything (:func:`read_store` returns one checked
:class:`~galleria.store._state.GalleryState`): the file must be a regular file; the header digest and
every tensor's SHA-256 must match; every key of the header must be present with the right type
(ValueError naming the file and the key otherwise); sizes must agree with each other and with the
bytes actually present; FAISS bytes are walked against an allow-list before FAISS parses them
(:mod:`galleria.index._faiss_check`); vectors must be finite; an embedder config never names a file
to load (a local checkpoint is recorded by name and SHA-256 and must be passed by the caller).

Nothing is held twice (:mod:`galleria.store._tensorfile`): each array is read from the file
straight into the array the index keeps (or memory-mapped read-only, ``mmap=True``), hashed as it
arrives; FAISS bytes are checksummed, walked in a read-only mapping, then read by FAISS itself from
the file, every chunk checked again. Saving streams the index's arrays and FAISS's bytes into the
file, so peak memory while loading or saving stays near the file's size.

The parts: the header's constants and checks are :mod:`galleria.store._header`, encoding a state is
:mod:`galleria.store._writing`, restoring the index and the embedder :mod:`galleria.store._restore`,
the extension slot :mod:`galleria.store._extslot`; this module reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from typing import Any, BinaryIO

import numpy as np

from galleria._files import atomic_stream, open_regular_file
from galleria._moved import moved_names
from galleria.index import Packed, SearchIndex, Unpacked, all_finite, check_magnitude
from galleria.index.registry import FAISS_BLOBS
from galleria.store import _statistics_codec as _statistics_codec  # registers the statistics' codec
from galleria.store._extslot import decode_records, group_tensors
from galleria.store._header import (
    DIGEST_KEY,
    DIGEST_TENSOR,
    HEADER_KEY,
    PATH_TENSORS,
    canonical,
    parse_header,
    read_store_layout,
    validate_header,
)
from galleria.store._paths import PathTable, read_path_table
from galleria.store._restore import check_load_arguments, moved, reanchor, restore_embedder, restore_index
from galleria.store._state import GalleryState, add_rows
from galleria.store._tensorfile import Layout, TensorReader, TensorSpan, read_layout, write_tensors
from galleria.store.extensions import ExtensionContext, OpaqueRecord, extension_codec

__all__ = ["check_regular_file", "check_store_path", "read_store", "read_store_header", "write_store"]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(
    __name__,
    {
        "FORMAT_NAME": "galleria.store._header",
        "FORMAT_VERSION": "galleria.store._header",
        "MAX_DIM": "galleria.store._header",
        "REMOTE_INDEXES": "galleria.store._restore",
        "encode_store": "galleria.store._writing",
    },
)


def check_store_path(path: Any) -> str:
    """Return ``path`` as a non-empty str (TypeError / ValueError otherwise)."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"path must be a str or os.PathLike, got {path!r} ({type(path).__name__})")
    if not path:
        raise ValueError("path must not be empty")
    return path


def check_regular_file(path: Any, name: str = "path") -> str:
    """Return ``path`` as a str once it names a regular file; a FIFO, device or folder is refused at
    once (opening one would block or read forever). OSError for a missing file."""
    text = check_store_path(path)
    mode = os.stat(text).st_mode  # FileNotFoundError / PermissionError as they are
    if not stat.S_ISREG(mode):
        kind = "folder" if stat.S_ISDIR(mode) else "FIFO" if stat.S_ISFIFO(mode) else "special file"
        raise ValueError(f"{name} {text!r} is a {kind}, not a regular file")
    return text


def write_store(target: str, tensors: dict[str, np.ndarray | Packed], header: dict[str, Any]) -> None:
    """Write a store file atomically (temporary file beside it, then ``os.replace``), streaming every
    tensor from where it lies; the tensors' digests go into ``header`` as they are computed.

    The vectors tensor (if any) is written first, then the index, then the other tensors (the
    vectors lie aligned for memory-mapping, :mod:`galleria.store._tensorfile`)."""
    first = [key for key in ("vectors", "index", "path_offsets") if key in tensors]
    ordered: dict[str, np.ndarray | Packed] = {
        key: tensors[key] for key in first + sorted(set(tensors) - set(first))
    }

    def metadata_for(digests: dict[str, str]) -> dict[str, str]:
        header["tensors"] = {key: {"sha256": digests[key]} for key in ordered}
        return {
            HEADER_KEY: json.dumps(header, ensure_ascii=False, separators=(",", ":")),
            DIGEST_KEY: hashlib.sha256(canonical(header)).hexdigest(),
        }

    with atomic_stream(target) as file:
        write_tensors(file, ordered, metadata_for)


# ---------------------------------------------------------------------------------------------- reading


def checksum_error(name: str, key: str) -> ValueError:
    return ValueError(f"{name!r}: tensor {key!r} does not match its checksum (file damaged or tampered)")


def read_vectors(
    name: str, file: BinaryIO, span: TensorSpan, expected: str, shape: tuple[int, int], mmap: bool
) -> np.ndarray:
    """The top-level ``vectors`` tensor, read (or mapped) in place, checksummed and checked finite."""
    if span.numpy_dtype != np.float32 or span.shape != shape:
        raise ValueError(
            f"{name!r}: vectors of shape {span.shape} ({span.dtype}) do not match {shape[0]} paths "
            f"of dim {shape[1]}"
        )
    reader = TensorReader(file, span, frozenset({"vectors"}) if mmap else frozenset())
    vectors = reader.read_array("vectors", np.dtype("<f4"), shape)
    if reader.hexdigest() != expected:
        raise checksum_error(name, "vectors")
    if not all_finite(vectors):
        raise ValueError(f"{name!r}: tensor 'vectors' holds NaN or infinite values")
    try:
        check_magnitude("tensor 'vectors'", vectors)
    except ValueError as error:
        raise ValueError(f"{name!r}: {error}") from None
    return vectors


def read_plain(name: str, file: BinaryIO, key: str, span: TensorSpan, expected: str) -> np.ndarray:
    """A tensor read as it is (its dtype and shape, bounded by the bytes the layout checked), checksummed."""
    dtype = span.numpy_dtype
    if dtype is None:
        raise ValueError(
            f"{name!r}: tensor {key!r} has dtype {span.dtype!r}; store tensors are uint8, int32, int64 "
            "or float32"
        )
    reader = TensorReader(file, span)
    array = reader.read_array(key, dtype, span.shape)
    if reader.hexdigest() != expected:
        raise checksum_error(name, key)
    return array


def read_digests(
    name: str, file: BinaryIO, layout: Layout, recorded: dict[str, Any], rows: int
) -> np.ndarray | None:
    """The ``pixel_digests`` tensor, if the file holds one: exactly (rows, 8) uint8, checked before
    it is read."""
    span = layout.tensors.get(DIGEST_TENSOR)
    if span is None:
        return None
    if span.numpy_dtype != np.uint8 or tuple(span.shape) != (rows, 8):
        raise ValueError(
            f"{name!r}: tensor {DIGEST_TENSOR!r} does not match the header: it must hold one row per "
            f"image, ({rows}, 8) uint8, got {span.dtype} {tuple(span.shape)}"
        )
    return read_plain(name, file, DIGEST_TENSOR, span, recorded[DIGEST_TENSOR]["sha256"])


def read_index_tensor(
    name: str, file: BinaryIO, span: TensorSpan, expected: str, kind: str, mmap: bool
) -> Any:
    """The serialised index, read straight into the arrays it keeps (faiss data left in the file for
    faiss to read once checked); ValueError if it fails its checksum or does not parse."""
    if span.numpy_dtype != np.uint8 or len(span.shape) != 1:
        raise ValueError(f"{name!r}: tensor 'index' must be 1-D uint8")
    mapped = frozenset({"vectors"}) if mmap and kind == "exact" else frozenset()
    reader = TensorReader(file, span, mapped)
    try:
        unpacked = Unpacked.read(reader, kind, FAISS_BLOBS.get(kind, frozenset()))
    except ValueError as error:
        if reader.hexdigest() != expected:  # damage is reported as damage, not as what it broke
            raise checksum_error(name, "index") from None
        raise ValueError(f"{name!r}: the saved index cannot be restored: {error}") from error
    if reader.hexdigest() != expected:
        raise checksum_error(name, "index")
    return unpacked


def read_paths(name: str, file: BinaryIO, layout: Layout, header: dict[str, Any]) -> PathTable:
    """The gallery paths of a checked header: the path tensors read straight into a table (format
    version 3), or the header's list (versions 1 and 2) put in one."""
    present = [key for key in PATH_TENSORS if key in layout.tensors]
    if header["paths"] is not None:
        if present:
            raise ValueError(f"{name!r}: a version-{header['format_version']} file holds tensors {present}")
        return PathTable.from_paths(header["paths"])
    if len(present) != len(PATH_TENSORS):
        missing = sorted(set(PATH_TENSORS) - set(present))
        raise ValueError(f"{name!r} lacks the tensor(s) {missing} that hold its paths")
    recorded = header["tensors"]
    data, offsets = (
        read_plain(name, file, key, layout.tensors[key], recorded[key]["sha256"]) for key in PATH_TENSORS
    )
    return read_path_table(name, data, offsets, header["rows"], PATH_TENSORS)


def read_store_header(path: Any) -> dict[str, Any]:
    """The checked JSON header of a store file, without reading its tensors or building anything.

    The same checks as loading apply to the header: a regular file, the header digest, every key
    present with the right type (ValueError naming the file and the key otherwise).

    Examples
    --------
    >>> import tempfile, pathlib, numpy as np
    >>> from galleria import InMemoryImageEmbeddingStore
    >>> file = pathlib.Path(tempfile.mkdtemp()) / "s.safetensors"
    >>> InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2)).save_to_disk(file)
    >>> header = read_store_header(file)
    >>> header["format_version"], header["dim"], header["index"]["name"]
    (4, 2, 'exact')
    """
    name = check_regular_file(path)
    with open_regular_file(name, "store file") as file:
        metadata = read_layout(name, file, os.fstat(file.fileno()).st_size).metadata
    header = parse_header(name, metadata)
    validate_header(name, header, os.path.getsize(name))
    return header


def read_store(
    path: Any,
    *,
    embedder: Any = None,
    search_index: Any = None,
    checkpoint: Any = None,
    root: Any = None,
    connect: bool = False,
    mmap: bool = False,
    runtime: Any = None,
) -> GalleryState:
    """Read and validate a store file; return its :class:`GalleryState` (see the module docstring).

    Each tensor is read once, straight into the array the index keeps; with ``mmap=True`` the
    exact vectors (an exact index's, or a kept ``vectors`` tensor) are memory-mapped read-only
    instead, and the file must not be modified in place while the store is in use (galleria's own
    saves replace the file, which leaves the mapping intact)."""
    name = check_regular_file(path)
    check_load_arguments(embedder, search_index, connect, mmap)
    with open_regular_file(name, "store file") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise ValueError(f"path {name!r} is not a regular file")
        layout = read_store_layout(name, file)
        file_size = os.fstat(file.fileno()).st_size
        header = validate_header(name, parse_header(name, layout.metadata), file_size)
        recorded = header["tensors"]
        if set(layout.tensors) != set(recorded):
            raise ValueError(
                f"{name!r} holds tensors {sorted(layout.tensors)}, but its header lists {sorted(recorded)}"
            )
        paths = read_paths(name, file, layout, header)  # first: sorting its lookup needs scratch memory
        groups = group_tensors(name, layout.tensors, header["extensions"])  # checked before any is read
        arrays = _read_gallery(name, file, layout, header, search_index, mmap)
        extension_tensors = {
            record: {
                short: read_plain(name, file, key, layout.tensors[key], recorded[key]["sha256"])
                for short, key in members.items()
            }
            for record, members in groups.items()
        }
        digests = read_digests(name, file, layout, recorded, header["rows"])
        context = ExtensionContext(name, header["rows"], header["space"], header["index"]["name"])
        extensions = decode_records(name, header["extensions"], extension_tensors, context)
        del extension_tensors
        index, fill = restore_index(name, header, arrays, search_index, connect)
    vectors, dim = arrays.get("vectors"), header["dim"]
    del arrays  # the index's container: what the index keeps is the index's now
    if index.dim is not None and dim is not None and index.dim != dim:
        raise ValueError(f"{name!r}: the index has dimension {index.dim}, but header key 'dim' is {dim}")
    loaded_embedder = restore_embedder(name, header["embedder"], embedder, checkpoint, dim, runtime)
    state = _place(name, header, index, loaded_embedder, paths, vectors, fill, root)
    state.pixel_digests = digests
    for key, value in extensions.items():  # a codec's value where the store keeps it, the rest by name
        codec = extension_codec(key)
        if codec is not None and codec.state_field and not isinstance(value, OpaqueRecord):
            setattr(state, codec.state_field, value)
        else:
            state.extensions[key] = value
    return state


def _read_gallery(
    name: str, file: Any, layout: Layout, header: dict[str, Any], search_index: Any, mmap: bool
) -> dict[str, Any]:
    """The ``vectors`` tensor (read or mapped) and the ``index`` container (its faiss data left in the
    file), each checksummed; the index bytes only checksummed when ``search_index`` replaces them."""
    recorded, rows, dim = header["tensors"], header["rows"], header["dim"]
    arrays: dict[str, Any] = {}
    if "vectors" in layout.tensors:
        expected = recorded["vectors"]["sha256"]
        shape = (rows, dim if dim is not None else 0)
        arrays["vectors"] = read_vectors(name, file, layout.tensors["vectors"], expected, shape, mmap)
    if "index" in layout.tensors:
        span, expected = layout.tensors["index"], recorded["index"]["sha256"]
        if search_index is None:
            kind = header["index"]["name"]
            arrays["index"] = read_index_tensor(name, file, span, expected, kind, mmap)
        elif span.numpy_dtype != np.uint8 or len(span.shape) != 1:
            raise ValueError(f"{name!r}: tensor 'index' must be 1-D uint8")
        elif TensorReader(file, span).hexdigest() != expected:  # checked, though not used
            raise checksum_error(name, "index")
    return arrays


def _place(
    name: str,
    header: dict[str, Any],
    index: SearchIndex,
    embedder: Any,
    paths: PathTable,
    vectors: np.ndarray | None,
    fill: bool,
    root: Any,
) -> GalleryState:
    """The state of a read file, its paths (and labels' folder) moved under ``root`` if given, the
    index filled from the vectors if it came empty."""
    anchor = reanchor(paths, root)
    skipped: list[str] = header["skipped"]
    if anchor is not None:  # the one step of loading that makes a str per row
        paths = PathTable.from_paths([moved(path, anchor) for path in paths])
        skipped = [moved(path, anchor) for path in skipped]
        if paths.duplicate() is not None:
            raise ValueError(f"root={root!r} maps two gallery paths onto one")
    if fill:
        assert vectors is not None
        add_rows(index, vectors, paths)
    kept = vectors if vectors is not None and not index.can_reconstruct else None
    labels_root = header["labels_root"]
    if anchor is not None and anchor[0] and labels_root is not None:
        # The labels' folder moves with the gallery's common folder (it may lie above it).
        labels_root = os.path.normpath(os.path.join(anchor[1], os.path.relpath(labels_root, anchor[0])))
    return GalleryState(index, embedder, paths, kept, skipped, labels_root=labels_root)
