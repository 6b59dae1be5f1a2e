"""The one input checker shared by every metric.

Each function takes the argument's name (for the message) and the raw value, and returns it in the
form the numeric kernels trust. TypeError means the wrong *kind* of value (a float or bool where an
int belongs, a non-numeric matrix); ValueError means the right kind with a wrong value (wrong shape,
empty, out of range, NaN). Python and numpy integers are ints; bools are not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from galleria._validation import check_positive_int, is_int

__all__ = [
    "Positives",
    "as_array",
    "as_bool_matrix",
    "as_embeddings",
    "as_index_vector",
    "as_ks",
    "as_label_vector",
    "as_positives",
    "as_rank_vector",
    "as_relevant_counts",
    "as_score_matrix",
    "as_top_k",
    "check_finite",
    "check_no_nan",
]

#: dtype kinds accepted as scores: signed int, unsigned int, float.
_NUMERIC_KINDS = "iuf"


def as_array(name: str, value: Any) -> np.ndarray:
    """``np.asarray(value)``, turning numpy's complaints into errors that name the argument."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be array-like, got {type(value).__name__} {value!r:.60}")
    try:
        return np.asarray(value)
    except ValueError as error:  # ragged nested lists
        raise ValueError(
            f"{name} must be a rectangular array, got a ragged nested sequence ({error})"
        ) from None
    except (TypeError, RuntimeError) as error:  # e.g. a tensor that requires grad
        raise TypeError(f"{name} cannot be read as an array: {error}") from None


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def as_score_matrix(name: str, value: Any) -> np.ndarray:
    """A non-empty 2-D array of real numbers (int or float dtype), without copying when possible.

    NaN is *not* checked here (that needs a pass over the data); the chunked kernels call
    :func:`check_no_nan` on every block so extra memory stays bounded.
    """
    array = as_array(name, value)
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise TypeError(f"{name} must hold real numbers (int or float), got dtype {array.dtype}")
    if array.ndim != 2:
        raise ValueError(f"{name} must be 2-D (queries × gallery), got shape {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{name} must not be empty, got shape {array.shape}")
    return array


def check_no_nan(name: str, block: np.ndarray, row_offset: int = 0) -> None:
    """Raise ValueError if the 2-D ``block`` holds a NaN (its position named as in the full matrix)."""
    if block.dtype.kind != "f" or not np.isnan(block.max()):
        return
    row, column = np.argwhere(np.isnan(block))[0]
    raise ValueError(f"{name} contains NaN (first at row {row + row_offset}, column {column})")


def check_finite(name: str, block: np.ndarray, row_offset: int = 0, rows: Any = None) -> None:
    """Raise ValueError if the 2-D ``block`` holds NaN or ±inf (its position named as in the full matrix).

    ``rows`` (optional) maps the block's rows to the full matrix's rows (a streamed block of probes).
    """
    if block.dtype.kind != "f" or np.isfinite(block).all():
        return
    row, column = np.argwhere(~np.isfinite(block))[0]
    where = int(rows[row]) if rows is not None else int(row) + row_offset
    raise ValueError(f"{name} must be finite, got {block[row, column]} at row {where}, column {column}")


def as_label_vector(name: str, value: Any, *, length: int | None = None, strings: bool = False) -> np.ndarray:
    """A non-empty 1-D array of integer labels (or strings when ``strings``), one per item.

    TypeError for floats, bools or objects (a label must be an integer id); ValueError for a
    wrong shape, an empty array or a length other than ``length``.
    """
    if not strings:
        _check_int_items(name, value, "label")
    array = as_array(name, value)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one label per item), got shape {array.shape}")
    if len(array) == 0:
        raise ValueError(f"{name} must not be empty")
    if length is not None and len(array) != length:
        raise ValueError(f"{name} must have {length} entries, got {len(array)}")
    if array.dtype.kind == "O" and not strings:
        _check_int_items(name, list(array), "label")
        array = array.astype(np.int64)
    kinds = "iuUS" if strings else "iu"
    if array.dtype.kind not in kinds:
        what = "integer or string labels" if strings else "integer ids"
        raise TypeError(f"{name} must hold {what}, got dtype {array.dtype}")
    return array


def as_embeddings(name: str, value: Any) -> np.ndarray:
    """A non-empty 2-D array of finite real numbers, one embedding per row."""
    array = as_score_matrix(name, value)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        row, column = np.argwhere(~np.isfinite(array))[0]
        raise ValueError(f"{name} must be finite, got {array[row, column]} at row {row}, column {column}")
    return array


