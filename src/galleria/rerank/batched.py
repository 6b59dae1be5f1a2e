"""k-reciprocal re-ranking of many candidate pools at once, equal or different in size.

Pools are padded to a common size and processed as (B, n, n) arrays, a few dozen pools at a time
(:func:`chunk_counts`) so that the temporaries stay in cache; a mask keeps padded rows and columns out
of every neighbourhood, and each pool keeps its own effective ``k1``, ``k2`` and half of ``k1``. The
heavy steps run on the whole chunk with no Python loop per pool:

* ranking lists: the first ``k1 + 1`` entries of every row, from a sort of packed integer keys
  (value and column in one word), with an exact stable sort for the rare rows that hold ties;
* reciprocity and expansion (Eqs. 3 and 4): per-member sets as ``uint64`` bit sets, intersected and
  counted with ``bitwise_count``;
* features, Eq. 11 and Eq. 10: dense Eq. 7 weights for the row sums, then only the columns of the
  probe's support (outside it ``min(V_p, V_g)`` is 0).

The results equal :func:`galleria.rerank.pool.rerank_pool` on each pool, bit for bit: the same
floating-point operations run on the same values, and every sum runs left to right, so padding and
skipped zero columns change nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria.rerank import _common
from galleria.rerank._common import (
    K1,
    K2,
    LAMBDA,
    as_float_matrix,
    check_hyperparameters,
    ordered_sum,
    ranked_members,
)
from galleria.rerank.sparse_pool import MatrixRows, sparse_pool_core

__all__ = ["chunk_counts", "pools_core", "rerank_pools", "run_pools", "scale_pools", "scaled_pools_core"]

#: Upper bound on B·n² for one chunk of pools: each (B, n, n) float64 temporary stays near 2.4 MB,
#: small enough to stay in cache between the passes over it.
_CHUNK_ELEMENTS = 300_000


def rerank_pools(
    distances: Sequence[Any] | np.ndarray,
    *,
    k1: int = K1.default,
    k2: int = K2.default,
    lambda_value: float = LAMBDA.default,
) -> list[np.ndarray]:
    """Re-rank many pools: the final k-reciprocal distances ``d*`` of every pool's candidates.

    Parameters
    ----------
    distances : sequence of array_like (N_b + 1, N_b + 1), or ndarray (B, N + 1, N + 1)
        One distance matrix per pool, each laid out as for
        :func:`~galleria.rerank.pool.rerank_pool` (probe first). Pools may differ in size.
    k1, k2, lambda_value
        As for :func:`~galleria.rerank.pool.rerank_pool`; the caps on ``k1`` and ``k2`` apply per pool.

    Returns
    -------
    list of ndarray
        ``d*`` of each pool's candidates (shape (N_b,), float64), in input order.

    Raises
    ------
    TypeError
        ``distances`` is not a sequence of numeric matrices, or a hyper-parameter of the wrong kind.
    ValueError
        ``distances`` is empty, a matrix is not square, smaller than 2×2 or not finite, or a
        hyper-parameter has a wrong value.

    Examples
    --------
    >>> points = np.array([0.0, 0.1, 0.2, 5.0, 5.1])
    >>> d = np.abs(points[:, None] - points[None, :])
    >>> [r.shape for r in rerank_pools([d, d[:3, :3]], k1=2, k2=1)]
    [(4,), (2,)]
    """
    if isinstance(distances, (str, bytes)) or not isinstance(distances, (Sequence, np.ndarray)):
        raise TypeError(f"distances must be a sequence of square matrices, got {type(distances).__name__}")
    if isinstance(distances, np.ndarray) and distances.ndim != 3:
        raise ValueError(f"distances as one array must have shape (B, n, n), got {distances.shape}")
    if len(distances) == 0:
        raise ValueError("distances must hold at least one pool")
    matrices = []
    for position, matrix in enumerate(distances):
        checked = as_float_matrix(f"distances[{position}]", matrix, square=True)
        if checked.shape[0] < 2:
            raise ValueError(
                f"distances[{position}] must hold the probe and at least one candidate, "
                f"got shape {checked.shape}"
            )
        matrices.append(checked)
    first, second, weight = check_hyperparameters(k1, k2, lambda_value)
    return run_pools(matrices, first, second, weight)


def run_pools(matrices: Sequence[np.ndarray], k1: int, k2: int, lambda_value: float) -> list[np.ndarray]:
    """:func:`rerank_pools` on trusted input: pools grouped by size, padded and re-ranked together.

    Pools of ``_common.SPARSE_POOL_SIZE`` candidates or more go one by one through the sparse core.
    """
    sizes = np.array([matrix.shape[0] for matrix in matrices], dtype=np.int64)
    results: list[np.ndarray] = [np.empty(0)] * len(matrices)
    large = sizes - 1 >= _common.SPARSE_POOL_SIZE
    for position in np.flatnonzero(large).tolist():
        results[position] = sparse_pool_core(MatrixRows(matrices[position]), k1, k2, lambda_value)
    small = np.flatnonzero(~large)
    for group in _chunks(sizes[small]):
        chunk = small[group].tolist()
        width = int(sizes[chunk].max())
        padded = np.zeros((len(chunk), width, width), dtype=np.float64)
        for slot, position in enumerate(chunk):
            size = sizes[position]
            padded[slot, :size, :size] = matrices[position]
        final = pools_core(padded, sizes[chunk], k1, k2, lambda_value)
        for slot, position in enumerate(chunk):
            results[position] = final[slot, : sizes[position] - 1].copy()
    return results


def chunk_counts(count: int, width: int) -> list[int]:
    """Split ``count`` pools of ``width`` members into consecutive chunks of bounded size.

    Each chunk holds at most ``_CHUNK_ELEMENTS`` entries in its (B, width, width) arrays (at least
    one pool), so that the per-chunk temporaries stay in cache.

    Examples
    --------
    >>> chunk_counts(100, 101)
    [29, 29, 29, 13]
    """
    per_chunk = max(1, _CHUNK_ELEMENTS // (width * width))
    return [min(per_chunk, count - start) for start in range(0, count, per_chunk)]


def _chunks(sizes: np.ndarray) -> list[list[int]]:
    """Group pool positions by similar size so that each group's padded array stays small."""
    order = np.argsort(-sizes, kind="stable")
    groups: list[list[int]] = []
    current: list[int] = []
    for position in order.tolist():
        width = int(sizes[current[0]]) if current else int(sizes[position])
        if current and (len(current) + 1) * width * width > _CHUNK_ELEMENTS:
            groups.append(current)
            current = []
        current.append(position)
    if current:
        groups.append(current)
    return groups


