"""Small numeric helpers and argument checks shared by the k-reciprocal re-ranking modules.

Everything here works on numpy arrays and knows nothing of stores or files.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._validation import check_choice, check_fraction, check_positive_int

__all__ = [
    "MODES",
    "as_float_matrix",
    "check_hyperparameters",
    "check_mode",
    "effective_ks",
    "half_of",
    "ordered_sum",
    "stable_smallest",
]

#: The two flavours of full probe×gallery re-ranking.
MODES: tuple[str, ...] = ("paper", "reference")


def check_hyperparameters(k1: Any, k2: Any, lambda_value: Any) -> tuple[int, int, float]:
    """Validate ``k1``, ``k2`` (positive ints, ``k2 <= k1``) and ``lambda_value`` (in [0, 1]).

    Raises
    ------
    TypeError
        ``k1`` / ``k2`` not integers (bools rejected), ``lambda_value`` not a real number.
    ValueError
        ``k1`` / ``k2`` below 1, ``k2 > k1``, ``lambda_value`` outside [0, 1] or not finite.
    """
    first = check_positive_int("k1", k1)
    second = check_positive_int("k2", k2)
    if second > first:
        raise ValueError(f"k2 must not exceed k1, got k2={k2!r} > k1={k1!r}")
    weight = check_fraction("lambda_value", lambda_value)
    return first, second, weight


def check_mode(mode: Any) -> str:
    """Validate the full re-ranking ``mode``: ``"paper"`` or ``"reference"``."""
    return check_choice("mode", mode, MODES)


def as_float_matrix(name: str, value: Any, *, square: bool = False) -> np.ndarray:
    """Return ``value`` as a finite, numeric 2-D array (not copied), else raise naming ``name``.

    Raises
    ------
    TypeError
        ``value`` is not a numeric array (bools included).
    ValueError
        It is not 2-D, is empty, is not square where ``square`` is asked, or holds NaN/inf.
    """
    array = np.asarray(value)
    if array.dtype == np.bool_ or not (
        np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    ):
        raise TypeError(f"{name} must be a numeric array, got dtype {array.dtype}")
    if array.ndim != 2 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array, got shape {array.shape}")
    if square and array.shape[0] != array.shape[1]:
        raise ValueError(f"{name} must be square, got shape {array.shape}")
    step = max(1, (1 << 22) // max(1, array.shape[1]))
    for start in range(0, array.shape[0], step):  # row blocks: no full-size temporary
        if not np.all(np.isfinite(array[start : start + step])):
            raise ValueError(f"{name} must hold only finite values (found NaN or inf)")
    return array


def ordered_sum(values: np.ndarray) -> np.ndarray:
    """Sum along the last axis strictly left to right.

    Unlike ``ndarray.sum`` (pairwise summation, whose grouping depends on the row length), the
    result does not change when zeros are appended, so padded pools sum exactly as unpadded ones.
    (Equal, bit for bit, to ``np.cumsum(values, axis=-1)[..., -1]``, and faster.)

    Examples
    --------
    >>> ordered_sum(np.array([[0.1, 0.2, 0.3], [1.0, 0.0, 0.0]])).tolist()
    [0.6000000000000001, 1.0]
    """
    # Reducing the first axis of a contiguous array adds whole slices one after another.
    result: np.ndarray = np.ascontiguousarray(np.moveaxis(values, -1, 0)).sum(axis=0)
    return result


def half_of(k: int) -> int:
    """Half of ``k`` for the expansion of Eq. 4: ``round(k / 2)``, ties to even (numpy ``around``)."""
    return int(np.around(k / 2))


def effective_ks(k1: int, k2: int, candidates: int) -> tuple[int, int, int]:
    """Return ``(k1, k2, half)`` as used on a pool of ``candidates`` items besides the probe.

    ``k1`` is capped at the number of candidates, ``k2`` at the capped ``k1``; ``half`` is
    :func:`half_of` the capped ``k1``.

    Examples
    --------
    >>> effective_ks(20, 6, 100)
    (20, 6, 10)
    >>> effective_ks(20, 6, 3)
    (3, 3, 2)
    """
    first = min(k1, candidates)
    second = min(k2, first)
    return first, second, half_of(first)


def stable_smallest(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` smallest entries along the last axis, as a stable sort orders them.

    Equal to ``np.argsort(values, axis=-1, kind="stable")[..., :k]`` (ties go to the lower index),
    computed faster. Short rows use numpy's vectorised (unstable) sort and redo, stably, only the
    rows with a tie among their first ``k + 1`` entries. Long rows are first cut down: the k-th
    smallest of every ``_STRIDE``-th entry bounds the row's k-th smallest from above, so the entries
    at or below it (kept in index order) hold the answer. ``values`` must hold no NaN.

    Examples
    --------
    >>> stable_smallest(np.array([[0.5, 0.1, 0.1, 0.0, 0.7, 0.9, 0.8, 0.6, 0.4]]), 3).tolist()
    [[3, 1, 2]]
    """
    size = values.shape[-1]
    lead = values.shape[:-1]
    flat = values.reshape(-1, size)
    if size <= _SHORT_ROW or k >= size or size // _STRIDE < 4 * k:
        return _smallest_short(flat, k).reshape((*lead, k))
    sample = flat[:, ::_STRIDE]
    bound = np.partition(sample, k - 1, axis=-1)[:, k - 1 : k]
    mask = flat <= bound
    found = np.flatnonzero(mask)
    rows = found // size
    columns = found - rows * size
    counts = np.count_nonzero(mask, axis=1)
    starts = np.cumsum(counts) - counts
    slots = np.arange(found.size) - starts[rows]
    kept = np.full((flat.shape[0], int(counts.max())), np.inf, dtype=flat.dtype)
    kept[rows, slots] = flat.ravel()[found]
    where = np.zeros(kept.shape, dtype=np.int64)
    where[rows, slots] = columns
    local = _smallest_short(kept, k)
    return np.take_along_axis(where, local, axis=-1).reshape((*lead, k))


def _smallest_short(flat: np.ndarray, k: int) -> np.ndarray:
    """:func:`stable_smallest` on a 2-D array by sorting whole rows."""
    span = min(k + 1, flat.shape[1])
    columns = np.argsort(flat, axis=-1)[:, :span]
    ordered = np.take_along_axis(flat, columns, axis=-1)
    tied = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=-1))
    if tied.size:
        columns[tied] = np.argsort(flat[tied], axis=-1, kind="stable")[:, :span]
    return np.ascontiguousarray(columns[:, :k])


#: Rows up to this length are sorted whole (numpy's vectorised sort is fast there).
_SHORT_ROW = 1024
#: Sampling stride used to bound the k-th smallest entry of a long row.
_STRIDE = 32
