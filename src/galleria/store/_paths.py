"""A store's gallery paths in row order, held compactly: no Python object per row until one is asked for.

:class:`PathTable` keeps the paths as one UTF-8 buffer and ``n + 1`` int64 offsets (row ``i`` is
``data[offsets[i]:offsets[i + 1]]``) — the form a store file holds them in, so loading reads them
straight into the table — and finds the row of a path without a ``{path: row}`` dict: the rows'
hashes are kept sorted (with the row each came from), a lookup binary-searches the hash and
compares the bytes of the rows that share it. The hash is Python's own ``hash`` of the encoded
bytes, keyed per process (``PYTHONHASHSEED``) like the dict it replaces, so a file cannot choose
paths whose hashes collide.

A table never changes: adding or removing rows makes a new one (the store swaps it under its
writer lock; code that kept the old one can tell by identity that the gallery changed).

Memory: ``len(path) + 8`` bytes per row for the paths and offsets plus 8 for the lookup (a 32-bit
hash and a 32-bit row), against about 150 bytes per row for a list of str and a dict.
"""

from __future__ import annotations

import codecs
import secrets
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np

__all__ = ["PathTable", "path_error", "read_path_table"]

#: Rows hashed or decoded at a time (bounds the transient bytes objects of a pass over the table).
_ROWS_PER_PASS = 1 << 12
#: Bytes checked at a time when validating UTF-8.
_BYTES_PER_PASS = 1 << 18
#: In memory a path may hold any str (lone surrogates included); a file holds only valid UTF-8.
_IN_MEMORY = "surrogatepass"
_MASK = 0xFFFFFFFF


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _hash(key: bytes) -> int:
    """The 32-bit lookup hash of an encoded path (the low half of Python's keyed ``hash``)."""
    return hash(key) & _MASK