def pools_core(distances: np.ndarray, sizes: np.ndarray, k1: int, k2: int, lambda_value: float) -> np.ndarray:
    """Batched re-ranking on padded input (trusted): ``d*`` of every pool's candidates.

    Parameters
    ----------
    distances : ndarray, shape (B, n, n), float64
        Pool ``b`` occupies ``[:sizes[b], :sizes[b]]``; the padding is ignored. Modified in place.
    sizes : ndarray, shape (B,)
        Members per pool (probe included), each ≥ 2.
    k1, k2, lambda_value
        Validated hyper-parameters (``k2 <= k1``).

    Returns
    -------
    ndarray, shape (B, n - 1)
        Row ``b``'s first ``sizes[b] - 1`` entries are pool ``b``'s ``d*``; the rest is padding.

    Notes
    -----
    The sets of Eqs. 2–4 are kept as masks over each member's ranking list and as bit sets; dense
    (B, n, n) work is limited to scaling, the ranking keys, the rank positions (bytes), the Eq. 7
    weights and their sums. Eq. 11 and Eq. 10 only need the features on the probe's support
    (outside it ``min(V_p, V_g)`` is 0), so they run on those columns only.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    valid = np.arange(distances.shape[1])[None, :] < sizes[:, None]  # (B, n)
    return scaled_pools_core(_scale_rows(distances, valid), sizes, k1, k2, lambda_value)


def scale_pools(between: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The scaled distances of equal pools from their parts, as :func:`pools_core` scales them.

    Parameters
    ----------
    between : ndarray, shape (B, N, N), float32
        Distances among each pool's candidates (modified in place).
    scores : ndarray, shape (B, N), float64
        Each pool's probe-to-candidate distances (row and column 0 of the pool matrix).

    Returns
    -------
    ndarray, shape (B, N + 1, N + 1), float64
        Equal to scaling the assembled float64 pool matrices: flooring, the diagonal and the row
        maxima are done in float32 (exact: the cast to float64 keeps order and values), and the
        division by the maxima writes the float64 result in the same pass.
    """
    batch, length, _ = between.shape
    np.maximum(between, 0.0, out=between)
    between.reshape(batch, length * length)[:, :: length + 1] = 0.0  # the diagonals
    floored = np.maximum(scores, 0.0)
    peak = np.empty((batch, length + 1), dtype=np.float64)
    peak[:, 0] = floored.max(axis=1)  # row 0 is [0, scores]
    np.maximum(between.max(axis=2), floored, out=peak[:, 1:])  # row i is [score_i, between[i]]
    peak[peak <= 0] = 1.0
    scaled = np.empty((batch, length + 1, length + 1), dtype=np.float64)
    np.divide(between, peak[:, 1:, None], out=scaled[:, 1:, 1:])
    np.divide(floored, peak[:, 1:], out=scaled[:, 1:, 0])
    np.divide(floored, peak[:, :1], out=scaled[:, 0, 1:])
    scaled[:, 0, 0] = 0.0
    return scaled


