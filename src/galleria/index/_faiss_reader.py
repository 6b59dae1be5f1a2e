"""The byte reader of galleria's FAISS walker (:mod:`galleria.index._faiss_check`): bounded reads of
counts, flags and arrays from untrusted bytes; a read past the end or a non-finite array is refused."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from galleria.index._checks import MAX_MAGNITUDE, all_finite, first_oversized

__all__ = ["Reader", "Refused", "Shape"]


class Refused(ValueError):
    """The stream holds a type outside the allow-list (or is malformed)."""


class Reader:
    """Sequential little-endian reads over a byte buffer; every read is bounds-checked (no copies)."""

    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.size = len(data)
        self.pos = 0
        self.extra = 0  # bytes FAISS would allocate beyond the stream itself

    def remaining(self) -> int:
        return self.size - self.pos

    def take(self, size: int, what: str) -> memoryview:
        if size < 0 or size > self.remaining():
            raise Refused(f"{what} runs past the end of the data ({size} bytes at offset {self.pos})")
        view = self.data[self.pos : self.pos + size]
        self.pos += size
        return view

    def unpack(self, fmt: str, what: str) -> Any:
        layout = struct.Struct("<" + fmt)
        return layout.unpack(self.take(layout.size, what))[0]

    def fourcc(self) -> str:
        raw = bytes(self.take(4, "type code"))
        return raw.decode("latin-1")

    def flag(self, what: str) -> bool:
        value = int(self.unpack("B", what))
        if value not in (0, 1):
            raise Refused(f"{what} must be 0 or 1, got {value}")
        return bool(value)

    def count(self, item_size: int, what: str) -> int:
        """Read a vector length and check that ``length * item_size`` bytes remain."""
        length = int(self.unpack("Q", f"length of {what}"))
        if length * item_size > self.remaining():
            raise Refused(f"{what} declares {length} items, more than the data holds")
        return length

    def array(self, dtype: str, what: str, *, length: int | None = None) -> np.ndarray:
        """A vector of ``dtype`` items (its length read from the stream unless given), not copied."""
        item = np.dtype(dtype).itemsize
        count = self.count(item, what) if length is None else length
        return np.frombuffer(self.take(count * item, what), dtype=dtype)

    def floats(self, what: str, *, length: int | None = None) -> np.ndarray:
        values = self.array("<f4", what, length=length)
        if not all_finite(values):  # in blocks: no temporary the size of the vectors
            raise Refused(f"{what} holds NaN or infinite values")
        position = first_oversized(values)  # centroids of 3e38 would make every distance inf
        if position is not None:
            raise Refused(
                f"{what} entry {position} has magnitude {abs(float(values[position])):.3g}, beyond "
                f"{MAX_MAGNITUDE:.3g}: its distances would overflow float32"
            )
        return values


@dataclass(frozen=True)
class Shape:
    """What a walked index holds: its dimension and its row count."""

    dim: int
    total: int
