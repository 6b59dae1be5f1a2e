"""Input checks shared by the indexes: vector batches, row ids and ``k``."""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._validation import check_positive_int

__all__ = ["all_finite", "check_k", "check_rows", "check_vectors", "empty_result"]

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


def check_vectors(name: str, vectors: Any, dim: int | None) -> np.ndarray:
    """Return ``vectors`` as a C-contiguous (n, d) float32 array, checking kind, shape, finiteness and dim."""
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
    result = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(result).all():
        raise ValueError(f"{name} contain NaN or infinite values")
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