def scaled_pools_core(
    scaled: np.ndarray, sizes: np.ndarray, k1: int, k2: int, lambda_value: float
) -> np.ndarray:
    """:func:`pools_core` on distances already scaled (padded columns +inf); ``scaled`` is overwritten."""
    batch, width, _ = scaled.shape
    firsts = np.minimum(k1, sizes - 1)
    seconds = np.minimum(k2, firsts)
    halves = np.around(firsts / 2).astype(np.int64)
    valid = np.arange(width)[None, :] < sizes[:, None]  # (B, n)
    padded = not bool(valid.all())
    ranking = ranked_members(scaled, int(firsts.max()) + 1, padded)  # (B, n, ranks): N(i, k1) of all
    rows = ranking + (np.arange(batch) * width)[:, None, None]  # row numbers in a (B·n, ·) view
    expanded_bits = _expanded_sets(ranking, rows, valid, firsts, halves)  # (B, n, words)

    # Eq. 7 with unit L1 norm; a member whose expanded set is empty keeps a zero feature.
    original = np.where(valid, scaled[:, 0, :], 1.0)  # d(p, ·), kept for Eq. 12
    weights = np.negative(scaled, out=scaled)  # the scaled distances are not needed any more
    np.exp(weights, out=weights)
    weights *= _unpack(expanded_bits, width)
    totals = ordered_sum(weights)  # (B, n)
    mass = (totals > 0).astype(np.float64)  # each feature sums to 1 (or is 0)

    # Eq. 11 and Eq. 10 on the probe's support, the union of the expanded sets of its k2 nearest.
    own = np.arange(batch * width).reshape(batch, width)
    average = seconds > 1
    widest = int(seconds.max())
    probe_near = expanded_bits.reshape(batch * width, -1)[rows[:, 0, :widest]]  # (B, widest, words)
    probe_near[np.arange(widest)[None, :] >= seconds[:, None]] = 0
    support = _unpack(np.bitwise_or.reduce(probe_near, axis=1), width).view(bool)  # (B, n)
    span = max(1, int(support.sum(axis=1).max()))
    columns = np.argsort(~support, axis=1, kind="stable")[:, :span]  # the support first, in order
    narrow = np.take(weights, own[:, :, None] * width + columns[:, None, :])  # (B, n, span)
    narrow /= np.where(totals > 0, totals, 1.0)[:, :, None]
    with_mass = np.concatenate([narrow.reshape(batch * width, span), mass.reshape(-1, 1)], axis=1)
    averaged = _mean_rows(with_mass, rows, own, seconds, average)
    narrow, member_mass = averaged[:, :, :span], averaged[:, :, span]
    smallest = ordered_sum(np.minimum(narrow[:, :1, :], narrow))  # Σ min(V_p, V_g); 0 off the support

    # Eq. 10 with Σ max = Σ V_p + Σ V_g - Σ min (each V sums to its mass), then Eq. 12.
    largest = member_mass[:, :1] + member_mass - smallest
    jaccard = np.ones((batch, width))
    np.subtract(1.0, smallest / np.where(largest > 0, largest, 1.0), out=jaccard, where=largest > 0)
    final = (1.0 - lambda_value) * jaccard + lambda_value * original
    return np.asarray(final[:, 1:])


