"""Helpers shared by the faiss-backed indexes: thread control, live-row masks, (de)serialisation."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

import faiss
import numpy as np

from galleria.index._faiss_check import check_faiss_bytes
from galleria.index._faiss_rules import allocation_budget, precomputed_table_bytes

__all__ = [
    "FaissBlob",
    "FaissPart",
    "LiveRows",
    "deserialize",
    "omp_threads",
    "restore_precomputed_table",
    "serialize",
    "usable_threads",
]


def usable_threads(num_threads: int) -> int:
    """``num_threads`` capped at the CPUs this process may use (a file never chooses more)."""
    try:
        available = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        available = os.cpu_count() or 1
    return max(1, min(num_threads, available))


@contextmanager
def omp_threads(num_threads: int | None) -> Iterator[None]:
    """Run the body with faiss using ``num_threads`` OpenMP threads (None: leave as is), then restore."""
    if num_threads is None:
        yield
        return
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(usable_threads(num_threads))
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


def serialize(index: Any) -> np.ndarray:
    """A faiss index as a uint8 array (faiss's own binary format, no pickle)."""
    return np.asarray(faiss.serialize_index(index), dtype=np.uint8)


class FaissPart:
    """A faiss index to be written into a container part by part (faiss's binary format, no pickle).

    The bytes are produced twice through a callback writer, never held whole: once on creation to
    learn their length and digest, once by :meth:`write`, which checks that they came out the same.
    """

    def __init__(self, index: Any) -> None:
        self._index = index
        self.nbytes, self._digest = self._produce(None)

    def _produce(self, sink: Callable[[memoryview], None] | None) -> tuple[int, str]:
        hasher = hashlib.sha256()
        written = 0

        def callback(data: bytes) -> None:
            nonlocal written
            hasher.update(data)
            written += len(data)
            if sink is not None:
                sink(memoryview(data))

        writer = faiss.PyCallbackIOWriter(callback)  # type: ignore[attr-defined]  # missing from its stubs
        faiss.write_index(self._index, writer)
        return written, hasher.hexdigest()

    def write(self, sink: Callable[[memoryview], None]) -> None:
        """Pass the serialised bytes to ``sink``; RuntimeError if the index changed since creation."""
        if self._produce(sink) != (self.nbytes, self._digest):
            raise RuntimeError("the faiss index changed while it was being written")


class FaissBlob(Protocol):
    """Serialised faiss bytes that lie elsewhere (a range of a store file), already checksummed."""

    nbytes: int

    def mapped(self) -> AbstractContextManager[memoryview]:
        """The bytes, read-only and checked again against their checksums, for the walker."""
        ...

    def reader(self) -> Any:
        """A faiss ``IOReader`` over the bytes that refuses any byte that fails its checksum."""
        ...


def deserialize(data: np.ndarray | FaissBlob, what: str, *, id_limit: int | None = None) -> Any:
    """Read a faiss index written by :func:`serialize` (or a :class:`FaissPart`): a uint8 array, or a
    :class:`FaissBlob` read straight into faiss's structures; ValueError if faiss cannot parse it.

    The bytes are walked first (:func:`~galleria.index._faiss_check.check_faiss_bytes`, labels in
    ``[0, id_limit)``); an IVF-PQ's precomputed table is not built here (the file would choose its
    size): :func:`restore_precomputed_table` builds it when it is within budget.
    """
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1 or data.size == 0:
            raise ValueError(f"serialised {what} lacks its faiss index bytes")
    elif data.nbytes == 0:
        raise ValueError(f"serialised {what} lacks its faiss index bytes")
    # Walk the bytes against the allow-list first: FAISS itself would follow on-disk inverted lists
    # to other files and size its allocations by the counts it reads. No flag that opens files is passed.
    try:
        flags = faiss.IO_FLAG_SKIP_PRECOMPUTE_TABLE
        if isinstance(data, np.ndarray):
            check_faiss_bytes(data, f"serialised {what}", id_limit=id_limit)
            # read_index already returns the most specific (and owning) wrapper; never downcast it
            # again, as a downcast wrapper does not own the C++ object.
            return faiss.deserialize_index(np.ascontiguousarray(data), flags)
        with data.mapped() as view:
            check_faiss_bytes(view, f"serialised {what}", id_limit=id_limit)
        return faiss.read_index(data.reader(), flags)
    except RuntimeError as error:
        raise ValueError(f"serialised {what} holds a corrupt faiss index: {error}") from error


def restore_precomputed_table(index: Any, file_bytes: int) -> None:
    """Build the precomputed table of the IVF-PQ inside ``index`` (if any) when it fits the budget.

    FAISS sizes the table ``nlist × M × 2**nbits`` floats, which a file chooses; above
    :func:`~galleria.index._faiss_check.allocation_budget` of the file's size it stays off and
    searches compute the same distances per query instead. It also stays off when it would be
    larger than the file itself (an acceleration bigger than the data it speeds up; the build
    makes the same choice, :func:`galleria.index._ivfpq_train.train_ivfpq`).
    """
    try:
        ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    except RuntimeError:
        return
    if not isinstance(ivf, faiss.IndexIVFPQ) or not ivf.by_residual:
        return
    size = precomputed_table_bytes(int(ivf.nlist), int(ivf.pq.M), int(ivf.pq.nbits))
    if size <= allocation_budget(file_bytes) and size <= file_bytes:
        ivf.use_precomputed_table = 0  # let faiss choose the table's kind, as after training
        ivf.precompute_table()


_SELECTOR_LOCK = threading.Lock()


class LiveRows:
    """Maps the live rows (positions ``0 .. n - 1``) of an index to faiss's internal ids.

    faiss indexes such as HNSW cannot delete; removed rows stay inside faiss, masked. ``internal``
    lists, per live position, the faiss id; ``position_of`` is its inverse (-1 for removed ids); the
    bitmap marks live ids for a faiss ``IDSelectorBitmap``. The inverse and the bitmap are only
    made once a row was removed (until then every id is its own position): 8 bytes a row saved
    for an index fresh from a build or a file.
    """

    def __init__(self, internal: np.ndarray, total: int) -> None:
        self.internal = np.ascontiguousarray(internal, dtype=np.int64)
        self.total = total
        self._position_of: np.ndarray | None = None
        self._bitmap: np.ndarray | None = None
        self._selector: Any = None

    @property
    def position_of(self) -> np.ndarray:
        """Per faiss id, its live position (-1 for a removed id)."""
        made = self._position_of
        if made is None:
            made = np.full(self.total, -1, dtype=np.int64)
            made[self.internal] = np.arange(self.internal.size, dtype=np.int64)
            self._position_of = made
        return made

    @classmethod
    def identity(cls, total: int) -> LiveRows:
        """All ``total`` internal ids live, in order."""
        return cls(np.arange(total, dtype=np.int64), total)

    @property
    def removed(self) -> int:
        """Number of masked (removed) internal ids."""
        return self.total - self.internal.size

    def _refresh(self) -> None:
        self._position_of = None
        self._bitmap = None
        self._selector = None

    def selector(self) -> Any:
        """A faiss selector accepting the live internal ids (kept alive with its bitmap)."""
        with _SELECTOR_LOCK:  # searches run side by side: one selector, made once
            if self._selector is None:
                alive = np.zeros(self.total, dtype=bool)
                alive[self.internal] = True
                self._bitmap = np.packbits(alive, bitorder="little")
                self._selector = faiss.IDSelectorBitmap(self._bitmap.size, faiss.swig_ptr(self._bitmap))
            return self._selector

    def append(self, count: int) -> None:
        """Record ``count`` ids appended to faiss (they become the last live positions)."""
        if count == 0:
            return
        new = np.arange(self.total, self.total + count, dtype=np.int64)
        self.internal = np.concatenate([self.internal, new])
        self.total += count
        self._refresh()

    def remove(self, positions: np.ndarray) -> None:
        """Mask the live rows at ``positions``; the rest are renumbered compactly."""
        keep = np.ones(self.internal.size, dtype=bool)
        keep[positions] = False
        self.internal = self.internal[keep]
        self._refresh()

    def to_positions(self, labels: np.ndarray) -> np.ndarray:
        """Map faiss labels to live positions; -1 (no result) and masked ids map to -1."""
        if self.removed == 0:
            return labels
        return np.where(labels >= 0, self.position_of[np.maximum(labels, 0)], -1)