def _check_int_items(name: str, value: Any, what: str) -> None:
    """If ``value`` is a list or tuple, raise TypeError naming its first item that is not an int."""
    if isinstance(value, (list, tuple)):
        for position, item in enumerate(value):
            if not is_int(item):
                raise TypeError(f"{name}[{position}] must be an integer {what}, got {_describe(item)}")


def as_index_vector(name: str, value: Any, length: int, bound: int) -> npt.NDArray[np.int64]:
    """``length`` integer indices, each in ``[0, bound)``, as an int64 array."""
    _check_int_items(name, value, "index")
    array = as_array(name, value)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D with one index per query, got shape {array.shape}")
    if len(array) != length:
        raise ValueError(f"{name} must have {length} entries (one per query), got {len(array)}")
    if array.dtype.kind == "O":
        _check_int_items(name, list(array), "index")
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer indices, got dtype {array.dtype}")
    bad = np.flatnonzero((array < 0) | (array >= bound))
    if len(bad):
        position = int(bad[0])
        raise ValueError(f"{name}[{position}] = {array[position]} is out of range [0, {bound})")
    return array.astype(np.int64, copy=False)


def as_ks(name: str, value: Any) -> list[int]:
    """A non-empty sequence of positive integers, order and duplicates kept."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a sequence of positive integers, got {_describe(value)}")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {value.shape}")
    items = list(value)
    if not items:
        raise ValueError(f"{name} must not be empty")
    return [check_positive_int(f"{name}[{position}]", item) for position, item in enumerate(items)]


def as_top_k(value: Any) -> int:
    """``top_k``: 0 (keep no list of top results) or a positive int."""
    if is_int(value) and value == 0:
        return 0
    return check_positive_int("top_k", value)


def as_rank_vector(name: str, value: Any) -> npt.NDArray[np.int64]:
    """A non-empty 1-D array of 0-indexed ranks (non-negative integers) as int64."""
    _check_int_items(name, value, "rank")
    array = as_array(name, value)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one rank per query), got shape {array.shape}")
    if len(array) == 0:
        raise ValueError(f"{name} must not be empty")
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer ranks, got dtype {array.dtype}")
    bad = np.flatnonzero(array < 0)
    if len(bad):
        raise ValueError(f"{name}[{bad[0]}] = {array[bad[0]]} is negative; ranks are 0-indexed, ≥ 0")
    return array.astype(np.int64, copy=False)


def as_bool_matrix(name: str, value: Any) -> npt.NDArray[np.bool_]:
    """A 2-D boolean array with at least one row (``hits``: queries × ranked positions)."""
    array = as_array(name, value)
    if array.dtype != np.bool_:
        raise TypeError(f"{name} must be a boolean array, got dtype {array.dtype}")
    if array.ndim != 2:
        raise ValueError(f"{name} must be 2-D (queries × ranked positions), got shape {array.shape}")
    if array.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one query, got shape {array.shape}")
    return array


def as_relevant_counts(name: str, value: Any, hits: np.ndarray) -> npt.NDArray[np.int64]:
    """Per-query counts of relevant gallery items: ≥ 1 and ≥ the hits found in ``hits``."""
    counts = as_rank_vector(name, value)
    if len(counts) != len(hits):
        raise ValueError(f"{name} must have {len(hits)} entries (one per query), got {len(counts)}")
    empty = np.flatnonzero(counts == 0)
    if len(empty):
        raise ValueError(f"{name}[{empty[0]}] = 0: query {empty[0]} has no relevant gallery item")
    found = hits.sum(axis=1)
    too_few = np.flatnonzero(found > counts)
    if len(too_few):
        query = int(too_few[0])
        raise ValueError(
            f"{name}[{query}] = {counts[query]} but hits[{query}] holds {found[query]} relevant results"
        )
    return counts


@dataclass(frozen=True)
class Positives:
    """Validated positives of every query, in one of three forms.

    ``single``: one gallery index per query, shape (n,). ``indptr``/``indices``: CSR lists of gallery
    indices (query ``i`` owns ``indices[indptr[i]:indptr[i + 1]]``, never empty). ``mask``: an (n, m)
    boolean matrix with at least one True per row. Exactly one form is set.
    """

    n: int
    m: int
    single: npt.NDArray[np.int64] | None = None
    indptr: npt.NDArray[np.int64] | None = None
    indices: npt.NDArray[np.int64] | None = None
    mask: npt.NDArray[np.bool_] | None = None

    @classmethod
    def from_sets(cls, n: int, m: int, sets: list[npt.NDArray[np.int64]]) -> Positives:
        """CSR positives from one non-empty index array per query (trusted)."""
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(s) for s in sets], out=indptr[1:])
        indices = np.concatenate(sets).astype(np.int64, copy=False)
        return cls(n, m, indptr=indptr, indices=indices)


def _index_set(name: str, item: Any, m: int) -> npt.NDArray[np.int64]:
    """One query's collection of gallery indices (checked, may be empty)."""
    if isinstance(item, np.ndarray):
        if item.ndim != 1:
            raise ValueError(f"{name} must be a 1-D collection of indices, got shape {item.shape}")
        if item.dtype.kind not in "iu" and len(item):
            raise TypeError(f"{name} must hold integer indices, got dtype {item.dtype}")
        array = item.astype(np.int64)
    else:
        values = list(item)
        _check_int_items(name, values, "index")
        array = np.array(values, dtype=np.int64)
    bad = np.flatnonzero((array < 0) | (array >= m))
    if len(bad):
        raise ValueError(f"{name} holds index {array[bad[0]]}, out of range [0, {m})")
    return array


