"""A small, pickle-free container format for serialised indexes.

Layout: the 8-byte magic ``b"GALIDX\\x00\\x01"``, a little-endian uint32 header length, a UTF-8 JSON
header, then the raw bytes of each array back to back. The header records the index kind, its
metadata and, per array, its dtype, shape, offset and length. Only a fixed set of plain numeric
dtypes is accepted when reading, and every length is checked, so a truncated or tampered buffer
raises ValueError instead of producing a broken index.

The JSON header is padded with spaces so that the arrays start :data:`ALIGNMENT` bytes into the
container (a reader may memory-map them in place). Writing never joins the arrays into one buffer
(:class:`Packed` streams them), and reading goes through a :class:`Source`, so that a store file is
read straight into the arrays an index keeps (:mod:`galleria.store._tensorfile`).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

__all__ = [
    "ALIGNMENT",
    "Packed",
    "Source",
    "Unpacked",
    "as_buffer",
    "pack",
    "pack_parts",
    "unpack",
]

MAGIC = b"GALIDX\x00\x01"
FORMAT_VERSION = 1
#: Offset (within the container) at which the first array starts is a multiple of this.
ALIGNMENT = 64
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


def _as_view(data: Any) -> memoryview:
    """``data`` as a flat byte view, without copying it."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise ValueError(f"data must be a 1-D uint8 array, got dtype {data.dtype} and shape {data.shape}")
        return np.ascontiguousarray(data).data.cast("B")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return memoryview(data).cast("B")
    raise TypeError(f"data must be bytes, bytearray, memoryview or a uint8 array, got {type(data).__name__}")


# ---------------------------------------------------------------------------------------------- writing


class Streamed(Protocol):
    """A part of a container produced on demand (a faiss index written through a callback)."""

    nbytes: int

    def write(self, sink: Callable[[memoryview], None]) -> None:
        """Pass the part's bytes to ``sink`` in order (exactly ``nbytes`` of them)."""
        ...


class Packed:
    """A serialised index as its parts: the container header, then each array's bytes, never joined."""

    def __init__(self, head: bytes, parts: list[np.ndarray | Streamed]) -> None:
        self.head = head
        self.parts = parts
        self.nbytes = len(head) + sum(int(part.nbytes) for part in parts)

    def write(self, sink: Callable[[memoryview], None]) -> None:
        """Pass every byte of the container to ``sink``, part by part (no copy of an array is made)."""
        sink(memoryview(self.head))
        for part in self.parts:
            if isinstance(part, np.ndarray):
                if part.nbytes:
                    sink(part.reshape(-1).view(np.uint8).data)
            else:
                part.write(sink)

    def to_bytes(self) -> bytes:
        """The whole container as one ``bytes`` (what ``SearchIndex.to_bytes`` returns)."""
        chunks: list[bytes] = []
        self.write(lambda view: chunks.append(bytes(view)))
        return b"".join(chunks)


def _little_endian(array: np.ndarray) -> np.ndarray:
    contiguous = np.ascontiguousarray(array)
    if contiguous.dtype.byteorder == ">":
        return contiguous.astype(contiguous.dtype.newbyteorder("<"))
    return contiguous


def pack_parts(kind: str, meta: dict[str, Any], arrays: dict[str, np.ndarray | Streamed]) -> Packed:
    """Lay out ``meta`` (JSON-able) and named ``arrays`` (numpy arrays, or streamed uint8 parts) as a
    container for an index of type ``kind``, without copying the arrays."""
    entries = []
    parts: list[np.ndarray | Streamed] = []
    offset = 0
    for key, array in arrays.items():
        if isinstance(array, np.ndarray):
            contiguous = _little_endian(array)
            dtype, shape, size = contiguous.dtype.str, list(contiguous.shape), int(contiguous.nbytes)
            parts.append(contiguous)
        else:
            dtype, shape, size = "|u1", [int(array.nbytes)], int(array.nbytes)
            parts.append(array)
        entries.append({"name": key, "dtype": dtype, "shape": shape, "offset": offset, "nbytes": size})
        offset += size
    header = {"format": FORMAT_VERSION, "kind": kind, "meta": meta, "arrays": entries}
    encoded = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    encoded += b" " * (-(len(MAGIC) + _PREFIX.size + len(encoded)) % ALIGNMENT)  # JSON allows the spaces
    return Packed(MAGIC + _PREFIX.pack(len(encoded)) + encoded, parts)