def _mean_rows(
    rows: np.ndarray, ranking: np.ndarray, own: np.ndarray, seconds: np.ndarray, average: np.ndarray
) -> np.ndarray:
    """Eq. 11 on gathered rows: each member's mean over its first ``k2`` ranked members.

    ``rows`` is (B·n, m), pool-major; ``ranking`` (B, r, ≥ k2) and ``own`` (B, r) hold row numbers
    into it. Pools whose ``average`` is False (``k2 = 1``) keep their own rows. The sums are one
    sparse product (a selector with ``k2`` ones per row, in ranking order), which adds the rows left
    to right: ``0 + 1·x_1 + 1·x_2 + ...`` equals the plain running sum exactly.
    """
    batch, members = own.shape
    counts = np.where(average, seconds, 1)
    widest = int(counts.max())
    picked = np.array(ranking[:, :, :widest])
    picked[~average, :, 0] = own[~average]
    if bool((counts == widest).all()):
        indices = picked.reshape(-1)
        indptr = np.arange(0, indices.size + 1, widest)
    else:
        indices = picked[
            np.broadcast_to(np.arange(widest)[None, None, :] < counts[:, None, None], picked.shape)
        ]
        indptr = np.concatenate([[0], np.cumsum(np.repeat(counts, members))])
    selector = sp.csr_matrix((np.ones(indices.size), indices, indptr), shape=(batch * members, rows.shape[0]))
    total: np.ndarray = np.asarray(selector @ rows).reshape(batch, members, -1)
    total /= counts[:, None, None]
    return total


