"""The candidate pairs of duplicate groups: the store's near neighbours and the pictures' fingerprint pairs.

The shell around :func:`galleria.curation.stars.with_pairs` and :mod:`galleria.curation.verify`: it
reads the store's vectors (for an exhaustive search near a row, and the distances of fingerprint
pairs) and asks a :class:`~galleria.curation.verify.PictureCheck` for fingerprint pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from galleria.curation.stars import with_pairs
from galleria.curation.verify import PictureCheck

__all__ = ["candidates", "within_search"]


def within_search(store: Any, threshold: float) -> Callable[[int], tuple[np.ndarray, np.ndarray]]:
    """Every row within ``threshold`` of one row: a search of the whole gallery (rarely wanted)."""
    space = store.space
    held: list[np.ndarray] = []

    def search(row: int) -> tuple[np.ndarray, np.ndarray]:
        from galleria.store.graph import _rows_and_vectors

        if not held:  # read once, when first wanted: a read-only view, not a copy, where it can be
            held.append(_rows_and_vectors(store)[1])
        vectors = held[0]
        start, chunk = 0, 65536
        rows, gaps = [], []
        target = vectors[row]
        while start < len(vectors):
            block = vectors[start : start + chunk]
            if space == "l2":
                distance = np.sum((block - target) ** 2, axis=1)
            else:
                distance = 1.0 - block @ target
            hit = np.flatnonzero(distance <= threshold)
            rows.append(hit + start)
            gaps.append(distance[hit])
            start += chunk
        found, values = np.concatenate(rows), np.concatenate(gaps)
        order = np.lexsort((found, values))
        return found[order], values[order]

    return search


def _with_fingerprints(
    store: Any,
    ids: np.ndarray,
    distances: np.ndarray,
    radius: float,
    value: float,
    pictures: PictureCheck,
    search: Callable[[int], tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, int]:
    """The candidate lists with the pictures' fingerprint pairs added (their distances in the store's
    space) and, for a row whose k neighbours all lie within the threshold, every row within the radius;
    and how many fingerprint pairs there were."""
    from galleria.store.graph import _rows_and_vectors

    n = ids.shape[0]
    first, second = pictures.fingerprint_pairs(np.arange(n))
    found = int(first.size)
    full = (ids.shape[1] < n - 1) & (ids[:, -1] >= 0) & (distances[:, -1] <= value)
    for row in np.flatnonzero(full).tolist():  # maybe more copies than k: search them all
        near, _ = search(row)
        near = near[near != row]
        first = np.concatenate([first, np.full(near.size, row, np.int64)])
        second = np.concatenate([second, near.astype(np.int64)])
    if first.size == 0:
        return *with_pairs(ids, distances, radius, first, second, np.empty(0)), found
    vectors = _rows_and_vectors(store)[1]
    one, other = np.asarray(vectors[first], np.float64), np.asarray(vectors[second], np.float64)
    if store.space == "l2":
        gaps = np.sum((one - other) ** 2, axis=1)
    else:
        gaps = np.clip(1.0 - np.sum(one * other, axis=1), 0.0, 2.0)
    return *with_pairs(ids, distances, radius, first, second, gaps), found


def candidates(
    store: Any,
    ids: np.ndarray,
    distances: np.ndarray,
    radius: float,
    value: float,
    pictures: PictureCheck | None,
) -> tuple[np.ndarray, np.ndarray, float, float | None, Any, int]:
    """What :func:`star_groups` searches: the candidate lists, their radius, the saturation level and
    exhaustive search, and the fingerprint pairs found (with ``pictures``: fingerprints are made)."""
    search = within_search(store, radius)
    if pictures is None:
        return ids, distances, radius, value, search, 0
    # candidates from the pictures too: the vectors may place a copy far from its original
    ids, distances, found_pairs = _with_fingerprints(store, ids, distances, radius, value, pictures, search)
    return ids, distances, float("inf"), None, None, found_pairs
