"""The JSON header of a store file: its constants, parsing (with the digest) and the checks of every key.

See :mod:`galleria.store.persistence` for the format. Every problem is a ValueError naming the file
and the key.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, BinaryIO

from galleria._validation import MAX_VECTOR_DIM, check_labels_root
from galleria.index.base import SPACES
from galleria.store._extslot import LEGACY_TENSORS, SLOT_KEY, header_records, is_extension_tensor
from galleria.store._tensorfile import Layout, read_layout
from galleria.store.extensions import LEGACY_RECORDS, ExtensionContext

__all__ = [
    "DIGEST_KEY",
    "DIGEST_TENSOR",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "HEADER_KEY",
    "MAX_DIM",
    "PATH_TENSORS",
    "canonical",
    "parse_header",
    "read_store_layout",
    "validate_header",
]

FORMAT_NAME = "galleria-store"
#: 4: the extension slot (``"extensions"``, ``ext/<name>/<tensor>``) holds galleria's own records too;
#: a version-3 reader (galleria 0.2) would refuse its key, so it is told to upgrade instead.
FORMAT_VERSION = 4
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
