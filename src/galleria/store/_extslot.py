"""The store file's extension slot: reading, checking and writing records the store does not interpret.

See :mod:`galleria.store.extensions` for the slot and its codecs. Reading goes in three steps, so
nothing is read before the header is checked: :func:`header_records` (the header alone, in every
load and in :func:`~galleria.store.persistence.read_store_header`), :func:`group_tensors` (the
file's extension tensors, before any is read), :func:`decode_records` (each record with its tensors).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from galleria.store.extensions import (
    LEGACY_RECORDS,
    MAX_EXTENSION_TENSORS,
    MAX_EXTENSIONS,
    MAX_OPAQUE_TENSOR_BYTES,
    MAX_RECORD_BYTES,
    NAME_PATTERN,
    TENSOR_PREFIX,
    ExtensionContext,
    OpaqueRecord,
    extension_codec,
    record_bytes,
    registered_codecs,
    tensor_key,
)

__all__ = [
    "LEGACY_TENSORS",
    "SLOT_KEY",
    "SlotRecord",
    "decode_records",
    "encode_records",
    "group_tensors",
    "header_records",
    "is_extension_tensor",
]

#: The header key of the slot.
SLOT_KEY = "extensions"
#: Old tensor name -> (record, short name), for files written before the slot.
LEGACY_TENSORS = {
    old: (record, short) for record, names in LEGACY_RECORDS.items() for old, short in names.items()
}


@dataclass(frozen=True)
class SlotRecord:
    """One record of a checked header: its name, JSON value and where the file kept it."""

    name: str
    record: Any
    legacy: bool

    @property
    def label(self) -> str:
        """How errors name it: the old top-level key, or its entry in the slot."""
        return f"header key {self.name!r}" if self.legacy else f"header key '{SLOT_KEY}.{self.name}'"

    def tensor_name(self, short: str) -> str:
        if self.legacy:
            return next((old for old, (_, key) in LEGACY_TENSORS.items() if key == short), short)
        return tensor_key(self.name, short)


def is_extension_tensor(key: str) -> bool:
    """Whether the file's tensor ``key`` belongs to an extension record (its name well formed)."""
    if key in LEGACY_TENSORS:
        return True
    parts = key.split("/")
    return (
        key.startswith(TENSOR_PREFIX)
        and len(parts) == 3
        and all(NAME_PATTERN.fullmatch(part) for part in parts[1:])
    )


def _tensor_owner(key: str) -> tuple[str, str]:
    """(record name, short name) of an extension tensor."""
    if key in LEGACY_TENSORS:
        return LEGACY_TENSORS[key]
    _, record, short = key.split("/")
    return record, short


def header_records(
    name: str, header: dict[str, Any], fail: Callable[[str, str], ValueError], context: ExtensionContext
) -> dict[str, SlotRecord]:
    """The header's extension records (old top-level keys and the slot), bounded and checked by their
    codecs' :meth:`~galleria.store.extensions.ExtensionCodec.check_record`; ``fail(key, problem)``
    builds the error for a malformed slot."""
    found: dict[str, SlotRecord] = {
        key: SlotRecord(key, header[key], True)
        for key in LEGACY_RECORDS
        if key in header and header[key] is not None
    }
    slot = header.get(SLOT_KEY)
    if slot is not None:
        if not isinstance(slot, dict) or len(slot) > MAX_EXTENSIONS:
            raise fail(SLOT_KEY, f"must be an object of at most {MAX_EXTENSIONS} records")
        for key, record in slot.items():
            if not isinstance(key, str) or not NAME_PATTERN.fullmatch(key):
                raise fail(
                    SLOT_KEY, f"names a record {str(key)[:80]!r}, not matching {NAME_PATTERN.pattern!r}"
                )
            if key in found:
                raise fail(SLOT_KEY, f"records {key!r}, which the header also holds at its top level")
            found[key] = SlotRecord(key, record, False)
    for entry in found.values():
        if record_bytes(entry.record) > MAX_RECORD_BYTES:
            raise ValueError(f"{name!r}: {entry.label} is larger than {MAX_RECORD_BYTES} bytes")
        codec = extension_codec(entry.name)
        if codec is not None:
            codec.check_record(entry.record, _context_for(context, entry))
    return found


