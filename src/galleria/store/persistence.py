"""Store files: one safetensors file, written atomically and read as untrusted input (no pickle).

File layout (safetensors; readable by any safetensors reader):

* tensor ``"index"`` — the serialised search index (``SearchIndex.to_bytes()``) as a 1-D uint8
  tensor. The HNSW graph is in it, so loading does not rebuild anything and gives the same
  results. The built-in indexes hold their vectors inside these bytes, so the vectors are not
  written a second time. Left out when the index cannot be serialised (some external indexes).
* tensor ``"vectors"`` — the (n, d) float32 gallery vectors in row order, written when the index
  cannot give them back (an external index) or when ``vectors=`` is passed to ``save_to_disk``.
* tensors ``"path_bytes"`` and ``"path_offsets"`` — the gallery paths in row order: their UTF-8
  bytes back to back (1-D uint8) and ``rows + 1`` int64 offsets, path ``i`` being
  ``path_bytes[path_offsets[i]:path_offsets[i + 1]]`` (format version 3; loading reads them
  straight into the store's :class:`~galleria.store._paths.PathTable`, no Python str per row).
  Checked on load: offsets from 0 to the bytes' length, rising strictly (no empty path), each at
  the start of a character; strict UTF-8 without NUL bytes; no path twice.
* metadata key ``"galleria"`` — a JSON header::

      {"format": "galleria-store", "format_version": 3, "rows": 1000, "space": "cosine",
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
  before, each checked by the codec that declares the old key, and are saved in the slot. (A
  galleria from before the slot refuses a file that uses it: "unknown header key 'extensions'".)

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
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np

from galleria._files import atomic_path
from galleria._validation import MAX_VECTOR_DIM, check_labels_root
from galleria.embedders import embedder_config, embedder_from_config
from galleria.index import ExactIndex, HnswIndex, IvfPqIndex, SearchIndex, index_from_bytes
from galleria.index._checks import all_finite, check_magnitude
from galleria.index._serial import Packed, Unpacked
from galleria.index.base import SPACES
from galleria.index.registry import FAISS_BLOBS
from galleria.store import _statistics_codec as _statistics_codec  # registers the statistics' codec
from galleria.store._checks import check_embedder, check_embedder_dim, check_query_vectors
from galleria.store._extslot import (
    LEGACY_TENSORS,
    SLOT_KEY,
    decode_records,
    encode_records,
    group_tensors,
    header_records,
    is_extension_tensor,
)
from galleria.store._paths import PathTable, path_error, read_path_table
from galleria.store._state import GalleryState, add_rows
from galleria.store._tensorfile import Layout, TensorReader, TensorSpan, read_layout, write_tensors
from galleria.store._urls import is_url
from galleria.store.extensions import LEGACY_RECORDS, ExtensionContext, OpaqueRecord, extension_codec

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MAX_DIM",
    "REMOTE_INDEXES",
    "check_regular_file",
    "check_store_path",
    "encode_store",
    "read_store",
    "read_store_header",
    "write_store",
]

FORMAT_NAME = "galleria-store"
FORMAT_VERSION = 3
#: The first format version whose paths are tensors (earlier ones list them in the header).
_PATH_TENSORS_VERSION = 3
HEADER_KEY = "galleria"
DIGEST_KEY = "galleria_sha256"
_HEADER_KEYS = frozenset(
    {"format", "format_version", "rows", "space", "dim", "index", "embedder", "skipped", "tensors"}
)
#: Version 1 and 2 headers list the paths instead of counting the rows.
_OLD_HEADER_KEYS = _HEADER_KEYS - {"rows"} | {"paths"}
#: The tensors holding the gallery paths (format version 3).
PATH_TENSORS = ("path_bytes", "path_offsets")
#: Optional keys: the labels' folder, the extension slot, and the records older files kept at the top.
_OPTIONAL_KEYS = frozenset({"labels_root", SLOT_KEY, *LEGACY_RECORDS})
#: Each row's 8-byte digest of its decoded pixels (exact duplicates: galleria.curation.dedup).
DIGEST_TENSOR = "pixel_digests"
#: The store's own tensors; the others are extension records' (galleria.store.extensions).
_TENSOR_NAMES = frozenset({"index", "vectors", DIGEST_TENSOR, *PATH_TENSORS})
#: Largest vector dimension a store file may declare.
MAX_DIM = MAX_VECTOR_DIM


def _known_tensor(key: str) -> bool:
    return key in _TENSOR_NAMES or is_extension_tensor(key)


def canonical(header: Any) -> bytes:
    """The header's canonical JSON (sorted keys, no spaces): what its digest covers."""
    return json.dumps(header, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


class _Header:
    """Typed access to a parsed header; every problem is a ValueError naming the file and the key."""

    def __init__(self, name: str, header: Any) -> None:
        self.name = name
        if not isinstance(header, dict):
            raise ValueError(f"{name!r}: the galleria header is a {type(header).__name__}, not a JSON object")
        self.header: dict[str, Any] = header

    def fail(self, key: str, problem: str) -> ValueError:
        return ValueError(f"{self.name!r}: header key {key!r} {problem}")

    def get(self, key: str) -> Any:
        if key not in self.header:
            raise self.fail(key, "is missing")
        return self.header[key]

    def integer(self, value: Any, key: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            shown = repr(value) if not isinstance(value, int) or abs(value) < 1 << 64 else "a huge integer"
            raise self.fail(key, f"must be an integer in [{low}, {high}], got {shown[:80]}")
        return value

    def path_list(self, key: str) -> list[str]:
        value = self.get(key)
        if not isinstance(value, list) or not all(
            isinstance(path, str) and path and "\x00" not in path for path in value
        ):
            raise self.fail(key, "must be a list of non-empty path strings")
        return value


def parse_header(name: str, metadata: dict[str, str] | None) -> dict[str, Any]:
    """Parse the JSON header and check its digest; the returned dict is still unvalidated."""
    if not metadata or HEADER_KEY not in metadata:
        raise ValueError(f"{name!r} is a safetensors file but not a galleria store (no galleria header)")
    unknown = sorted(set(metadata) - {HEADER_KEY, DIGEST_KEY})
    if unknown:
        raise ValueError(f"{name!r} has unexpected metadata keys {unknown}")
    try:
        header = json.loads(metadata[HEADER_KEY])
    except RecursionError:
        raise ValueError(f"{name!r} has a corrupt galleria header: nested too deeply") from None
    except ValueError as error:  # bad JSON, or an integer of more than 4300 digits
        raise ValueError(f"{name!r} has a corrupt galleria header: {error}") from error
    checked = _Header(name, header)
    version = checked.integer(checked.get("format_version"), "format_version", 1, 1 << 30)
    if checked.get("format") != FORMAT_NAME:
        raise ValueError(
            f"{name!r} is not a galleria store file (header key 'format' is {header.get('format')!r})"
        )
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{name!r} was written in store format version {version}, newer than this galleria reads "
            f"({FORMAT_VERSION}); upgrade galleria to load it"
        )
    digest = metadata.get(DIGEST_KEY)
    if version >= 2 or digest is not None:
        if digest is None:
            raise ValueError(f"{name!r}: the header digest {DIGEST_KEY!r} is missing")
        try:
            actual = hashlib.sha256(canonical(header)).hexdigest()
        except RecursionError:
            raise ValueError(f"{name!r} has a corrupt galleria header: nested too deeply") from None
        if actual != digest:
            raise ValueError(f"{name!r}: the header does not match its checksum (file damaged or tampered)")
    return checked.header


def validate_header(name: str, header: dict[str, Any], file_size: int) -> dict[str, Any]:
    """Check every key of a header; return the values the loader uses."""
    checked = _Header(name, header)
    old = header["format_version"] < _PATH_TENSORS_VERSION  # the paths are in the header
    unknown = sorted(map(str, set(header) - (_OLD_HEADER_KEYS if old else _HEADER_KEYS) - _OPTIONAL_KEYS))
    if unknown:
        raise ValueError(f"{name!r}: unknown header key(s) {unknown}")
    paths: list[str] | None = None
    if old:
        paths = checked.path_list("paths")
        if len(set(paths)) != len(paths):
            raise checked.fail("paths", "lists a path twice")
        rows = len(paths)
    else:
        rows = checked.integer(checked.get("rows"), "rows", 0, file_size)
    space = checked.get("space")
    if space not in SPACES:
        raise checked.fail("space", f"must be one of {SPACES}, got {space!r}")
    dim = checked.get("dim")
    if dim is not None:
        dim = checked.integer(dim, "dim", 1, MAX_DIM)
    elif rows:
        raise checked.fail("dim", "is null, but the store holds paths")
    skipped = checked.path_list("skipped")
    if rows + len(skipped) > file_size:  # every path takes bytes of the file
        raise checked.fail(
            "paths" if old else "rows",
            f"declares {rows} rows, more than the file of {file_size} bytes holds",
        )
    index = checked.get("index")
    if not isinstance(index, dict) or set(index) != {"name", "params"}:
        raise checked.fail("index", "must be an object with exactly 'name' and 'params'")
    if not isinstance(index["name"], str) or not isinstance(index["params"], dict):
        raise checked.fail("index", "must have a string 'name' and an object 'params'")
    embedder = checked.get("embedder")
    if embedder is not None and (
        not isinstance(embedder, dict)
        or set(embedder) != {"config"}
        or not isinstance(embedder["config"], (dict, type(None)))
    ):
        raise checked.fail("embedder", "must be null or an object {'config': object or null}")
    tensors = checked.get("tensors")
    if (
        not isinstance(tensors, dict)
        or not all(isinstance(key, str) and _known_tensor(key) for key in tensors)
        or not all(
            isinstance(entry, dict) and set(entry) == {"sha256"} and isinstance(entry["sha256"], str)
            for entry in tensors.values()
        )
    ):
        raise checked.fail(
            "tensors",
            f"must map names among {sorted(_TENSOR_NAMES | set(LEGACY_TENSORS))} or 'ext/<record>/<tensor>' "
            "to {'sha256': hex digest}",
        )
    context = ExtensionContext(name, rows, space, index["name"])
    extensions = header_records(name, header, checked.fail, context)
    return {
        "paths": paths,
        "rows": rows,
        "space": space,
        "dim": dim,
        "index": index,
        "embedder": embedder,
        "skipped": skipped,
        "tensors": tensors,
        "extensions": extensions,
        "labels_root": _labels_root_record(checked, header.get("labels_root")),
    }


def _labels_root_record(checked: _Header, value: Any) -> str | None:
    """The header's ``labels_root`` (absolute, bounded, no control characters), or None."""
    if value is None:
        return None
    try:
        return check_labels_root("labels_root", value)
    except (TypeError, ValueError) as error:
        raise checked.fail("labels_root", f"is not usable: {error}") from None


def read_store_layout(name: str, file: BinaryIO) -> Layout:
    """The checked safetensors layout of a store file (only the tensors a store file holds)."""
    layout = read_layout(name, file, os.fstat(file.fileno()).st_size)
    if not layout.metadata or HEADER_KEY not in layout.metadata:
        raise ValueError(f"{name!r} is a safetensors file but not a galleria store (no galleria header)")
    unexpected = sorted(key for key in layout.tensors if not _known_tensor(key))
    if unexpected:
        raise ValueError(f"{name!r} holds unexpected tensors {unexpected}")
    return layout


#: Indexes whose rows live in a service the file names (a vector database): reconnecting to it needs
#: the caller's consent (``connect=True``), since a file never chooses what galleria opens or contacts.
REMOTE_INDEXES = frozenset({"milvus"})


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


def reanchor(paths: Sequence[str], root: Any) -> tuple[str, str] | None:
    """(old prefix, new prefix) that moves the gallery's common folder to ``root``."""
    if root is None or not paths:
        return None
    if isinstance(root, os.PathLike):
        root = os.fspath(root)
    if not isinstance(root, str) or not root:
        raise TypeError(f"root must be a non-empty str or os.PathLike, got {root!r}")
    files = [path for path in paths if not is_url(path)]  # URL-only items are never re-anchored
    if not files:
        return None
    if not all(os.path.isabs(path) for path in files):
        return "", os.path.abspath(root)
    return os.path.commonpath([os.path.dirname(path) for path in files]), os.path.abspath(root)


def moved(path: str, anchor: tuple[str, str]) -> str:
    old, new = anchor
    if is_url(path):
        return path
    if not old:
        return os.path.join(new, path)
    if path == old or path.startswith(old.rstrip(os.sep) + os.sep):
        return os.path.join(new, os.path.relpath(path, old))
    return path


def restore_index(
    name: str,
    header: dict[str, Any],
    arrays: dict[str, Any],
    search_index: Any,
    connect: bool,
) -> tuple[SearchIndex, bool]:
    """The store's index: the one passed in (maybe to fill from the vectors) or the saved one
    (``arrays["index"]`` is the container already read from the file, its faiss data still there)."""
    rows, space, vectors = header["rows"], header["space"], arrays.get("vectors")
    if search_index is not None:
        if search_index.space != space:
            raise ValueError(
                f"search_index has space {search_index.space!r}, but the store was saved in {space!r}"
            )
        if len(search_index) == 0 and rows:
            if vectors is None:
                raise ValueError(
                    f"{name!r} holds no vectors to fill the empty search_index; pass an index that holds "
                    f"the store's {rows} rows"
                )
            return search_index, True
        if len(search_index) == rows:
            return search_index, False
        raise ValueError(f"search_index holds {len(search_index)} rows, but the store has {rows} paths")
    if "index" not in arrays:
        raise ValueError(
            f"{name!r} was saved with a {header['index']['name']!r} index that could not be serialised; "
            "pass it back with search_index="
        )
    if header["index"]["name"] in REMOTE_INDEXES and not connect:
        params = header["index"]["params"]
        raise ValueError(
            f"{name!r} keeps its vectors in {header['index']['name']} (uri {params.get('uri')!r}, collection "
            f"{params.get('collection')!r}); a store file never chooses what galleria connects to: pass "
            "connect=True (--connect on the command line) to reconnect to it, or search_index= an index "
            "you opened yourself"
        )
    try:
        index = index_from_bytes(header["index"]["name"], arrays["index"])
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"{name!r}: the saved index cannot be restored: {error}") from error
    if len(index) != rows or index.space != space:
        raise ValueError(f"{name!r}: the saved index does not match the header (rows or space)")
    return index, False