def _scale_rows(distances: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The pinned original distance, in place: floored, zero diagonal, each row over its maximum.

    Padded columns (``valid`` False) are left out of the maxima and set to +inf afterwards, so that
    they rank after every member.
    """
    batch, width, _ = distances.shape
    scaled: np.ndarray = np.maximum(distances, 0.0, out=distances)
    scaled.reshape(batch, width * width)[:, :: width + 1] = 0.0  # the diagonals
    padded = not bool(valid.all())
    if padded:
        scaled *= valid[:, None, :]
    peak = scaled.max(axis=2, keepdims=True)
    peak[peak <= 0] = 1.0
    scaled /= peak
    if padded:
        np.copyto(scaled, np.inf, where=~valid[:, None, :])
    return scaled


def _expanded_sets(
    ranking: np.ndarray, rows: np.ndarray, valid: np.ndarray, firsts: np.ndarray, halves: np.ndarray
) -> np.ndarray:
    """The expanded k-reciprocal set of every member (Eqs. 3 and 4) as little-endian uint64 bit sets.

    ``ranking`` (B, n, ranks) holds each member's ranking list, ``rows`` the same as row numbers of
    a (B·n, ·) view. Returns (B, n, words) with ``words = ceil(n / 64)``.
    """
    batch, width, ranks = ranking.shape
    slots = np.arange(ranks)
    # back[b, i, a]: where member i stands in the ranking list of its a-th nearest (ranks if absent).
    place_type = np.uint8 if ranks < 255 else np.int64
    place = np.full(batch * width * width, ranks, dtype=place_type)
    place[(np.arange(batch * width) * width)[:, None] + ranking.reshape(batch * width, ranks)] = slots
    back = np.take(place, rows * width + np.arange(width)[None, :, None])

    near = (slots <= firsts[:, None, None]) & (back <= firsts.astype(place_type)[:, None, None])
    near &= valid[:, :, None]  # R(i, k1) as a mask over each ranking list
    words = -(-width // 64)
    positions = place.reshape(batch, width, width)
    transposed = np.ascontiguousarray(positions.transpose(0, 2, 1))
    bits = _reciprocal_bits(positions, transposed, firsts, valid, words)  # (words, B, n)
    bits_half = _reciprocal_bits(positions, transposed, halves, valid, words).reshape(words, -1)
    sizes_half = np.bitwise_count(bits_half[0])
    for word in range(1, words):
        sizes_half += np.bitwise_count(bits_half[word])
    # |R(q, k1/2)| · 2/3, rounded up: q is accepted when |R(i, k1) ∩ R(q, k1/2)| reaches it.
    needed = ((2 * sizes_half.astype(np.int64) + 2) // 3).astype(sizes_half.dtype)

    # Eq. 4: q = ranking[b, i, a] in R(i, k1) is accepted when |R(i, k1) ∩ R(q, k1/2)| ≥ 2/3 |R(q, k1/2)|.
    candidates = [np.take(bits_half[word], rows) for word in range(words)]  # R(q, k1/2) of every ranked q
    shared = np.bitwise_count(candidates[0] & bits[0][:, :, None])
    for word in range(1, words):
        shared += np.bitwise_count(candidates[word] & bits[word][:, :, None])
    accepted = near & (shared >= np.take(needed, rows))
    expanded = np.empty((batch, width, words), dtype=np.uint64)
    for word, candidate in enumerate(candidates):
        candidate *= accepted  # R(q, k1/2) of the accepted q only
        np.bitwise_or(bits[word], np.bitwise_or.reduce(candidate, axis=2), out=expanded[..., word])
    return expanded


def _reciprocal_bits(
    positions: np.ndarray, transposed: np.ndarray, count: np.ndarray, valid: np.ndarray, words: int
) -> np.ndarray:
    """R(i, k) of every member (Eq. 3) as little-endian uint64 bit sets, ``k = count`` per pool.

    ``positions[b, j, c]`` is where column ``c`` stands in member ``j``'s ranking list (anything
    above every ``k`` if it is not listed); ``transposed`` is the same with the last two axes
    swapped, contiguous. Returns (words, B, n), each word one contiguous array.
    """
    batch, width, _ = positions.shape
    limit = count.astype(positions.dtype)[:, None, None]
    sets = positions <= limit  # c in N(j, k)
    sets &= transposed <= limit  # ... and j in N(c, k)
    packed = np.packbits(sets, axis=-1, bitorder="little")
    padded = np.zeros((batch, width, words * 8), dtype=np.uint8)
    padded[..., : packed.shape[-1]] = packed
    padded[~valid] = 0
    return np.ascontiguousarray(np.moveaxis(padded.view(np.uint64), -1, 0))


def _unpack(bits: np.ndarray, width: int) -> np.ndarray:
    """Unpack (…, words) little-endian uint64 bit sets into (…, width) uint8 0/1 values."""
    return np.unpackbits(bits.view(np.uint8), axis=-1, count=width, bitorder="little")
