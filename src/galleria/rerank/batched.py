"""k-reciprocal re-ranking of many candidate pools at once, equal or different in size.

Pools are padded to a common size and processed as (B, n, n) arrays; a mask keeps padded rows and
columns out of every neighbourhood, and each pool keeps its own effective ``k1``, ``k2`` and half of
``k1``. The heavy steps (ranking lists, reciprocity, expansion, features, Jaccard) run on the whole
batch with no Python loop per pool. The results equal :func:`galleria.rerank.pool.rerank_pool` on
each pool, bit for bit: every sum runs left to right, so padding changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from galleria.rerank._common import as_float_matrix, check_hyperparameters, ordered_sum, stable_smallest

__all__ = ["pools_core", "rerank_pools", "run_pools"]

#: Upper bound on B·n² for one chunk of pools (keeps each (B, n, n) temporary near 16 MB).
_CHUNK_ELEMENTS = 2_000_000


def rerank_pools(
    distances: Sequence[Any] | np.ndarray,
    *,
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
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
    """:func:`rerank_pools` on trusted input: pools grouped by size, padded and re-ranked together."""
    sizes = np.array([matrix.shape[0] for matrix in matrices], dtype=np.int64)
    results: list[np.ndarray] = [np.empty(0)] * len(matrices)
    for chunk in _chunks(sizes):
        width = int(sizes[chunk].max())
        padded = np.zeros((len(chunk), width, width), dtype=np.float64)
        for slot, position in enumerate(chunk):
            size = sizes[position]
            padded[slot, :size, :size] = matrices[position]
        final = pools_core(padded, sizes[chunk], k1, k2, lambda_value)
        for slot, position in enumerate(chunk):
            results[position] = final[slot, : sizes[position] - 1].copy()
    return results


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
    """
    batch, width, _ = distances.shape
    sizes = np.asarray(sizes, dtype=np.int64)
    firsts = np.minimum(k1, sizes - 1)
    seconds = np.minimum(k2, firsts)
    halves = np.around(firsts / 2).astype(np.int64)
    members = np.arange(width)
    valid = members[None, :] < sizes[:, None]  # (B, n)
    padding = ~np.broadcast_to(valid[:, None, :], distances.shape)

    # Original distance: floor, zero diagonal, row-max scaling; padded columns pushed to +inf.
    padded = bool(padding.any())
    scaled = np.maximum(distances, 0.0, out=distances)
    scaled[:, members, members] = 0.0
    if padded:
        scaled[padding] = 0.0
    peak = scaled.max(axis=2, keepdims=True)
    peak[peak <= 0] = 1.0
    scaled /= peak
    if padded:
        scaled[padding] = np.inf

    ranks = int(firsts.max()) + 1
    ranking = stable_smallest(scaled, ranks)  # (B, n, ranks): N(i, k1) of every member
    flat_ranking = ranking + (np.arange(batch) * width)[:, None, None]  # rows of a (B·n, ·) view
    slots = np.arange(ranks)[None, :]

    def reciprocal_sets(count: np.ndarray) -> np.ndarray:
        """R(i, k) of every member as a (B, n, n) boolean array, ``k`` per pool."""
        keep = valid[:, :, None] & (slots < count[:, None] + 1)[:, None, :]
        near = np.zeros((batch, width, width + 1), dtype=bool)  # last column takes what is not kept
        np.put_along_axis(near, np.where(keep, ranking, width), True, axis=2)
        square = near[:, :, :width]
        sets: np.ndarray = square & square.transpose(0, 2, 1)
        return sets

    reciprocal = reciprocal_sets(firsts)
    reciprocal_half = reciprocal_sets(halves)
    words = -(-width // 64)
    bits = _pack(reciprocal, words)  # (B, n, words) uint64
    bits_half = _pack(reciprocal_half, words).reshape(batch * width, words)

    # Eq. 4 on bit sets: for q = ranking[b, i, a], |R(i, k1) ∩ R(q, k1/2)| ≥ 2/3 |R(q, k1/2)|.
    candidates = bits_half[flat_ranking]  # (B, n, ranks, words)
    shared = np.zeros(candidates.shape[:3], dtype=np.int32)
    for word in range(words):
        shared += np.bitwise_count(candidates[..., word] & bits[:, :, None, word])
    counts = reciprocal_half.sum(axis=2).reshape(-1)[flat_ranking]
    accepted = np.take_along_axis(reciprocal, ranking, axis=2) & (3 * shared >= 2 * counts)
    candidates &= np.negative(accepted.astype(np.uint64))[..., None]  # all ones where accepted
    expanded_bits = bits | np.bitwise_or.reduce(candidates, axis=2)
    unpacked = np.unpackbits(expanded_bits.view(np.uint8), axis=2, count=width, bitorder="little")
    expanded = unpacked.astype(bool)
    del candidates, reciprocal, reciprocal_half

    # Eq. 7 with unit L1 norm; a member whose expanded set is empty keeps a zero feature.
    features = np.zeros_like(scaled)
    np.exp(np.negative(scaled, out=features, where=expanded), out=features, where=expanded)
    totals = ordered_sum(features)[:, :, None]
    np.divide(features, totals, out=features, where=totals > 0)
    mass = (totals[:, :, 0] > 0).astype(np.float64)  # each feature sums to 1 (or is 0)

    # Eq. 11 for the probe (its whole row), then for every member on the probe's support only:
    # min(V_p, V_g) vanishes elsewhere, and Σ max = Σ V_p + Σ V_g - Σ min (each V sums to its mass).
    rows = features.reshape(batch * width, width)
    average = seconds > 1
    members_own = np.arange(batch * width).reshape(batch, width)
    probe = _mean_rows(rows, flat_ranking[:, :1, :], members_own[:, :1], seconds, average)[:, 0, :]
    support = probe > 0
    span = max(1, int(support.sum(axis=1).max()))
    columns = np.argsort(~support, axis=1, kind="stable")[:, :span]  # the support first, in order
    inside = np.take_along_axis(support, columns, axis=1)
    probe_part = np.where(inside, np.take_along_axis(probe, columns, axis=1), 0.0)
    narrow = np.take_along_axis(features, np.broadcast_to(columns[:, None, :], (batch, width, span)), axis=2)
    narrow = _mean_rows(narrow.reshape(batch * width, span), flat_ranking, members_own, seconds, average)
    smallest = ordered_sum(np.minimum(probe_part[:, None, :], narrow))
    member_mass = _mean_rows(mass.reshape(batch * width, 1), flat_ranking, members_own, seconds, average)
    member_mass = member_mass[:, :, 0]

    # Eq. 10 (probe row against every member) and Eq. 12.
    largest = member_mass[:, :1] + member_mass - smallest
    jaccard = np.ones((batch, width))
    np.subtract(1.0, smallest / np.where(largest > 0, largest, 1.0), out=jaccard, where=largest > 0)
    original = np.where(valid, scaled[:, 0, :], 1.0)
    final = (1.0 - lambda_value) * jaccard + lambda_value * original
    return np.asarray(final[:, 1:])


def _mean_rows(
    rows: np.ndarray, ranking: np.ndarray, own: np.ndarray, seconds: np.ndarray, average: np.ndarray
) -> np.ndarray:
    """Eq. 11 on gathered rows: each member's mean over its first ``k2`` ranked members.

    ``rows`` is (B·n, m), pool-major; ``ranking`` (B, r, ≥ k2) and ``own`` (B, r) hold row numbers
    into it. The sum runs over the ranked members in order (exact zeros are added beyond a pool's
    own ``k2``); pools whose ``average`` is False (``k2 = 1``) keep their own rows.
    """
    widest = int(seconds[average].max()) if average.any() else 1
    if widest == 1:
        result: np.ndarray = rows[own]
        return result
    total: np.ndarray = rows[ranking[:, :, 0]]
    for position in range(1, widest):
        gathered = rows[ranking[:, :, position]]
        gathered[position >= seconds] = 0.0
        total += gathered
    total /= seconds[:, None, None]
    if not average.all():
        total = np.where(average[:, None, None], total, rows[own])
    return total


def _pack(sets: np.ndarray, words: int) -> np.ndarray:
    """Pack the last axis of a boolean array into ``words`` little-endian uint64 words."""
    packed = np.packbits(sets, axis=-1, bitorder="little")
    padded = np.zeros((*sets.shape[:-1], words * 8), dtype=np.uint8)
    padded[..., : packed.shape[-1]] = packed
    return padded.view(np.uint64)