def pack(kind: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """Serialise ``meta`` (JSON-able) and named numpy ``arrays`` for an index of type ``kind``."""
    return pack_parts(kind, meta, dict(arrays)).to_bytes()


# ---------------------------------------------------------------------------------------------- reading


class Source(Protocol):
    """The bytes of one container, read front to back (a buffer, or a range of a store file)."""

    @property
    def size(self) -> int:
        """Total bytes of the container."""
        ...

    def read(self, size: int) -> bytes:
        """The next ``size`` bytes (the caller has checked that they exist)."""
        ...

    def read_array(self, name: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
        """The next array, as an array the index may keep (the caller has checked its size)."""
        ...

    def read_blob(self, name: str, nbytes: int) -> Any:
        """The next ``nbytes`` bytes of serialised faiss data: a 1-D uint8 array, or a handle that
        :func:`galleria.index._faiss.deserialize` reads from where they lie."""
        ...


class _BufferSource:
    """A container held in memory: every array is copied out (the buffer is not kept)."""

    def __init__(self, buffer: memoryview) -> None:
        self._buffer = buffer
        self._pos = 0

    @property
    def size(self) -> int:
        return len(self._buffer)

    def read(self, size: int) -> bytes:
        chunk = bytes(self._buffer[self._pos : self._pos + size])
        self._pos += size
        return chunk

    def read_array(self, name: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
        count = math.prod(shape)
        raw = np.frombuffer(self._buffer, dtype=dtype, count=count, offset=self._pos)
        self._pos += count * dtype.itemsize
        copied: np.ndarray = raw.reshape(shape).copy()
        return copied

    def read_blob(self, name: str, nbytes: int) -> Any:
        return self.read_array(name, np.dtype(np.uint8), (nbytes,))


class Unpacked:
    """A container already read from a :class:`Source`: its kind, metadata and arrays.

    ``from_bytes`` of every built-in index accepts one in place of bytes (see :func:`unpack`).
    """

    def __init__(self, kind: str, meta: dict[str, Any], arrays: dict[str, Any], size: int) -> None:
        self.kind, self.meta, self.arrays, self.size = kind, meta, arrays, size

    def __len__(self) -> int:
        """Bytes of the container (what ``len(to_bytes())`` was)."""
        return self.size

    @classmethod
    def read(cls, source: Source, kind: str, blobs: frozenset[str] = frozenset()) -> Unpacked:
        """Read and check a whole container for an index of type ``kind``; the arrays named in
        ``blobs`` (uint8 faiss data) come from ``source.read_blob``, the others from
        ``source.read_array``. ValueError if invalid."""
        start = len(MAGIC) + _PREFIX.size
        total = source.size
        if total < start:
            raise ValueError("data is not a serialised galleria index (bad magic bytes or too short)")
        prefix = source.read(start)
        if prefix[: len(MAGIC)] != MAGIC:
            raise ValueError("data is not a serialised galleria index (bad magic bytes or too short)")
        (header_length,) = _PREFIX.unpack_from(prefix, len(MAGIC))
        if start + header_length > total:
            raise ValueError("serialised index is truncated (header runs past the end of the data)")
        try:
            header = json.loads(source.read(header_length).decode("utf-8"))
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
        meta, entries = header.get("meta"), header.get("arrays")
        if not isinstance(meta, dict) or not isinstance(entries, list):
            raise ValueError("serialised index has a corrupt header (missing 'meta' or 'arrays')")
        body = start + header_length
        arrays: dict[str, Any] = {}
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
            if (
                any(size < 0 for size in shape)
                or len(shape) > 8
                or offset != expected_offset
                or name in arrays
            ):
                raise ValueError(f"serialised index array {name!r} has an invalid shape or offset")
            # Python integers: a shape of 2**64 must not overflow numpy's int64 on the way to the check.
            if math.prod(shape) * dtype.itemsize != nbytes:
                raise ValueError(
                    f"serialised index array {name!r}: shape {shape} does not match {nbytes} bytes"
                )
            if body + offset + nbytes > total:
                raise ValueError(
                    f"serialised index is truncated (array {name!r} runs past the end of the data)"
                )
            if name in blobs and dtype_str == "|u1" and len(shape) == 1:
                arrays[name] = source.read_blob(name, nbytes)
            else:
                arrays[name] = source.read_array(name, dtype, shape)
            expected_offset = offset + nbytes
        if body + expected_offset != total:
            raise ValueError("serialised index has trailing bytes after its last array")
        return cls(kind, meta, arrays, total)


def unpack(data: Any, kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read a container written by :func:`pack` for an index of type ``kind``; ValueError if invalid.

    ``data`` is bytes, a bytearray, a memoryview, a 1-D uint8 array, or an :class:`Unpacked` read
    from a store file (its faiss data may then be a handle for ``deserialize``).
    """
    if not isinstance(data, Unpacked):
        data = Unpacked.read(_BufferSource(_as_view(data)), kind)
    unpacked = data
    if unpacked.kind != kind:
        raise ValueError(f"serialised index is of kind {unpacked.kind!r}, expected {kind!r}")
    return unpacked.meta, unpacked.arrays
