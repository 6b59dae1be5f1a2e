"""Ranks of the ground truth in a score matrix, without sorting.

Recall@K (``docs/metrics.md``, "the tie rule") sorts each row by descending score, ties by ascending
gallery index, and takes the 0-indexed position of the ground truth. That position equals

    rank = #{j : s[j] > s[gt]} + #{j < gt : s[j] == s[gt]}

which needs one comparison per score and no sort. For ``j < gt`` the test ``s[j] >= s[gt]`` is
written as ``s[j] > pred(s[gt])``, ``pred`` being the next representable value below (``nextafter``
towards −inf for floats, ``x - 1`` for integers), so every score is compared once against a
per-element threshold: ``pred(g)`` before the ground truth and ``g`` from it on. A row whose ``g``
is the smallest value of its dtype (−inf, or the integer minimum) has no predecessor and is
corrected separately. The matrix is processed in row blocks small enough to stay in cache.

With several positives per query, the rank of the query is the rank of its best-ranked positive:
the positive with the highest score, the lowest index among equal scores.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from galleria.metrics._checks import Positives, as_positives, as_score_matrix, check_no_nan

__all__ = ["ranks_of_matrix", "retrieval_ranks"]

#: Bytes of scores per block of the rank kernel (the block, its thresholds and its comparison
#: result together stay within a core's L2 cache).
_KERNEL_BLOCK_BYTES = 512 * 1024
#: Bytes of scores per outer block (a copy of at most this size is made when the input is not
#: C-contiguous; per-row bookkeeping is vectorised over it).
_OUTER_BLOCK_BYTES = 8 * 1024 * 1024


def _minimum_of(dtype: np.dtype[Any]) -> Any:
    """The smallest value of a numeric dtype (−inf for floats)."""
    if dtype.kind == "f":
        return dtype.type(-np.inf)
    return np.iinfo(dtype).min


def _predecessor(values: np.ndarray, is_minimum: npt.NDArray[np.bool_]) -> np.ndarray:
    """The next representable value below each of ``values`` (itself where it is the minimum)."""
    result: np.ndarray
    if values.dtype.kind == "f":
        result = np.nextafter(values, values.dtype.type(-np.inf))
    else:
        one = values.dtype.type(1)
        result = np.where(is_minimum, values, values - np.where(is_minimum, values.dtype.type(0), one))
    return result


def _count_above(
    block: np.ndarray, thresholds: np.ndarray, lengths: npt.NDArray[np.intp], out: npt.NDArray[np.int64]
) -> None:
    """Count, per row of ``block``, the scores above a per-element threshold made of two runs.

    Row ``i`` is compared with ``thresholds[2i]`` over its first ``lengths[2i]`` columns and with
    ``thresholds[2i + 1]`` over the rest (the block stays in cache: one comparison per score).
    """
    rows, m = block.shape
    per_element = np.repeat(thresholds, lengths).reshape(rows, m)
    above = np.greater(block, per_element)
    # Summing the bytes of the boolean result is the fastest row count numpy offers.
    out[:] = above.view(np.uint8).sum(axis=1, dtype=np.uint16 if m < 2**16 else np.int64)


def _best_positive(block: np.ndarray, positives: Positives, start: int, stop: int) -> npt.NDArray[np.int64]:
    """Index of each query's best-ranked positive in a block of rows ``start:stop``."""
    if positives.single is not None:
        return positives.single[start:stop]
    rows, m = block.shape
    if positives.mask is not None:
        mask = positives.mask[start:stop]
        best = np.max(block, axis=1, where=mask, initial=_minimum_of(block.dtype))
        winners = mask & (block == best[:, None])
        chosen: npt.NDArray[np.int64] = winners.argmax(axis=1).astype(np.int64)
        return chosen
    assert positives.indptr is not None and positives.indices is not None
    bounds = positives.indptr[start : stop + 1]
    indices = positives.indices[bounds[0] : bounds[-1]]
    counts = np.diff(bounds)
    owner = np.repeat(np.arange(rows), counts)
    values = block[owner, indices]
    offsets = bounds[:-1] - bounds[0]
    best = np.maximum.reduceat(values, offsets)
    candidates = np.where(values == best[owner], indices, m)
    return np.minimum.reduceat(candidates, offsets).astype(np.int64)