def restore_embedder(
    name: str, saved: Any, embedder: Any, checkpoint: Any, dim: int | None, runtime: Any = None
) -> Any:
    if embedder is not None:
        if checkpoint is not None:
            raise ValueError("pass either embedder= or checkpoint=, not both")
        if dim is not None:
            try:
                check_embedder_dim(embedder, dim, "embedder")
            except ValueError as error:
                raise ValueError(f"{name!r}: {error}") from None
        return embedder
    if saved is None:
        if checkpoint is not None:
            raise ValueError(f"{name!r} was saved without an embedder, so checkpoint= has no use")
        return None
    if saved["config"] is None:
        raise ValueError(
            f"{name!r} was saved with an embedder that has no config(); pass embedder= to load it"
        )
    try:
        rebuilt = embedder_from_config(saved["config"], checkpoint=checkpoint, runtime=runtime)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{name!r}: cannot rebuild the saved embedder: {error}") from error
    if dim is not None:  # before anything is embedded: the config must not choose the batch's size
        try:
            check_embedder_dim(rebuilt, dim, "the saved embedder")
        except ValueError as error:
            raise ValueError(f"{name!r}: {error} (header key 'dim')") from None
    return rebuilt


#: Indexes whose serialised bytes are written part by part, in place (``packed()``).
_PACKED_INDEXES = (ExactIndex, HnswIndex, IvfPqIndex)


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


