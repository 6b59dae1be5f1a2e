"""Input checks shared by the indexes: vector batches, row ids and ``k``."""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._validation import check_positive_int

__all__ = [
    "MAX_MAGNITUDE",
    "all_finite",
    "check_k",
    "check_magnitude",
    "check_rows",
    "check_vectors",
    "empty_result",
    "first_oversized",
]

#: The largest magnitude a vector element may have (2**44, about 1.8e13). With every element within
#: it, a norm of up to 2**20 dimensions stays below 2**54, so squared norms, inner products and
#: squared distances (below 2**110) never overflow float32 (about 2**128): no inf or NaN distance.
MAX_MAGNITUDE = float(2**44)

#: Elements checked at a time by :func:`all_finite` (its temporary: 256 KiB, small beside what loading holds).
_FINITE_BLOCK = 1 << 18


def all_finite(array: np.ndarray) -> bool:
    """Whether every element of a float ``array`` is finite, checked in blocks (no full-size temporary).

    Examples
    --------
    >>> all_finite(np.ones((3, 2), np.float32)), all_finite(np.array([1.0, np.nan]))
    (True, False)
    """
    flat = array.reshape(-1)
    return all(
        bool(np.isfinite(flat[start : start + _FINITE_BLOCK]).all())
        for start in range(0, flat.size, _FINITE_BLOCK)
    )


def first_oversized(array: np.ndarray) -> int | None:
    """The flat position of the first element of ``array`` beyond :data:`MAX_MAGNITUDE` (NaN and
    infinities included), checked in blocks; None when there is none.

    Examples
    --------
    >>> first_oversized(np.array([[1.0, 2.0], [3e38, 0.0]], np.float32)), first_oversized(np.ones(3))
    (2, None)
    """
    flat = array.reshape(-1)
    for start in range(0, flat.size, _FINITE_BLOCK):
        block = flat[start : start + _FINITE_BLOCK]
        bad = np.flatnonzero(~(np.abs(block) <= MAX_MAGNITUDE))
        if bad.size:
            return start + int(bad[0])
    return None


def check_magnitude(name: str, array: np.ndarray) -> None:
    """Refuse (ValueError naming ``name`` and the row) a 2-D array with an element beyond
    :data:`MAX_MAGNITUDE`: its distances would overflow float32 (inf, NaN). A 1-D array names the entry."""
    position = first_oversized(array)
    if position is None:
        return
    value = float(array.reshape(-1)[position])
    where = f"row {position // array.shape[1]}" if array.ndim == 2 and array.shape[1] else f"entry {position}"
    problem = "is not finite" if not np.isfinite(value) else f"has magnitude {abs(value):.3g}"
    raise ValueError(
        f"{name} {where} holds a value that {problem}, beyond {MAX_MAGNITUDE:.3g}: its distances "
        "would overflow float32"
    )


def check_vectors(name: str, vectors: Any, dim: int | None, space: str | None = None) -> np.ndarray:
    """Return ``vectors`` as a C-contiguous (n, d) float32 array, checking kind, shape, finiteness and dim.

    In the ``ip`` and ``l2`` spaces (which use the vectors as they are), an element beyond
    :data:`MAX_MAGNITUDE` is refused too (:func:`check_magnitude`, naming the row): its distances
    would overflow float32. Cosine vectors are normalised first, so any finite size is fine there.
    """
    bounded = space in ("ip", "l2")
    array = vectors if isinstance(vectors, np.ndarray) else np.asarray(vectors)
    if array.dtype != np.float32 and (
        array.dtype == np.bool_
        or not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer))
    ):
        raise TypeError(f"{name} must be a real-valued numeric array, got dtype {array.dtype}")
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (n, dim) array, got shape {array.shape}")
    if array.shape[1] == 0:
        raise ValueError(f"{name} must have at least one column, got shape {array.shape}")
    if dim is not None and array.shape[1] != dim:
        raise ValueError(f"{name} have dimension {array.shape[1]}, but the index holds dimension {dim}")
    if bounded and array.dtype != np.float32 and np.issubdtype(array.dtype, np.floating):
        if not np.isfinite(array).all():
            raise ValueError(f"{name} contain NaN or infinite values")
        check_magnitude(name, array)  # before float32 turns a huge value into inf
    result = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(result).all():
        raise ValueError(f"{name} contain NaN or infinite values")
    if bounded:
        check_magnitude(name, result)
    return result


def check_k(k: Any) -> int:
    """Return ``k`` as an int ≥ 1."""
    return check_positive_int("k", k)


def check_rows(rows: Any, size: int) -> np.ndarray:
    """Return row ids as a 1-D int64 array, each in ``[0, size)``; duplicates are kept."""
    array = rows if isinstance(rows, np.ndarray) else np.asarray(rows)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"rows must be integer row ids, got dtype {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"rows must be a 1-D array of row ids, got shape {array.shape}")
    result = array.astype(np.int64, copy=False)
    bad = (result < 0) | (result >= size)
    if bad.any():
        raise ValueError(f"rows must lie in [0, {size}), got {result[bad][:5].tolist()}")
    return result


def empty_result(num_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(ids, scores)`` pair of a search that finds nothing: both of shape (num_queries, 0)."""
    return np.zeros((num_queries, 0), dtype=np.int64), np.zeros((num_queries, 0), dtype=np.float32)