def rank_scores(
    block: np.ndarray, gt: npt.NDArray[np.int64], name: str = "scores", row_offset: int = 0
) -> npt.NDArray[np.int64]:
    """Ranks of ``block[i, gt[i]]`` in each row of a validated 2-D block (the kernel entry point).

    NaN is checked on every cache-sized piece as it is counted (``name`` and ``row_offset`` only
    shape the error message).
    """
    rows, m = block.shape
    g = block[np.arange(rows), gt]
    is_minimum = g == _minimum_of(block.dtype)
    thresholds = np.empty(2 * rows, dtype=block.dtype)
    thresholds[0::2] = _predecessor(g, is_minimum)
    thresholds[1::2] = g
    lengths = np.empty(2 * rows, dtype=np.intp)
    lengths[0::2] = gt
    lengths[1::2] = m - gt
    ranks = np.empty(rows, dtype=np.int64)
    step = max(1, _KERNEL_BLOCK_BYTES // (m * block.dtype.itemsize))
    is_float = block.dtype.kind == "f"
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        piece = np.ascontiguousarray(block[start:stop])
        if is_float and np.isnan(piece.max()):
            check_no_nan(name, piece, row_offset + start)
        _count_above(
            piece, thresholds[2 * start : 2 * stop], lengths[2 * start : 2 * stop], ranks[start:stop]
        )
    for row in np.flatnonzero(is_minimum):
        # No value lies below the dtype's minimum: count the ties before the ground truth directly.
        ranks[row] += np.count_nonzero(block[row, : gt[row]] == g[row])
    return ranks


def ranks_of_block(name: str, block: np.ndarray, positives: Positives, start: int) -> npt.NDArray[np.int64]:
    """Pick each row's best positive in a block of rows starting at ``start``, and rank it."""
    if positives.single is None:
        check_no_nan(name, block, start)  # the best-positive choice must not see NaN
    gt = _best_positive(block, positives, start, start + len(block))
    return rank_scores(block, gt, name, start)


def ranks_of_matrix(name: str, scores: np.ndarray, positives: Positives) -> npt.NDArray[np.int64]:
    """Ranks for a validated score matrix, in row blocks of at most 8 MB (copied only if not C-contiguous)."""
    n, m = scores.shape
    ranks = np.empty(n, dtype=np.int64)
    step = max(1, _OUTER_BLOCK_BYTES // (m * scores.dtype.itemsize))
    for start in range(0, n, step):
        stop = min(start + step, n)
        block = np.ascontiguousarray(scores[start:stop])
        ranks[start:stop] = ranks_of_block(name, block, positives, start)
    return ranks


def retrieval_ranks(scores: Any, positives: Any) -> npt.NDArray[np.int64]:
    """Rank of each query's best-ranked positive, 0-indexed, with the tie rule of docs/metrics.md.

    Parameters
    ----------
    scores : array_like, shape (n, m)
        Similarities, higher is better (int or float; ±inf allowed, NaN not). Nested lists, numpy
        arrays and CPU torch tensors are accepted.
    positives : array_like or sequence
        The relevant gallery items of every query, in one of three forms: one int per query (a
        sequence or 1-D integer array); a collection of ints per query (a sequence of lists,
        tuples, sets or arrays, or an (n, p) integer array; e.g. 5 captions per image); or an
        (n, m) boolean mask. Every query needs at least one positive.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
        The 0-indexed position of the query's best positive when the row is sorted by descending
        score, ties broken by the lower gallery index. A positive at rank ``r`` is found by
        Recall@K for every ``K > r``.

    Raises
    ------
    TypeError
        ``scores`` not numeric; positives not integers (bools included) nor a boolean mask.
    ValueError
        ``scores`` not 2-D, empty or holding NaN; positives of the wrong length or shape, out of
        range, or a query without any positive.

    Notes
    -----
    The rank is computed without sorting: ``#(s > s[p]) + #(s == s[p] and index < p)`` for the
    best positive ``p``, vectorised over cache-sized blocks of rows (extra memory stays small and
    does not grow with ``n``).

    Examples
    --------
    >>> retrieval_ranks([[0.9, 0.5, 0.5], [0.1, 0.7, 0.7]], [2, [0, 2]]).tolist()
    [2, 1]
    >>> retrieval_ranks([[0.2, 0.8]], [[False, True]]).tolist()
    [0]
    """
    matrix = as_score_matrix("scores", scores)
    checked = as_positives("positives", positives, *matrix.shape)
    return ranks_of_matrix("scores", matrix, checked)
