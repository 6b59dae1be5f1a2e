"""Extension records: what other packages keep in a store file, through one generic slot.

A store file (:mod:`galleria.store.persistence`) holds, beside the gallery itself, records that
other packages compute over it (database-side augmentation, the offline half of decoupled diffusion,
the gallery statistics, a plugin's own tables). The store interprets none of them. Each lives in
the header's ``"extensions"`` object under its name, its tensors as ``"ext/<name>/<tensor>"``::

    "extensions": {"offline_diffusion": {"k": 10, "truncation": 64, ...}}
    tensors "ext/offline_diffusion/positions", "ext/offline_diffusion/values"

Whoever owns a record registers an :class:`ExtensionCodec` for it (at import time, with
:func:`register_extension`): the codec checks and bounds the record and its tensors when a file is
read, and encodes the value back when a store is saved. A record whose codec is not registered
(a plugin removed, or a script that never imported the owner) is kept as an :class:`OpaqueRecord`:
bounded (:data:`MAX_RECORD_BYTES`, :data:`MAX_EXTENSION_TENSORS`, :data:`MAX_OPAQUE_TENSOR_BYTES`),
written back unchanged by a save, used by nothing, listed by ``galleria info``, and dropped when the
gallery's rows change (it describes rows that are gone).

Files written before the slot existed kept three records at the top of the header
(:data:`LEGACY_RECORDS`); they are read as records of the same name, and a codec declares the old
key and tensor names it replaces (``legacy_key``, ``legacy_tensors``). A save writes every record in
the slot, those read from an old file too; galleria 0.2.0 and earlier refuse such a file whole
("unknown header key(s) ['extensions']").
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "LEGACY_RECORDS",
    "MAX_EXTENSIONS",
    "MAX_EXTENSION_TENSORS",
    "MAX_OPAQUE_TENSOR_BYTES",
    "MAX_RECORD_BYTES",
    "ExtensionCodec",
    "ExtensionContext",
    "OpaqueRecord",
    "extension_codec",
    "register_extension",
    "tensor_key",
]

#: Most extension records one store file may hold.
MAX_EXTENSIONS = 32
#: Most tensors one extension record may hold.
MAX_EXTENSION_TENSORS = 16
#: Largest record (its canonical JSON, in bytes).
MAX_RECORD_BYTES = 64 * 1024
#: Largest sum of an opaque record's tensor bytes (they are read into memory to be written back).
MAX_OPAQUE_TENSOR_BYTES = 1 << 30
#: Extension and tensor names: lower-case letters, digits and underscores.
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: The prefix of every extension tensor's name in the file.
TENSOR_PREFIX = "ext/"

#: Records that store files written before the slot kept at the top of their header (format
#: version 3): the header key, which is also the record's name in the slot, and each tensor's old
#: name with its name in the slot. Only this history lives here; what the records mean is their
#: codecs' business.
LEGACY_RECORDS: Mapping[str, Mapping[str, str]] = {
    "augmentation": {},
    "offline_diffusion": {"diffusion_positions": "positions", "diffusion_values": "values"},
    "rerank_statistics": {},
}


def tensor_key(name: str, tensor: str) -> str:
    """The file's name for tensor ``tensor`` of extension ``name``: ``"ext/<name>/<tensor>"``."""
    return f"{TENSOR_PREFIX}{name}/{tensor}"


def record_bytes(record: Any) -> int:
    """The size of ``record``'s canonical JSON (what :data:`MAX_RECORD_BYTES` bounds)."""
    return len(json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode())


@dataclass(frozen=True)
class ExtensionContext:
    """What a codec may check a record against: the file and the gallery it belongs to.

    Attributes
    ----------
    source : str
        The file's name (every error names it).
    rows, space, index_name :
        The store's row count, distance space and index name, as its header declares them.
    tensor_names : mapping
        Each of the record's tensors (short name) to its name in the file, for messages.
    label : str
        How errors name the record (:meth:`fail` uses it).
    """

    source: str
    rows: int
    space: str
    index_name: str
    tensor_names: Mapping[str, str] = field(default_factory=dict)
    #: How errors name the record: ``"header key 'augmentation'"`` (an older file's top-level key)
    #: or ``"header key 'extensions.augmentation'"``.
    label: str = ""

    def fail(self, problem: str) -> ValueError:
        """A ValueError naming the file and the record: ``"'file': header key '...' <problem>"``."""
        return ValueError(f"{self.source!r}: {self.label} {problem}")

    def tensor(self, short: str) -> str:
        """The file's name of tensor ``short`` (to name in an error)."""
        return self.tensor_names.get(short, short)


