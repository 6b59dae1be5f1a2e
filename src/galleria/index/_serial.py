"""A small, pickle-free container format for serialised indexes.

Layout: the 8-byte magic ``b"GALIDX\\x00\\x01"``, a little-endian uint32 header length, a UTF-8 JSON
header, then the raw bytes of each array back to back. The header records the index kind, its
metadata and, per array, its dtype, shape, offset and length. Only a fixed set of plain numeric
dtypes is accepted when reading, and every length is checked, so a truncated or tampered buffer
raises ValueError instead of producing a broken index.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

__all__ = ["as_buffer", "pack", "unpack"]

MAGIC = b"GALIDX\x00\x01"
FORMAT_VERSION = 1
_ALLOWED_DTYPES = frozenset({"<f4", "<i8", "|u1", "|b1"})
_PREFIX = struct.Struct("<I")


def as_buffer(data: Any) -> bytes:
    """Return ``data`` (bytes, bytearray, memoryview or a 1-D uint8 array) as ``bytes``."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise ValueError(f"data must be a 1-D uint8 array, got dtype {data.dtype} and shape {data.shape}")
        return data.tobytes()
    raise TypeError(f"data must be bytes, bytearray, memoryview or a uint8 array, got {type(data).__name__}")


def pack(kind: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """Serialise ``meta`` (JSON-able) and named numpy ``arrays`` for an index of type ``kind``."""
    entries = []
    blobs = []
    offset = 0
    for key, array in arrays.items():
        contiguous = np.ascontiguousarray(array)
        dtype = contiguous.dtype.newbyteorder("<") if contiguous.dtype.byteorder == ">" else contiguous.dtype
        blob = contiguous.astype(dtype, copy=False).tobytes()
        size, shape = len(blob), list(contiguous.shape)
        entries.append({"name": key, "dtype": dtype.str, "shape": shape, "offset": offset, "nbytes": size})
        blobs.append(blob)
        offset += len(blob)
    header = {"format": FORMAT_VERSION, "kind": kind, "meta": meta, "arrays": entries}
    encoded = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return b"".join([MAGIC, _PREFIX.pack(len(encoded)), encoded, *blobs])


def unpack(data: Any, kind: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read a buffer written by :func:`pack` for an index of type ``kind``; raise ValueError if invalid."""
    buffer = as_buffer(data)
    start = len(MAGIC) + _PREFIX.size
    if len(buffer) < start or buffer[: len(MAGIC)] != MAGIC:
        raise ValueError("data is not a serialised galleria index (bad magic bytes or too short)")
    (header_length,) = _PREFIX.unpack_from(buffer, len(MAGIC))
    if start + header_length > len(buffer):
        raise ValueError("serialised index is truncated (header runs past the end of the data)")
    try:
        header = json.loads(buffer[start : start + header_length].decode("utf-8"))
    except RecursionError:
        raise ValueError("serialised index has a corrupt header: nested too deeply") from None
    except ValueError as error:  # bad UTF-8, bad JSON, an integer of more than 4300 digits
        raise ValueError(f"serialised index has a corrupt header: {error}") from error
    if not isinstance(header, dict):
        raise ValueError("serialised index has a corrupt header (not a JSON object)")
    if header.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"serialised index has format version {header.get('format')!r}; "
            f"this galleria reads version {FORMAT_VERSION}"
        )
    if header.get("kind") != kind:
        raise ValueError(f"serialised index is of kind {header.get('kind')!r}, expected {kind!r}")
    meta = header.get("meta")
    entries = header.get("arrays")
    if not isinstance(meta, dict) or not isinstance(entries, list):
        raise ValueError("serialised index has a corrupt header (missing 'meta' or 'arrays')")
    body = start + header_length
    arrays: dict[str, np.ndarray] = {}
    expected_offset = 0
    for entry in entries:
        try:
            name, dtype_str = str(entry["name"]), str(entry["dtype"])
            shape = tuple(int(size) for size in entry["shape"])
            offset, nbytes = int(entry["offset"]), int(entry["nbytes"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"serialised index has a corrupt array entry: {entry!r}") from error
        if dtype_str not in _ALLOWED_DTYPES:
            raise ValueError(f"serialised index array {name!r} has unsupported dtype {dtype_str!r}")
        dtype = np.dtype(dtype_str)
        if any(size < 0 for size in shape) or len(shape) > 8 or offset != expected_offset:
            raise ValueError(f"serialised index array {name!r} has an invalid shape or offset")
        # Python integers: a shape of 2**64 must not overflow numpy's int64 on the way to the check.
        if math.prod(shape) * dtype.itemsize != nbytes:
            raise ValueError(f"serialised index array {name!r}: shape {shape} does not match {nbytes} bytes")
        if body + offset + nbytes > len(buffer):
            raise ValueError(f"serialised index is truncated (array {name!r} runs past the end of the data)")
        raw = np.frombuffer(buffer, dtype=dtype, count=nbytes // dtype.itemsize, offset=body + offset)
        arrays[name] = raw.reshape(shape).copy()
        expected_offset = offset + nbytes
    if body + expected_offset != len(buffer):
        raise ValueError("serialised index has trailing bytes after its last array")
    return meta, arrays