def _sorted_lookup(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows' :func:`_hash` values sorted, and the row of each (both uint32).

    Each row's (hash, row) pair is packed into one 64-bit word, a chunk of rows at a time, and the
    words are sorted in place: 8 bytes a row at the peak besides the two results.
    """
    count = offsets.size - 1
    if count > _MASK:
        raise ValueError(f"a path table holds at most {_MASK} rows, got {count}")
    packed = np.empty(count, dtype=np.uint64)
    for first in range(0, count, _ROWS_PER_PASS):
        last = min(count, first + _ROWS_PER_PASS)
        base = int(offsets[first])
        raw = data[base : int(offsets[last])].tobytes()
        bounds = (offsets[first : last + 1] - base).tolist()
        hashes = np.fromiter(
            (_hash(raw[bounds[i] : bounds[i + 1]]) for i in range(last - first)),
            dtype=np.uint64,
            count=last - first,
        )
        packed[first:last] = (hashes << np.uint64(32)) | np.arange(first, last, dtype=np.uint64)
    packed.sort()
    halves = packed.view(np.uint32).reshape(count, 2)  # (low, high) words of each pair
    low, high = (0, 1) if sys.byteorder == "little" else (1, 0)
    return np.ascontiguousarray(halves[:, high]), np.ascontiguousarray(halves[:, low])


class PathTable(Sequence[str]):
    """Unique gallery paths in row order (a read-only ``Sequence[str]``), with path → row lookup.

    Build one with :meth:`from_paths` (str paths) or :func:`read_path_table` (a file's arrays).

    Examples
    --------
    >>> table = PathTable.from_paths(["a.png", "b/c.png", "é.png"])
    >>> len(table), table[1], table[-1], list(table)
    (3, 'b/c.png', 'é.png', ['a.png', 'b/c.png', 'é.png'])
    >>> table.row("é.png"), table.row("z.png"), "a.png" in table
    (2, None, True)
    >>> table.extended(["d.png"]).select(np.array([False, True, True, True])).row("d.png")
    2
    """

    __slots__ = ("_data", "_offsets", "_order", "_sorted", "token")

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        """Adopt ``data`` (uint8) and ``offsets`` (int64, ``n + 1`` ascending from 0 to ``data.size``),
        already checked; they are made read-only."""
        self._data = _frozen(data)
        self._offsets = _frozen(offsets)
        hashes, rows = _sorted_lookup(data, offsets)
        self._sorted = _frozen(hashes)
        self._order = _frozen(rows)
        #: This table's identity (tables are immutable): a candidate that carries it with its row can
        #: be placed without looking its path up. Random 63 bits, never 0 ("no table"), so that a
        #: table copied into another process cannot share it with one made there.
        self.token = secrets.randbits(63) | 1

    @classmethod
    def from_paths(cls, paths: Iterable[str]) -> PathTable:
        """A table of ``paths`` (str, in row order; uniqueness is :meth:`duplicate`'s to check)."""
        listed = paths if isinstance(paths, list) else list(paths)
        joined = "".join(listed)
        if joined.isascii():  # the usual case: one byte per character, no bytes object per path
            lengths = np.fromiter(map(len, listed), dtype=np.int64, count=len(listed))
            raw = joined.encode("ascii")
        else:
            encoded = [path.encode("utf-8", _IN_MEMORY) for path in listed]
            lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
            raw = b"".join(encoded)
        del joined
        offsets = np.zeros(len(listed) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(np.frombuffer(raw, dtype=np.uint8), offsets)

    # ------------------------------------------------------------------ the sequence

    @property
    def data(self) -> np.ndarray:
        """The paths' bytes back to back (read-only uint8)."""
        return self._data

    @property
    def offsets(self) -> np.ndarray:
        """Row ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (read-only int64, ``len + 1`` entries)."""
        return self._offsets

    def __len__(self) -> int:
        return int(self._offsets.size) - 1

    def _bytes(self, row: int) -> bytes:
        return self._data[int(self._offsets[row]) : int(self._offsets[row + 1])].tobytes()

    @overload
    def __getitem__(self, item: int) -> str: ...

    @overload
    def __getitem__(self, item: slice) -> list[str]: ...

    def __getitem__(self, item: int | slice) -> str | list[str]:
        if isinstance(item, slice):
            return [self[row] for row in range(*item.indices(len(self)))]
        row = int(item)
        size = len(self)
        if row < 0:
            row += size
        if not 0 <= row < size:
            raise IndexError(f"row {item} is outside a table of {size} paths")
        return self._bytes(row).decode("utf-8", _IN_MEMORY)

    def __iter__(self) -> Iterator[str]:
        count = len(self)
        for first in range(0, count, _ROWS_PER_PASS):
            last = min(count, first + _ROWS_PER_PASS)
            base = int(self._offsets[first])
            raw = self._data[base : int(self._offsets[last])].tobytes()
            bounds = (self._offsets[first : last + 1] - base).tolist()
            for i in range(last - first):
                yield raw[bounds[i] : bounds[i + 1]].decode("utf-8", _IN_MEMORY)

    def __repr__(self) -> str:
        return f"PathTable({len(self)} paths)"

    # ------------------------------------------------------------------ lookup

    def _find(self, key: bytes, hashed: int) -> int | None:
        position = int(np.searchsorted(self._sorted, np.uint32(hashed)))
        while position < self._sorted.size and self._sorted[position] == hashed:
            row = int(self._order[position])
            if self._bytes(row) == key:
                return row
            position += 1
        return None

    def row(self, path: object) -> int | None:
        """The row of ``path`` (a str), or None if the table does not hold it."""
        if not isinstance(path, str):
            return None
        key = path.encode("utf-8", _IN_MEMORY)
        return self._find(key, _hash(key))

    def __contains__(self, path: object) -> bool:
        return self.row(path) is not None

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        row = self.row(value)
        if row is None or row < start or (stop is not None and row >= stop):
            raise ValueError(f"{value!r} is not in the table")
        return row

    def count(self, value: Any) -> int:
        return int(value in self)

    def rows_of(self, paths: Sequence[str]) -> np.ndarray:
        """The rows of ``paths`` (int64), -1 where the table does not hold one."""
        keys = [path.encode("utf-8", _IN_MEMORY) for path in paths]
        hashes = np.fromiter(map(_hash, keys), dtype=np.uint32, count=len(keys))
        found = np.searchsorted(self._sorted, hashes)
        rows = np.full(len(keys), -1, dtype=np.int64)
        size = self._sorted.size
        for number, (key, position) in enumerate(zip(keys, found.tolist(), strict=True)):
            if position < size and self._sorted[position] == hashes[number]:
                row = int(self._order[position])
                if self._bytes(row) == key:  # the common case: the first row of that hash
                    rows[number] = row
                    continue
            found_row = self._find(key, int(hashes[number]))
            if found_row is not None:
                rows[number] = found_row
        return rows

    def duplicate(self) -> str | None:
        """A path the table holds twice, or None (rows sharing a hash are compared byte for byte)."""
        same = np.flatnonzero(self._sorted[1:] == self._sorted[:-1])
        if same.size == 0:
            return None
        # Runs of equal hashes: each starts where the previous position did not share its hash.
        starts = same[np.concatenate(([True], np.diff(same) > 1))]
        for start in starts.tolist():
            end = start + 1
            while end < self._sorted.size and self._sorted[end] == self._sorted[start]:
                end += 1
            seen: set[bytes] = set()
            for position in range(start, end):
                key = self._bytes(int(self._order[position]))
                if key in seen:
                    return key.decode("utf-8", _IN_MEMORY)
                seen.add(key)
        return None

    # ------------------------------------------------------------------ new tables

    def extended(self, paths: Sequence[str]) -> PathTable:
        """A new table: these rows, then ``paths``."""
        if not paths:
            return self
        added = PathTable.from_paths(paths)
        data = np.concatenate([self._data, added._data])
        offsets = np.concatenate([self._offsets, added._offsets[1:] + self._offsets[-1]])
        return PathTable(data, offsets)

    def select(self, keep: np.ndarray) -> PathTable:
        """A new table of the rows where the boolean mask ``keep`` is true, in order."""
        lengths = np.diff(self._offsets)
        data = self._data[np.repeat(keep, lengths)]
        offsets = np.zeros(int(np.count_nonzero(keep)) + 1, dtype=np.int64)
        np.cumsum(lengths[keep], out=offsets[1:])
        return PathTable(data, offsets)


# ---------------------------------------------------------------------------------------------- files


def _utf8_error(data: np.ndarray) -> int | None:
    """The byte position where ``data`` stops being strict UTF-8 (no surrogates), or None."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    for begin in range(0, data.size, _BYTES_PER_PASS):
        part = data[begin : begin + _BYTES_PER_PASS].tobytes()
        try:
            decoder.decode(part, final=begin + _BYTES_PER_PASS >= data.size)
        except UnicodeDecodeError as error:
            return begin + int(error.start)
    return None


def path_error(table: PathTable) -> str | None:
    """Why ``table`` cannot be written to a store file (a path that is empty, holds a NUL byte or is
    not valid Unicode, named), or None."""
    data, offsets = table.data, table.offsets
    empty = np.flatnonzero(offsets[1:] == offsets[:-1])
    if empty.size:
        return f"path {int(empty[0])} is empty"
    bad = _utf8_error(data)
    nul = data.size if data.all() else int(np.argmin(data))  # argmin: the first NUL byte
    at = min(bad if bad is not None else data.size, nul)
    if at == data.size:
        return None
    row = int(np.searchsorted(offsets, at, side="right")) - 1
    return f"path {table[row]!r} holds a NUL or a character UTF-8 cannot encode"


def read_path_table(
    name: str, data: np.ndarray, offsets: np.ndarray, rows: int, keys: tuple[str, str]
) -> PathTable:
    """The table of a store file's path tensors, checked (ValueError naming the file and the tensor).

    ``data`` must be 1-D uint8 strict UTF-8 without NUL bytes; ``offsets`` 1-D int64 of ``rows + 1``
    entries rising strictly (no empty path) from 0 to ``data.size``, each at the start of a
    character; no path may appear twice.
    """
    data_key, offsets_key = keys
    if data.dtype != np.uint8 or data.ndim != 1:
        raise ValueError(f"{name!r}: tensor {data_key!r} must be 1-D uint8, got {data.dtype} {data.shape}")
    if offsets.dtype != np.int64 or offsets.shape != (rows + 1,):
        raise ValueError(
            f"{name!r}: tensor {offsets_key!r} must be int64 of shape ({rows + 1},) for the header's "
            f"{rows} rows, got {offsets.dtype} {offsets.shape}"
        )
    if offsets[0] != 0 or offsets[-1] != data.size:
        raise ValueError(
            f"{name!r}: tensor {offsets_key!r} must run from 0 to the {data.size} bytes of {data_key!r}, "
            f"got {int(offsets[0])} .. {int(offsets[-1])}"
        )
    if rows and not (offsets[1:] > offsets[:-1]).all():
        raise ValueError(f"{name!r}: tensor {offsets_key!r} must rise strictly (no empty path)")
    if data.size and not data.all():
        raise ValueError(f"{name!r}: tensor {data_key!r} holds a NUL byte (paths never do)")
    bad = _utf8_error(data)
    if bad is not None:
        raise ValueError(f"{name!r}: tensor {data_key!r} is not valid UTF-8 (at byte {bad})")
    if rows and ((data[offsets[:-1]] & 0xC0) == 0x80).any():
        raise ValueError(f"{name!r}: tensor {offsets_key!r} splits a UTF-8 character between two paths")
    table = PathTable(data, offsets)
    twice = table.duplicate()
    if twice is not None:
        raise ValueError(f"{name!r}: tensor {data_key!r} lists the path {twice[:200]!r} twice")
    return table