class ExtensionCodec:
    """Checks, bounds and encodes one extension record; subclass it and :func:`register_extension`.

    Attributes
    ----------
    name : str
        The record's name in the slot (:data:`NAME_PATTERN`).
    tensors : frozenset of str
        The short names of the tensors the record may hold (at most :data:`MAX_EXTENSION_TENSORS`).
    legacy_key : str or None
        The top-level header key it replaces in older files (one of :data:`LEGACY_RECORDS`).
    legacy_tensors : mapping
        Old tensor name -> short name, as :data:`LEGACY_RECORDS` lists them for ``legacy_key``.
    state_field : str or None
        The :class:`~galleria.store._state.GalleryState` attribute that holds the checked value of a
        record galleria's own store keeps; None keeps it in ``GalleryState.extensions[name]``.
    """

    name: ClassVar[str]
    tensors: ClassVar[frozenset[str]] = frozenset()
    legacy_key: ClassVar[str | None] = None
    legacy_tensors: ClassVar[Mapping[str, str]] = {}
    state_field: ClassVar[str | None] = None

    def check_record(self, record: Any, context: ExtensionContext) -> None:
        """Check the record alone (no tensors read yet); ValueError naming ``context.source``."""

    def check(self, record: Any, tensors: dict[str, np.ndarray], context: ExtensionContext) -> Any:
        """Check the record with its tensors (short names; ``tensors`` holds exactly those the file
        has) and return the value the store keeps; ValueError naming ``context.source``."""
        raise NotImplementedError

    def encode(self, value: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """The JSON record and the tensors (short names) that :meth:`check` reads back as ``value``."""
        raise NotImplementedError


@dataclass(frozen=True)
class OpaqueRecord:
    """An extension record no registered codec reads: kept as it was read, written back unchanged
    (in the slot, also when it was read from an older file's top-level key)."""

    name: str
    record: Any
    tensors: Mapping[str, np.ndarray]

    def describe(self) -> dict[str, Any]:
        """What ``galleria info`` shows of it: its name, record size and tensors (dtype, shape)."""
        return {
            "name": self.name,
            "record_bytes": record_bytes(self.record),
            "tensors": {
                key: f"{array.dtype} {list(array.shape)}" for key, array in sorted(self.tensors.items())
            },
        }


_LOCK = threading.Lock()
_CODECS: dict[str, ExtensionCodec] = {}


def register_extension(codec: ExtensionCodec) -> ExtensionCodec:
    """Register ``codec`` for the records named ``codec.name`` (again: the newer codec replaces it).

    ValueError if its name or tensor names are not :data:`NAME_PATTERN`, it has too many tensors, or
    its legacy declaration disagrees with :data:`LEGACY_RECORDS`."""
    if not isinstance(codec, ExtensionCodec):
        raise TypeError(f"codec must be an ExtensionCodec, got {type(codec).__name__}")
    name = getattr(codec, "name", None)
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"codec name must match {NAME_PATTERN.pattern!r}, got {name!r}")
    if len(codec.tensors) > MAX_EXTENSION_TENSORS or not all(
        isinstance(key, str) and NAME_PATTERN.fullmatch(key) for key in codec.tensors
    ):
        raise ValueError(
            f"codec {name!r}: at most {MAX_EXTENSION_TENSORS} tensors named like {NAME_PATTERN.pattern!r}"
        )
    if codec.legacy_key is not None and (
        codec.legacy_key != name or dict(LEGACY_RECORDS.get(name, {"": ""})) != dict(codec.legacy_tensors)
    ):
        raise ValueError(f"codec {name!r}: its legacy key and tensors must be as LEGACY_RECORDS lists them")
    with _LOCK:
        _CODECS[name] = codec
    return codec


def extension_codec(name: str) -> ExtensionCodec | None:
    """The codec registered for records named ``name``, or None (they stay opaque)."""
    with _LOCK:
        return _CODECS.get(name)


def registered_codecs() -> list[ExtensionCodec]:
    """Every registered codec, by name."""
    with _LOCK:
        return [_CODECS[name] for name in sorted(_CODECS)]