def _context_for(context: ExtensionContext, entry: SlotRecord, shorts: Any = ()) -> ExtensionContext:
    names = {short: entry.tensor_name(short) for short in shorts}
    return ExtensionContext(
        context.source, context.rows, context.space, context.index_name, names, entry.label
    )


def group_tensors(name: str, keys: Any, records: dict[str, SlotRecord]) -> dict[str, dict[str, str]]:
    """The file's extension tensors by record (short name -> file name), checked before any is read:
    each belongs to a record of the header, kept where the record is (old or new), within bounds."""
    groups: dict[str, dict[str, str]] = {}
    for key in sorted(keys):
        if not is_extension_tensor(key):
            continue
        record, short = _tensor_owner(key)
        members = groups.setdefault(record, {})
        if short in members:
            raise ValueError(f"{name!r} holds both {members[short]!r} and {key!r} for one record's tensor")
        members[short] = key
    for record, members in groups.items():
        entry = records.get(record)
        if entry is None:
            label = (
                f"header key {record!r}" if record in LEGACY_RECORDS else f"header key '{SLOT_KEY}.{record}'"
            )
            raise ValueError(f"{name!r} holds tensors {sorted(members.values())} but no {label}")
        if any(entry.tensor_name(short) != key for short, key in members.items()):
            raise ValueError(
                f"{name!r}: tensors {sorted(members.values())} are not where {entry.label} keeps them"
            )
        codec = extension_codec(record)
        allowed = codec.tensors if codec is not None else None
        if len(members) > MAX_EXTENSION_TENSORS or (allowed is not None and not set(members) <= allowed):
            raise ValueError(f"{name!r}: {entry.label} holds unexpected tensors {sorted(members.values())}")
    return groups


def decode_records(
    name: str,
    records: dict[str, SlotRecord],
    tensors: dict[str, dict[str, np.ndarray]],
    context: ExtensionContext,
) -> dict[str, Any]:
    """Each record's value: what its codec returns, or an :class:`OpaqueRecord` (bounded) without one."""
    values: dict[str, Any] = {}
    for key, entry in records.items():
        arrays = tensors.get(key, {})
        codec = extension_codec(key)
        if codec is not None:
            shorts = set(arrays) | set(codec.tensors)
            values[key] = codec.check(entry.record, dict(arrays), _context_for(context, entry, shorts))
            continue
        if sum(array.nbytes for array in arrays.values()) > MAX_OPAQUE_TENSOR_BYTES:
            raise ValueError(
                f"{name!r}: {entry.label} holds more than {MAX_OPAQUE_TENSOR_BYTES} bytes of tensors"
            )
        values[key] = OpaqueRecord(key, entry.record, dict(arrays))
    return values


def encode_records(state: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(slot, tensors)`` of a store file for ``state``: every registered codec's value (read from
    its ``state_field`` or ``state.extensions``), then the opaque records it does not replace, all in
    the slot (a record read from an older file's top-level key moves there, its tensors renamed)."""
    slot: dict[str, Any] = {}
    tensors: dict[str, np.ndarray] = {}

    def place(name: str, record: Any, arrays: Any) -> None:
        slot[name] = record
        tensors.update({tensor_key(name, short): array for short, array in arrays.items()})

    kept = dict(state.extensions)
    for codec in registered_codecs():
        value = getattr(state, codec.state_field) if codec.state_field else kept.get(codec.name)
        if value is None or isinstance(value, OpaqueRecord):
            continue
        place(codec.name, *codec.encode(value))
        kept.pop(codec.name, None)  # a fresh value replaces an opaque record of the same name
    for key, value in kept.items():
        if isinstance(value, OpaqueRecord):
            place(key, value.record, value.tensors)
    return slot, tensors
