"""Exact nearest-neighbour search with numpy/BLAS: the oracle every other index is measured against."""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._declare import Component
from galleria._validation import check_choice
from galleria.distances import prepare_vectors
from galleria.index import _serial
from galleria.index._checks import (
    all_finite,
    check_k,
    check_magnitude,
    check_rows,
    check_vectors,
    empty_result,
)
from galleria.index.base import SPACES

__all__ = ["ExactIndex", "appended", "exact_search", "rescore_candidates", "top_k_smallest"]

#: Size (in float32 entries) of the query-block × gallery distance matrix computed at once.
BLOCK_ENTRIES = 1 << 23


def top_k_smallest(distances: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``k`` smallest entries of every row, ordered by (distance, column).

    Ties are broken by the lower column, also across the selection boundary, so the result is the
    same as a stable sort of each row followed by taking its first ``k`` entries — computed with a
    partial sort (``argpartition``) in O(n) per row instead of O(n log n).

    Parameters
    ----------
    distances : numpy.ndarray
        A (q, n) array of finite values.
    k : int
        How many entries to keep, ``1 <= k``; values above ``n`` keep the whole row.

    Returns
    -------
    (ids, values) : tuple of numpy.ndarray
        int64 column ids and the matching values, both of shape (q, min(k, n)).

    Examples
    --------
    >>> import numpy as np
    >>> ids, values = top_k_smallest(np.array([[0.5, 0.1, 0.5, 0.1]]), 3)
    >>> ids.tolist(), values.tolist()
    ([[1, 3, 0]], [[0.1, 0.1, 0.5]])
    """
    num_columns = distances.shape[1]
    k = min(k, num_columns)
    if k >= num_columns:
        order = np.argsort(distances, axis=1, kind="stable")
        return order.astype(np.int64, copy=False), np.take_along_axis(distances, order, axis=1)
    chosen = np.argpartition(distances, k - 1, axis=1)[:, :k]
    values = np.take_along_axis(distances, chosen, axis=1)
    threshold = values.max(axis=1)
    at_or_below = np.count_nonzero(distances <= threshold[:, None], axis=1)
    # Rows where entries equal to the k-th value lie on both sides of the boundary: keep the lowest columns.
    for row in np.flatnonzero(at_or_below > k):
        line = distances[row]
        below = np.flatnonzero(line < threshold[row])
        tied = np.flatnonzero(line == threshold[row])[: k - below.size]
        chosen[row] = np.concatenate([below, tied])
        values[row] = line[chosen[row]]
    order = np.lexsort((chosen, values), axis=1)
    ids = np.take_along_axis(chosen, order, axis=1).astype(np.int64, copy=False)
    return ids, np.take_along_axis(values, order, axis=1)


def exact_search(
    gallery: np.ndarray,
    queries: np.ndarray,
    k: int,
    space: str,
    gallery_sq_norms: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return the exact ``k`` nearest gallery rows of every query, as (int64 ids, float32 distances).

    ``gallery`` and ``queries`` are taken as stored (already normalised for cosine). Distances follow
    :func:`galleria.distances.pairwise_distances` operation by operation; the (q, n) matrix is
    computed a block of queries at a time, and each block is reduced with :func:`top_k_smallest`.
    ``gallery_sq_norms`` (squared row norms, l2 only) may be passed to avoid recomputing them.
    """
    num_queries, size = queries.shape[0], gallery.shape[0]
    k = min(k, size)
    ids = np.empty((num_queries, k), dtype=np.int64)
    scores = np.empty((num_queries, k), dtype=np.float32)
    if space == "l2" and gallery_sq_norms is None:
        gallery_sq_norms = np.einsum("ij,ij->i", gallery, gallery)
    step = max(1, BLOCK_ENTRIES // max(size, 1))
    for start in range(0, num_queries, step):
        block = queries[start : start + step]
        gram = block @ gallery.T
        if space == "l2":
            assert gallery_sq_norms is not None
            distances = np.add.outer(np.einsum("ij,ij->i", block, block), gallery_sq_norms)
            gram *= 2.0
            distances -= gram
            np.maximum(distances, 0.0, out=distances)
        else:
            distances = np.subtract(1.0, gram, out=gram)
            if space == "cosine":  # 1 - cos of twins can round below 0
                np.maximum(distances, 0.0, out=distances)
        block_ids, block_scores = top_k_smallest(distances, k)
        ids[start : start + step] = block_ids
        scores[start : start + step] = block_scores
    return ids, scores


def rescore_candidates(
    vectors: np.ndarray, space: str, queries: np.ndarray, candidates: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Re-score each query's candidate rows (ids into ``vectors``, any float dtype, as stored) with
    exact distances in ``space``; keep the best ``k`` of each, ties to the lower row."""
    count, width = candidates.shape
    ids = np.empty((count, k), dtype=np.int64)
    scores = np.empty((count, k), dtype=np.float32)
    step = max(1, (1 << 22) // max(1, width * queries.shape[1]))
    for start in range(0, count, step):
        rows = candidates[start : start + step]
        block = np.asarray(vectors[rows], dtype=np.float32)  # (b, width, dim)
        query = queries[start : start + step]
        if space == "l2":
            difference = block - query[:, None, :]
            distances = np.einsum("bwd,bwd->bw", difference, difference)
        else:
            distances = 1.0 - np.einsum("bwd,bd->bw", block, query)
        # Order by (distance, row): sort the candidates by row first, then take the k smallest stably.
        by_row = np.argsort(rows, axis=1, kind="stable")
        rows = np.take_along_axis(rows, by_row, axis=1)
        distances = np.take_along_axis(distances, by_row, axis=1).astype(np.float32, copy=False)
        chosen, values = top_k_smallest(distances, k)
        ids[start : start + step] = np.take_along_axis(rows, chosen, axis=1)
        scores[start : start + step] = values
    return ids, scores


class ExactIndex:
    """Exact search over vectors held in memory: brute force on BLAS, deterministic tie-break.

    Every search computes the distance of each query to every row (a matrix product per block of
    queries) and keeps the ``k`` smallest with a partial sort. Ties in distance are broken by the
    lower row, so results are fully deterministic; this is the oracle approximate indexes are
    measured against.

    Parameters
    ----------
    space : {"cosine", "ip", "l2"}
        Distance space; see :mod:`galleria.index.base` for the scores each gives.

    Examples
    --------
    >>> import numpy as np
    >>> index = ExactIndex("l2")
    >>> index.add(np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]]))
    >>> ids, scores = index.search(np.array([[0.9, 0.0]]), k=2)
    >>> ids.tolist(), [round(float(s), 2) for s in scores[0]]
    ([[1, 0]], [0.01, 0.81])
    """

    name = "exact"
    #: Scores are distances: lower is better.
    higher_is_better = False

    def __init__(self, space: str = "cosine") -> None:
        self._space = check_choice("space", space, SPACES)
        self._dim: int | None = None
        self._buffer = np.zeros((0, 0), dtype=np.float32)
        self._size = 0
        self._sq_norms: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"ExactIndex(space={self._space!r}, rows={self._size}, dim={self._dim})"

    @property
    def space(self) -> str:
        """The distance space: ``"cosine"``, ``"ip"`` or ``"l2"``."""
        return self._space

    @property
    def dim(self) -> int | None:
        """Vector dimension, or None before the first vectors are added."""
        return self._dim

    @property
    def can_reconstruct(self) -> bool:
        """Always True: the vectors are held in memory."""
        return True

    @property
    def vectors(self) -> np.ndarray:
        """A read-only view of the stored (len, dim) float32 vectors (normalised for cosine)."""
        view = self._buffer[: self._size]
        view.flags.writeable = False
        return view

    def __len__(self) -> int:
        return self._size

    def params(self) -> dict[str, Any]:
        """The construction parameters: none."""
        return {}

    def add(self, vectors: np.ndarray) -> None:
        """Append an (n, dim) batch of finite vectors as rows ``len(self) .. len(self) + n - 1``."""
        array = prepare_vectors(check_vectors("vectors", vectors, self._dim, self.space), self._space)
        if self._dim is None:
            self._dim = array.shape[1]
            self._buffer = np.zeros((0, self._dim), dtype=np.float32)
        needed = self._size + array.shape[0]
        if needed > self._buffer.shape[0]:
            grown = np.empty((max(needed, 2 * self._buffer.shape[0], 16), self._dim), dtype=np.float32)
            grown[: self._size] = self._buffer[: self._size]
            self._buffer = grown
        self._buffer[self._size : needed] = array
        self._size = needed
        self._sq_norms = None

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return the exact ``k`` nearest rows of each query: (q, min(k, len)) ids and distances."""
        k = check_k(k)
        array = check_vectors("queries", queries, self._dim, self.space)
        if self._size == 0:
            return empty_result(array.shape[0])
        array = prepare_vectors(array, self._space)
        gallery = self._buffer[: self._size]
        if self._space == "l2" and self._sq_norms is None:
            self._sq_norms = np.einsum("ij,ij->i", gallery, gallery)
        return exact_search(gallery, array, k, self._space, self._sq_norms)

    def reconstruct(self, rows: np.ndarray) -> np.ndarray:
        """Return a copy of the stored vectors of the given rows, shape (len(rows), dim)."""
        ids = check_rows(rows, self._size)  # integer indexing below copies
        if self._dim is None:
            return np.zeros((ids.size, 0), np.float32)
        return np.take(self._buffer, ids, axis=0)  # a copy; faster than fancy indexing

    def snapshot(self) -> np.ndarray:
        """A read-only view of every stored vector, without a copy. Rows below the current size are
        never written in place (``add`` appends past them or grows into a new buffer, ``remove``
        builds a new one), so the view keeps the vectors of this moment however the index changes."""
        if self._dim is None:
            return np.zeros((0, 0), np.float32)
        view = self._buffer[: self._size]
        view.flags.writeable = False
        return view

    def remove(self, rows: np.ndarray) -> None:
        """Delete the given rows (duplicates count once); the rest are renumbered compactly, order kept."""
        ids = check_rows(rows, self._size)
        if ids.size == 0:
            return
        keep = np.ones(self._size, dtype=bool)
        keep[ids] = False
        self._buffer = np.ascontiguousarray(self._buffer[: self._size][keep])
        self._size = self._buffer.shape[0]
        self._sq_norms = None

    def packed(self) -> _serial.Packed:
        """What :meth:`to_bytes` returns, as parts written without joining them (the vectors in place)."""
        vectors = self._buffer[: self._size] if self._dim is not None else np.zeros((0, 0), np.float32)
        return _serial.pack_parts("exact", {"space": self._space, "dim": self._dim}, {"vectors": vectors})

    def to_bytes(self) -> bytes:
        """Serialise the index: a JSON header and the raw float32 vectors (no pickle)."""
        return self.packed().to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes | _serial.Unpacked) -> ExactIndex:
        """Rebuild an index written by :meth:`to_bytes`; raise ValueError on corrupt data."""
        meta, arrays = _serial.unpack(data, "exact")
        space, dim = meta.get("space"), meta.get("dim")
        if space not in SPACES:
            raise ValueError(f"serialised exact index has an invalid space {space!r}")
        vectors = arrays.get("vectors")
        if vectors is None or vectors.dtype != np.float32 or vectors.ndim != 2:
            raise ValueError("serialised exact index lacks a 2-D float32 'vectors' array")
        if dim is None:
            if vectors.shape != (0, 0):
                raise ValueError("serialised exact index holds vectors but no dimension")
        elif not isinstance(dim, int) or dim < 1 or vectors.shape[1] != dim:
            raise ValueError(f"serialised exact index: dimension {dim!r}, vectors of shape {vectors.shape}")
        if not all_finite(vectors):
            raise ValueError("serialised exact index holds non-finite vectors")
        check_magnitude("serialised exact index: vectors", vectors)
        index = cls(space)
        if dim is not None:
            index._dim = dim
            index._buffer = np.ascontiguousarray(vectors)
            index._size = vectors.shape[0]
        return index


#: The declaration of the exact index (:mod:`galleria._declare`): the registry finds it here.
COMPONENT = Component(
    kind="index",
    name="exact",
    summary="brute-force search, exact (numpy); the default",
    params=(),
    build=ExactIndex,
    order=0,
    extra={"creatable": True, "from_bytes": ExactIndex.from_bytes},
)


def appended(buffer: np.ndarray, size: int, rows: np.ndarray) -> np.ndarray:
    """``rows`` written after the first ``size`` rows of ``buffer``: in place when it has room, else
    into a new buffer grown geometrically (twice the old, at least 16 rows; dtype kept)."""
    if buffer.ndim != 2 or buffer.shape[1] != rows.shape[1]:
        buffer = np.zeros((0, rows.shape[1]), dtype=buffer.dtype)
    needed = size + rows.shape[0]
    if needed > buffer.shape[0]:
        grown = np.empty((max(needed, 2 * buffer.shape[0], 16), rows.shape[1]), dtype=buffer.dtype)
        grown[:size] = buffer[:size]
        buffer = grown
    buffer[size:needed] = rows
    return buffer