# ---------------------------------------------------------------------------------------------- writing


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
    slot, top, extension_tensors = encode_records(state)  # the codecs' records, then the opaque ones
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
    header.update(top)  # records their codecs keep under the old keys (older galleria reads them)
    if slot:
        header[SLOT_KEY] = slot
    if state.labels_root is not None:  # the folder the labels were drawn from at build
        header["labels_root"] = state.labels_root
    return tensors, header


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

    with atomic_path(target) as temporary, open(temporary, "wb") as file:
        write_tensors(file, ordered, metadata_for)


# ---------------------------------------------------------------------------------------------- reading


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
    (3, 2, 'exact')
    """
    name = check_regular_file(path)
    with open(name, "rb") as file:
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
    _check_load_arguments(embedder, search_index, connect, mmap)
    with open(name, "rb") as file:
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


def _check_load_arguments(embedder: Any, search_index: Any, connect: Any, mmap: Any) -> None:
    check_embedder(embedder, allow_none=True)
    if not isinstance(connect, bool):
        raise TypeError(f"connect must be a bool, got {connect!r}")
    if search_index is not None and not isinstance(search_index, SearchIndex):
        raise TypeError(f"search_index must be a SearchIndex or None, got {type(search_index).__name__}")
    if not isinstance(mmap, bool):
        raise TypeError(f"mmap must be a bool, got {mmap!r}")


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
