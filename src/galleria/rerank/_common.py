"""Small numeric helpers and argument checks shared by the k-reciprocal re-ranking modules.

Everything here works on numpy arrays and knows nothing of stores or files.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from galleria._params import Param, Space
from galleria._validation import check_choice
from galleria.vectors import stable_smallest  # moved there; re-exported

T = TypeVar("T")

__all__ = [
    "BLOCK_WORKERS",
    "K1",
    "K2",
    "LAMBDA",
    "MODES",
    "SPARSE_POOL_SIZE",
    "as_float_matrix",
    "check_hyperparameters",
    "check_mode",
    "effective_ks",
    "half_of",
    "ordered_sum",
    "parallel_blocks",
    "ranked_and_nearest",
    "ranked_members",
    "reciprocal_mask",
    "stable_smallest",
]

#: The two flavours of full probe×gallery re-ranking.
MODES: tuple[str, ...] = ("paper", "reference")

#: Pools of at least this many candidates are re-ranked by the sparse pool core
#: (:mod:`galleria.rerank.sparse_pool`, memory near O(N·k1)) instead of the dense ones (memory and
#: time growing with N², and N³ for :func:`~galleria.rerank.pool.rerank_pool`). The results are the
#: same; ``benchmarks/suites/bench_rerank.py`` measured the dense cores to stop paying off near this size.
#: Read at each call, so tests may lower it.
SPARSE_POOL_SIZE = 1000


#: k-reciprocal re-ranking's parameters (Zhong et al., CVPR 2017), declared once: the method's
#: declaration (:data:`galleria.rerank.reranker.COMPONENT`), its constructor, the numeric cores'
#: signatures and :func:`check_hyperparameters` all read them from here.
K1 = Param(
    "k1",
    int,
    20,
    1,
    10_000,
    paper=20,
    cost=True,
    space=Space("int", 4, 60),
    help="size of the k-reciprocal neighborhoods",
    flag="--k1",
)
K2 = Param(
    "k2",
    int,
    6,
    1,
    10_000,
    paper=6,
    at_most="k1",
    space=Space("int", 1, 10),
    help="neighbors averaged in the local query expansion (at most k1)",
    flag="--k2",
)
LAMBDA = Param(
    "lambda_value",
    float,
    0.3,
    0.0,
    1.0,
    paper=0.3,
    space=Space("float", 0.0, 1.0),
    help="weight of the original distance against the Jaccard distance",
    flag="--lambda",
    key="lambda",
    trial="lambda",
)


def check_hyperparameters(k1: Any, k2: Any, lambda_value: Any) -> tuple[int, int, float]:
    """Validate ``k1``, ``k2`` (``k2 <= k1``) and ``lambda_value`` against their declarations
    (:data:`K1`, :data:`K2`, :data:`LAMBDA`): the same check and message as every entry point.

    Raises
    ------
    TypeError
        ``k1`` / ``k2`` not integers (bools rejected), ``lambda_value`` not a real number.
    ValueError
        ``k1`` / ``k2`` outside [1, 10000], ``k2 > k1``, ``lambda_value`` outside [0, 1] or not finite.
    """
    first = K1.check(k1)
    second = K2.check(k2)
    if second > first:
        raise ValueError(f"k2 must not exceed k1, got k2={k2!r} > k1={k1!r}")
    weight = LAMBDA.check(lambda_value)
    return int(first), int(second), float(weight)


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


def ranked_members(scaled: np.ndarray, ranks: int, padded: bool) -> np.ndarray:
    """First ``ranks`` entries of every row's stable ranking list, for rows of values in [0, 1] or +inf.

    Equal to ``stable_smallest(scaled, ranks)``, faster: each entry is packed with its column into
    one integer key (the value truncated to a fixed point in the high bits, the column in the low
    bits; int32 keys up to 256 columns, int64 beyond), and only the keys are sorted (partitioned
    first on long rows). Truncation never reverses two values, so a row whose first ``ranks + 1``
    keys have distinct value parts is ranked exactly; the rest (rows with ties, or values closer than
    the fixed point's step) are redone with a stable sort of the true values. ``padded`` says whether
    any value is +inf.
    """
    return _ranked(scaled, ranks, padded, 0)[0]


def ranked_and_nearest(scaled: np.ndarray, ranks: int, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ranked_members` of finite rows, and the columns of about the ``keep`` smallest entries.

    The second array (…, min(max(keep, ranks + 1), n)) lists, in no particular order, the columns of
    the smallest keys (values truncated as in :func:`ranked_members`, ties to the lower column).
    """
    ranking, nearest = _ranked(scaled, ranks, False, keep)
    assert nearest is not None
    return ranking, nearest


def _ranked(scaled: np.ndarray, ranks: int, padded: bool, keep: int) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`ranked_members`, and with ``keep`` > 0 the columns of :func:`ranked_and_nearest`."""
    width = scaled.shape[-1]
    column_bits = max(1, (width - 1).bit_length())
    key_type = np.int32 if column_bits <= 8 else np.int64
    value_bits = (30 if key_type is np.int32 else 62) - column_bits  # 1.5 · 2**value_bits fits
    packed = np.empty(scaled.shape, dtype=key_type)
    if padded:  # +inf becomes 1.5 · 2**value_bits, above every scaled value
        keys = np.minimum(scaled, 1.5)
        np.multiply(keys, float(2**value_bits), out=packed, casting="unsafe")  # truncates
    else:
        np.multiply(scaled, float(2**value_bits), out=packed, casting="unsafe")
    packed <<= column_bits
    packed |= np.arange(width, dtype=key_type)
    low_bits = (1 << column_bits) - 1
    span = min(ranks + 1, width)
    nearest = None
    if keep > 0:
        kept = min(max(keep, span), width)
        if kept < width:
            packed = np.partition(packed, kept - 1, axis=-1)[..., :kept]
        nearest = (packed & low_bits).astype(np.intp)
        if span < kept:
            packed = np.partition(packed, span - 1, axis=-1)[..., :span]
    elif span < width // 8:  # a partial sort pays off on long rows only
        packed = np.partition(packed, span - 1, axis=-1)[..., :span]
    packed.sort(axis=-1)
    packed = packed[..., :span]
    values = packed >> column_bits
    ranking: np.ndarray = (packed[..., :ranks] & low_bits).astype(np.intp)
    tied = (values[..., 1:] == values[..., :-1]).any(axis=-1)
    if tied.any():
        ranking[tied] = stable_smallest(scaled[tied], ranks)
    return ranking, nearest


def reciprocal_mask(ranking: np.ndarray, width: int, block_elements: int) -> np.ndarray:
    """``mask[i, a]``: whether ``i`` is among the first ``width`` ranked members of ``ranking[i, a]``.

    ``ranking`` (n, ≥ width) holds each member's ranked members; the rows are taken in blocks of
    about ``block_elements`` gathered entries (the block size does not change the result).

    Examples
    --------
    >>> reciprocal_mask(np.array([[0, 1, 2], [1, 0, 2], [2, 1, 0]]), 2, 1 << 22).tolist()
    [[True, True], [True, True], [True, False]]
    """
    size = ranking.shape[0]
    mask = np.empty((size, width), dtype=bool)
    step = max(1, block_elements // (width * width))
    for start in range(0, size, step):
        stop = min(start + step, size)
        heads = ranking[start:stop, :width]
        mask[start:stop] = (ranking[heads, :width] == np.arange(start, stop)[:, None, None]).any(axis=2)
    return mask


#: Threads that work through independent blocks of the full re-ranking (one per core, at most 4).
BLOCK_WORKERS = max(1, min(4, os.cpu_count() or 1))


def parallel_blocks(
    work: Callable[[int, Any], T],
    starts: Sequence[int],
    produce: Callable[[int], Any] | None = None,
    workers: int = 0,
) -> Iterator[T]:
    """``work(start, produce(start))`` for every start, yielded in order, by up to ``workers`` threads.

    ``produce`` (None: nothing, ``work`` gets None) runs in the calling thread, one start after
    the other. ``work`` runs on ``workers`` threads (0 means :data:`BLOCK_WORKERS`), where numpy
    and scipy release the GIL in most of their array loops; each block must be computed as it
    would be alone, so that the results do not depend on the number of threads. A BLAS product in
    ``work`` must run under :func:`one_blas_thread` (OpenBLAS splits a product by its own thread
    count, and the split changes the last bits of a float32 product; one thread per product also
    keeps BLAS's spinning threads from competing with the workers for the cores). At most
    ``workers`` blocks are in flight ahead of the consumer, which bounds the memory.

    Examples
    --------
    >>> list(parallel_blocks(lambda start, made: start + made, [0, 1, 2], lambda start: 10 * start, 2))
    [0, 11, 22]
    """
    count = workers or BLOCK_WORKERS
    make = produce if produce is not None else (lambda start: None)
    if count <= 1:
        for start in starts:
            yield work(start, make(start))
        return
    with ThreadPoolExecutor(max_workers=count) as pool:
        pending: deque[Future[T]] = deque()
        try:
            for start in starts:
                pending.append(pool.submit(work, start, make(start)))
                if len(pending) > count:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
