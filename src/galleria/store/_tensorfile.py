"""Store files at the byte level: a safetensors file read and written without copies of its tensors.

The layout is plain safetensors (an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the tensors back to back), so any safetensors reader
opens a store file. galleria reads it itself, so that nothing is held twice:

* plain arrays are read with ``preadv`` straight into the arrays the index keeps (or, on request,
  memory-mapped read-only in place), hashed as they arrive;
* serialised faiss data is hashed on the way (with a digest per :data:`CHUNK` bytes), then handed
  to faiss through a callback reader that re-checks every chunk against its digest, so faiss builds
  its structures from the file and sees no byte that was not checksummed;
* writing streams every tensor from where it lies, and the header (whose digests are only known at
  the end) is written last into the space reserved for it.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from galleria.index import Packed

__all__ = ["CHUNK", "FileBlob", "Layout", "TensorReader", "TensorSpan", "read_layout", "write_tensors"]

#: Bytes hashed (and re-checked before faiss reads them) at a time.
CHUNK = 1 << 18
#: The data section starts at a multiple of this (the header is padded with spaces, as safetensors allows).
DATA_ALIGNMENT = 64
#: Largest safetensors header galleria reads (the paths of tens of millions of images fit).
MAX_HEADER = 1 << 31
_DTYPES: dict[str, np.dtype[Any]] = {
    "U8": np.dtype(np.uint8),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "F32": np.dtype("<f4"),
}
_NAMES: dict[np.dtype[Any], str] = {dtype: name for name, dtype in _DTYPES.items()}
_LENGTH = struct.Struct("<Q")


@dataclass(frozen=True)
class TensorSpan:
    """Where one tensor lies: its safetensors dtype name, shape and absolute byte range."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    nbytes: int

    @property
    def numpy_dtype(self) -> np.dtype[Any] | None:
        """The numpy dtype (None for a dtype galleria does not read)."""
        found: np.dtype[Any] | None = _DTYPES.get(self.dtype)
        return found


@dataclass(frozen=True)
class Layout:
    """A safetensors file's header: its string metadata and its tensors."""

    metadata: dict[str, str] | None
    tensors: dict[str, TensorSpan]


def _damaged(name: str, problem: str) -> ValueError:
    return ValueError(f"{name!r} is not a readable safetensors file (truncated or damaged?): {problem}")


def _pread_exact(fd: int, view: memoryview, offset: int) -> None:
    """Fill ``view`` from ``fd`` at ``offset``; ValueError if the file ends first."""
    done = 0
    while done < len(view):
        count = os.preadv(fd, [view[done:]], offset + done)
        if count <= 0:
            raise ValueError(f"the file ended {len(view) - done} bytes early (changed while reading?)")
        done += count


def read_layout(name: str, file: BinaryIO, file_size: int) -> Layout:
    """Parse and check the safetensors header of ``file``: every tensor's range lies inside the data
    section, the ranges tile it exactly, and sizes match shapes (ValueError naming the file)."""
    if file_size < _LENGTH.size:
        raise _damaged(name, f"only {file_size} bytes")
    (length,) = _LENGTH.unpack(os.pread(file.fileno(), _LENGTH.size, 0))
    if length > min(file_size - _LENGTH.size, MAX_HEADER):
        raise _damaged(name, f"header of {length} bytes in a file of {file_size}")
    raw = bytearray(length)
    _pread_exact(file.fileno(), memoryview(raw), _LENGTH.size)
    try:
        header = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise _damaged(name, "header is nested too deeply") from None
    except ValueError as error:  # bad UTF-8, bad JSON, an integer of more than 4300 digits
        raise _damaged(name, f"header is not JSON ({error})") from None
    if not isinstance(header, dict):
        raise _damaged(name, "header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and (
        not isinstance(metadata, dict)
        or not all(isinstance(key, str) and isinstance(value, str) for key, value in metadata.items())
    ):
        raise _damaged(name, "metadata is not a map of strings")
    base = _LENGTH.size + length
    tensors: dict[str, TensorSpan] = {}
    for key, entry in header.items():
        try:
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            if not isinstance(dtype, str) or not all(type(size) is int and size >= 0 for size in shape):
                raise TypeError(dtype)
            if type(begin) is not int or type(end) is not int or not 0 <= begin <= end:
                raise TypeError(begin)
        except (KeyError, TypeError, ValueError):
            raise _damaged(name, f"tensor {key!r} has a malformed entry") from None
        span = TensorSpan(dtype, tuple(shape), base + begin, end - begin)
        known = span.numpy_dtype
        if known is not None and math.prod(span.shape) * known.itemsize != span.nbytes:
            raise _damaged(name, f"tensor {key!r}: shape {list(shape)} does not match {span.nbytes} bytes")
        tensors[key] = span
    position = base
    for span in sorted(tensors.values(), key=lambda span: span.start):
        if span.start != position:
            raise _damaged(name, "tensor byte ranges overlap or leave holes")
        position += span.nbytes
    if position != file_size:
        raise _damaged(name, f"the tensors end at byte {position}, the file at {file_size}")
    return Layout(metadata, tensors)