def _check_mask(name: str, mask: npt.NDArray[np.bool_], n: int, m: int) -> Positives:
    if mask.shape != (n, m):
        raise ValueError(f"{name} as a boolean mask must have shape {(n, m)}, got {mask.shape}")
    empty = np.flatnonzero(~mask.any(axis=1))
    if len(empty):
        raise ValueError(f"{name}[{empty[0]}] has no positive: query {empty[0]} needs at least one")
    return Positives(n, m, mask=mask)


def as_positives(name: str, value: Any, n: int, m: int) -> Positives:
    """Positives for ``n`` queries over a gallery of ``m`` items, in any accepted form.

    Accepted: one int per query (a sequence or a 1-D integer array); one collection of ints per
    query (a sequence of lists/tuples/sets/arrays, or an (n, p) integer array); an (n, m) boolean
    mask (an array or nested lists of bools). Every query needs at least one positive.
    """
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be indices or a boolean mask, got {_describe(value)}")
    if not isinstance(value, (list, tuple)):
        array = as_array(name, value)
        if array.dtype == np.bool_:
            if array.ndim != 2:
                raise TypeError(f"{name} holds booleans, which are not indices; a mask must be 2-D (n, m)")
            return _check_mask(name, array, n, m)
        if array.ndim == 1:
            return Positives(n, m, single=as_index_vector(name, array, n, m))
        if array.ndim == 2 and array.dtype.kind in "iu":
            if len(array) != n:
                raise ValueError(f"{name} must have {n} rows (one per query), got {len(array)}")
            if array.shape[1] == 0:
                raise ValueError(f"{name} has no positive for query 0: every query needs at least one")
            flat = as_index_vector(name, array.ravel(), array.size, m).reshape(array.shape)
            return Positives.from_sets(n, m, list(flat))
        if array.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integer indices or booleans, got dtype {array.dtype}")
        raise ValueError(f"{name} must be 1-D or 2-D, got shape {array.shape}")
    if len(value) != n:
        raise ValueError(f"{name} must have {n} entries (one per query), got {len(value)}")
    if value and all(isinstance(item, (list, tuple, np.ndarray)) for item in value):
        first = value[0]
        if len(first) and all(isinstance(x, (bool, np.bool_)) for x in first):
            return _check_mask(name, as_bool_matrix(name, value), n, m)
    if all(is_int(item) for item in value):
        return Positives(n, m, single=as_index_vector(name, list(value), n, m))
    sets: list[npt.NDArray[np.int64]] = []
    for query, item in enumerate(value):
        if is_int(item):
            sets.append(np.array([item], dtype=np.int64))
            if not 0 <= item < m:
                raise ValueError(f"{name}[{query}] = {item} is out of range [0, {m})")
            continue
        if isinstance(item, (str, bytes, bool, np.bool_)) or not isinstance(item, Iterable):
            raise TypeError(
                f"{name}[{query}] must be an index or a collection of indices, got {_describe(item)}"
            )
        indices = _index_set(f"{name}[{query}]", item, m)
        if len(indices) == 0:
            raise ValueError(f"{name}[{query}] is empty: query {query} needs at least one positive")
        sets.append(indices)
    return Positives.from_sets(n, m, sets)
