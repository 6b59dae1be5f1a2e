"""A deliberately literal, slow transcription of k-reciprocal re-ranking ("paper" mode).

Written from the definitions in docs/reranking.md ("k-reciprocal re-ranking, defined"), with
Python sets and loops and no code shared with ``galleria.rerank``. It is the oracle the fast code is
tested against; it is only ever run on small sets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def scaled_distances(distances: Sequence[Sequence[float]]) -> list[list[float]]:
    """Floor at 0, zero diagonal, divide every row by its largest entry (a zero row stays)."""
    size = len(distances)
    result = []
    for i in range(size):
        row = [max(float(distances[i][j]), 0.0) for j in range(size)]
        row[i] = 0.0
        largest = max(row)
        if largest > 0:
            row = [value / largest for value in row]
        result.append(row)
    return result


def ranking_list(d: list[list[float]], i: int) -> list[int]:
    """L(i): every member sorted by d(i, ·), ties to the lower position (stable)."""
    return sorted(range(len(d)), key=lambda j: (d[i][j], j))


def k_nearest(rankings: list[list[int]], i: int, k: int) -> set[int]:
    """Eq. 2: N(i, k), the first k + 1 entries of the ranking list (the element itself at rank 0)."""
    return set(rankings[i][: k + 1])


def k_reciprocal(rankings: list[list[int]], i: int, k: int) -> set[int]:
    """Eq. 3: R(i, k) = {j ∈ N(i, k) | i ∈ N(j, k)}."""
    return {j for j in k_nearest(rankings, i, k) if i in k_nearest(rankings, j, k)}


def expanded_reciprocal(rankings: list[list[int]], i: int, k: int) -> set[int]:
    """Eq. 4: R*(i, k), adding R(q, k/2) for each q ∈ R(i, k) that shares ≥ 2/3 of it with R(i, k)."""
    base = k_reciprocal(rankings, i, k)
    half = round(k / 2)  # Python rounds half to even
    result = set(base)
    for q in base:
        candidate = k_reciprocal(rankings, q, half)
        if len(base & candidate) >= 2 / 3 * len(candidate):
            result |= candidate
    return result


def oracle_rerank(
    distances: Sequence[Sequence[float]],
    *,
    k1: int,
    k2: int,
    lambda_value: float,
    probes: int = 1,
) -> list[list[float]]:
    """d*(p, g) for every probe p (the first ``probes`` members) and every other member g.

    With ``probes = 1`` this is the pool re-ranker: the result's single row holds the candidates.
    """
    size = len(distances)
    k1 = min(k1, size - 1)
    k2 = min(k2, k1)
    d = scaled_distances(distances)
    rankings = [ranking_list(d, i) for i in range(size)]

    features: list[list[float]] = []
    for i in range(size):
        members = expanded_reciprocal(rankings, i, k1)
        row = [math.exp(-d[i][j]) if j in members else 0.0 for j in range(size)]
        total = sum(row)
        if total > 0:
            row = [value / total for value in row]
        features.append(row)

    if k2 > 1:
        averaged = []
        for i in range(size):
            neighbours = rankings[i][:k2]
            averaged.append([sum(features[g][j] for g in neighbours) / len(neighbours) for j in range(size)])
        features = averaged

    result = []
    for p in range(probes):
        row = []
        for g in range(probes, size):
            low = 0.0
            high = 0.0
            for j in range(size):
                low += min(features[p][j], features[g][j])
                high += max(features[p][j], features[g][j])
            jaccard = 1.0 - low / high if high > 0 else 1.0
            row.append((1 - lambda_value) * jaccard + lambda_value * d[p][g])
        result.append(row)
    return result