class TensorReader:
    """Reads one tensor's bytes front to back, hashing them (a :class:`galleria.index._serial.Source`).

    ``mapped`` names arrays to memory-map read-only in place instead of reading them (where they lie
    aligned for their dtype); the file must then stay unchanged while they are in use.
    """

    def __init__(self, file: BinaryIO, span: TensorSpan, mapped: frozenset[str] = frozenset()) -> None:
        self._file = file
        self._start = span.start
        self._size = span.nbytes
        self._pos = 0
        self._mapped = mapped
        self._hasher = hashlib.sha256()

    @property
    def size(self) -> int:
        return self._size

    def _fill(self, view: memoryview) -> None:
        for begin in range(0, len(view), CHUNK):
            part = view[begin : begin + CHUNK]
            _pread_exact(self._file.fileno(), part, self._start + self._pos)
            self._hasher.update(part)
            self._pos += len(part)

    def read(self, size: int) -> bytes:
        chunk = bytearray(size)
        self._fill(memoryview(chunk))
        return bytes(chunk)

    def read_array(self, name: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
        count = math.prod(shape)
        offset = self._start + self._pos
        if name in self._mapped and count and offset % dtype.itemsize == 0:
            mapped: np.ndarray = np.memmap(self._file, dtype=dtype, mode="r", offset=offset, shape=shape)
            flat = mapped.reshape(-1).view(np.uint8)
            for begin in range(0, flat.size, CHUNK):
                self._hasher.update(flat[begin : begin + CHUNK].data)
            self._pos += flat.size
            return mapped
        array = np.empty(shape, dtype=dtype)
        if count:
            self._fill(array.reshape(-1).view(np.uint8).data)
        return array

    def read_blob(self, name: str, nbytes: int) -> FileBlob:
        buffer = bytearray(min(CHUNK, nbytes))
        digests = []
        blob_start = self._start + self._pos
        for begin in range(0, nbytes, CHUNK):
            part = memoryview(buffer)[: min(CHUNK, nbytes - begin)]
            self._fill(part)
            digests.append(hashlib.sha256(part).digest())
        return FileBlob(self._file, blob_start, nbytes, digests)

    def hexdigest(self) -> str:
        """The SHA-256 of the whole tensor (the bytes not read yet are hashed first)."""
        if self._pos < self._size:
            buffer = bytearray(min(CHUNK, self._size - self._pos))
            while self._pos < self._size:
                self._fill(memoryview(buffer)[: min(CHUNK, self._size - self._pos)])
        return self._hasher.hexdigest()


class FileBlob:
    """Serialised faiss bytes lying in an open store file, with one digest per :data:`CHUNK` bytes
    (a :class:`galleria.index._faiss.FaissBlob`): every read is checked against them."""

    def __init__(self, file: BinaryIO, start: int, nbytes: int, digests: list[bytes]) -> None:
        self._file = file
        self._start = start
        self.nbytes = nbytes
        self._digests = digests

    def _check(self, number: int, data: Any) -> None:
        if hashlib.sha256(data).digest() != self._digests[number]:
            raise ValueError("the store file changed while it was being read (checksum mismatch)")

    @contextmanager
    def mapped(self) -> Iterator[memoryview]:
        """The bytes, memory-mapped read-only and checked; the mapping's pages are dropped on exit."""
        granularity = mmap.ALLOCATIONGRANULARITY
        base = self._start - self._start % granularity
        delta = self._start - base
        mapping = mmap.mmap(self._file.fileno(), delta + self.nbytes, offset=base, access=mmap.ACCESS_READ)
        try:
            view = memoryview(mapping)[delta : delta + self.nbytes]
            for number, begin in enumerate(range(0, self.nbytes, CHUNK)):
                self._check(number, view[begin : begin + CHUNK])
            yield view
        finally:
            if hasattr(mmap, "MADV_DONTNEED"):
                mapping.madvise(mmap.MADV_DONTNEED)  # leave no page of it counted against this process
            try:
                view.release()
                mapping.close()
            except (BufferError, UnboundLocalError):
                pass  # a traceback still holds a view: the mapping goes with it

    def reader(self) -> Any:
        """A faiss ``IOReader`` over the bytes, each chunk re-checked before faiss sees it."""
        import faiss as _faiss

        faiss: Any = _faiss  # its bundled stubs miss the callback readers

        state: dict[str, Any] = {"number": 0, "chunk": b"", "used": 0}

        def callback(size: int) -> bytes:
            # faiss asks for at most CHUNK bytes at a time (the reader's block size) and copies them
            # into its own arrays; a whole checked chunk is handed over as it was read, not copied.
            pieces = []
            while size > 0:
                chunk, used = state["chunk"], state["used"]
                if used == len(chunk):
                    number = state["number"]
                    begin = number * CHUNK
                    if begin >= self.nbytes:
                        break
                    want = min(CHUNK, self.nbytes - begin)
                    chunk = os.pread(self._file.fileno(), want, self._start + begin)
                    if len(chunk) != want:
                        raise ValueError("the store file ended early (changed while it was being read)")
                    self._check(number, chunk)
                    used = 0
                    state.update(number=number + 1, chunk=chunk, used=0)
                take = min(size, len(chunk) - used)
                pieces.append(chunk if take == len(chunk) else chunk[used : used + take])
                state["used"] = used + take
                size -= take
            return pieces[0] if len(pieces) == 1 else b"".join(pieces)

        return faiss.PyCallbackIOReader(callback, CHUNK)


# ---------------------------------------------------------------------------------------------- writing


def _tensor_entry(value: np.ndarray | Packed) -> tuple[str, list[int], int]:
    if isinstance(value, Packed):
        return "U8", [value.nbytes], value.nbytes
    name = _NAMES.get(value.dtype)
    if name is None:
        raise TypeError(f"store tensors are uint8, int32, int64 or float32, got {value.dtype}")
    return name, list(value.shape), int(value.nbytes)


def _layout_header(entries: dict[str, tuple[str, list[int], int]], metadata: dict[str, str]) -> bytes:
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for key, (dtype, shape, nbytes) in entries.items():
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    encoded = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return encoded + b" " * (-(_LENGTH.size + len(encoded)) % DATA_ALIGNMENT)


def write_tensors(
    file: BinaryIO,
    tensors: dict[str, np.ndarray | Packed],
    metadata_for: Callable[[dict[str, str]], dict[str, str]],
) -> None:
    """Write a safetensors file to ``file`` (open for writing, at offset 0), streaming each tensor.

    ``metadata_for`` gets each tensor's SHA-256 (hex) once the data is written and returns the
    file's string metadata; its serialised length must not depend on the digests' values (they
    are fixed-length hex), which is checked.
    """
    entries = {key: _tensor_entry(value) for key, value in tensors.items()}
    placeholder = _layout_header(entries, metadata_for({key: "0" * 64 for key in tensors}))
    file.seek(_LENGTH.size + len(placeholder))
    digests: dict[str, str] = {}
    for key, value in tensors.items():
        hasher = hashlib.sha256()

        def sink(view: memoryview, hasher: Any = hasher) -> None:
            for begin in range(0, len(view), CHUNK):
                part = view[begin : begin + CHUNK]
                hasher.update(part)
                file.write(part)

        if isinstance(value, Packed):
            value.write(sink)
        elif value.nbytes:
            sink(np.ascontiguousarray(value).reshape(-1).view(np.uint8).data)
        digests[key] = hasher.hexdigest()
    header = _layout_header(entries, metadata_for(digests))
    if len(header) != len(placeholder):
        raise RuntimeError("the store header changed length while it was being written")
    file.seek(0)
    file.write(_LENGTH.pack(len(header)) + header)
