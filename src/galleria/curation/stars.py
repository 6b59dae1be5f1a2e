"""The pure core of duplicate groups: star groups around representatives, from a neighbour graph.

No file, no store: arrays in, groups out (:mod:`galleria.curation.dedup` is the shell).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["involved_rows", "star_groups", "twin_classes", "with_pairs"]


def twin_classes(digests: np.ndarray | None, n: int) -> np.ndarray:
    """Each row's class of identical non-zero digests (−1: unknown digest)."""
    classes = np.full(n, -1, dtype=np.int64)
    if digests is None:
        return classes
    known = np.flatnonzero(np.any(digests != 0, axis=1))
    if known.size:
        keys = np.ascontiguousarray(digests[known]).view(np.dtype((np.void, digests.shape[1]))).ravel()
        _, inverse = np.unique(keys, return_inverse=True)
        classes[known] = inverse.ravel()
    return classes


def involved_rows(
    ids: np.ndarray, distances: np.ndarray, threshold: float, digests: np.ndarray | None
) -> np.ndarray:
    """The rows that may belong to a group: a neighbour within ``threshold``, or a digest shared."""
    n = ids.shape[0]
    close = (distances <= threshold) & (ids >= 0)
    marked = np.zeros(n, dtype=bool)
    marked[np.any(close, axis=1)] = True
    marked[ids[close].astype(np.int64)] = True
    classes = twin_classes(digests, n)
    if np.any(classes >= 0):
        counts = np.bincount(classes[classes >= 0])
        marked[(classes >= 0) & (counts[np.maximum(classes, 0)] > 1)] = True
    return np.flatnonzero(marked)


def star_groups(
    order: np.ndarray,
    ids: np.ndarray,
    distances: np.ndarray,
    threshold: float,
    digests: np.ndarray | None = None,
    within: Callable[[int], tuple[np.ndarray, np.ndarray]] | None = None,
    accept: Callable[[int, int, float], bool] | None = None,
    saturated: float | None = None,
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Star groups: ``(representative, members, distances)`` per group of two or more.

    ``order`` ranks the rows best first (the rows it leaves out never represent a group, but may
    join one); ``ids`` / ``distances`` are the (n, k) neighbour graph, each row sorted by distance
    (ids −1 ignored); ``digests`` optional (n, d) uint8 pixel digests (all-zero: unknown). In
    ``order``, a row not yet taken represents a group and takes every row not yet taken within
    ``threshold`` of it — or of its pixels — with its distance (0 for the same pixels). A row whose
    k neighbours all lie within the threshold may have more: ``within(row)`` then gives every row
    and distance within the threshold (an exhaustive search; without it, the k neighbours). With
    ``accept``, a row within the threshold is taken only if ``accept(representative, row, distance)``
    (the threshold is then the radius searched, the check decides). ``saturated`` (default: the
    threshold): how close a row's k-th neighbour must be for ``within`` to be asked.

    ``members`` holds the taken rows (the representative not among them) ascending, ``distances``
    theirs to the representative; groups are listed largest first, then in ``order``.

    Examples
    --------
    A chain 0 – 1 – 2 (0.04 apart each, 0.08 end to end) at threshold 0.05, 1 ranked first:

    >>> ids = np.array([[1, 2], [0, 2], [1, 0]])
    >>> gaps = np.array([[0.04, 0.08], [0.04, 0.04], [0.04, 0.08]])
    >>> [(rep, found.tolist()) for rep, found, _ in star_groups(np.array([1, 0, 2]), ids, gaps, 0.05)]
    [(1, [0, 2])]
    >>> [(rep, found.tolist()) for rep, found, _ in star_groups(np.array([0, 1, 2]), ids, gaps, 0.05)]
    [(0, [1])]
    """
    n = ids.shape[0]
    saturated = threshold if saturated is None else min(saturated, threshold)
    taken = np.zeros(n, dtype=bool)
    classes = twin_classes(digests, n)
    twins = _twins(classes)
    width = ids.shape[1]
    groups: list[tuple[int, int, np.ndarray, np.ndarray]] = []
    for position, row in enumerate(np.asarray(order, dtype=np.int64).tolist()):
        if taken[row]:
            continue
        taken[row] = True
        near, gaps = ids[row], distances[row]
        if within is not None and width and width < n - 1 and gaps[-1] <= saturated and near[-1] >= 0:
            near, gaps = within(row)  # every neighbour may be a copy: there may be more
        found = _claim(row, near, gaps, threshold, taken, classes, twins, accept)
        if not found:
            continue
        members = np.array(sorted(found), dtype=np.int64)
        taken[members] = True
        groups.append(
            (position, row, members, np.array([found[m] for m in members.tolist()], dtype=np.float64))
        )
    groups.sort(key=lambda group: (-group[2].size, group[0]))
    return [(row, members, gaps) for _, row, members, gaps in groups]


def _twins(classes: np.ndarray) -> dict[int, np.ndarray]:
    """The rows of each digest class holding two rows or more."""
    twins: dict[int, np.ndarray] = {}
    if np.any(classes >= 0):
        listed = np.flatnonzero(classes >= 0)
        by_class = listed[np.argsort(classes[listed], kind="stable")]
        bounds = np.flatnonzero(np.diff(classes[by_class])) + 1
        for rows in np.split(by_class, bounds):
            if rows.size > 1:
                twins[int(classes[rows[0]])] = rows
    return twins


def _claim(
    row: int,
    near: Any,
    gaps: Any,
    threshold: float,
    taken: np.ndarray,
    classes: np.ndarray,
    twins: dict[int, np.ndarray],
    accept: Callable[[int, int, float], bool] | None,
) -> dict[int, float]:
    """The rows ``row`` takes as its copies (row → distance): its twins, then its near rows."""
    found: dict[int, float] = {}
    own = twins.get(int(classes[row])) if classes[row] >= 0 else None
    if own is not None:
        for twin in own.tolist():
            if not taken[twin]:
                found[twin] = 0.0
    for other, gap in zip(np.asarray(near).tolist(), np.asarray(gaps).tolist(), strict=True):
        if other < 0 or other == row or gap > threshold or taken[other] or other in found:
            continue
        if accept is not None and not accept(row, other, float(gap)):
            continue
        found[other] = max(float(gap), 0.0)
        kin = twins.get(int(classes[other])) if classes[other] >= 0 else None
        if kin is not None:  # the same pixels as a copy: the same copy
            for twin in kin.tolist():
                if twin != row and not taken[twin] and twin not in found:
                    found[twin] = found[other]
    return found


def with_pairs(
    ids: np.ndarray,
    distances: np.ndarray,
    radius: float,
    first: np.ndarray,
    second: np.ndarray,
    gaps: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The candidate lists: each row's neighbours within ``radius`` and the extra pairs, both ways.

    ``ids`` / ``distances`` are the (n, k) neighbour graph; ``first``, ``second``, ``gaps`` extra pairs
    (rows and their distance; found by another means, at any distance). Returns (n, w) arrays, each
    row's candidates once, nearest first (ties: the lower row), padded with −1 / inf.

    Examples
    --------
    >>> ids, gaps = np.array([[1], [0], [0]]), np.array([[0.01], [0.01], [0.5]])
    >>> near, far = with_pairs(ids, gaps, 0.1, np.array([0]), np.array([2]), np.array([0.5]))
    >>> near.tolist(), far.tolist()
    ([[1, 2], [0, -1], [0, -1]], [[0.01, 0.5], [0.01, inf], [0.5, inf]])
    """
    n = ids.shape[0]
    rows = np.repeat(np.arange(n, dtype=np.int64), ids.shape[1])
    cols = ids.astype(np.int64).ravel()
    values = distances.astype(np.float64).ravel()
    keep = (cols >= 0) & (values <= radius) & (cols != rows)
    first, second = np.asarray(first, np.int64), np.asarray(second, np.int64)
    extra = np.asarray(gaps, np.float64)
    own = first != second
    rows = np.concatenate([rows[keep], first[own], second[own]])
    cols = np.concatenate([cols[keep], second[own], first[own]])
    values = np.concatenate([values[keep], extra[own], extra[own]])
    order = np.lexsort((cols, values, rows))
    rows, cols, values = rows[order], cols[order], values[order]
    fresh = np.ones(rows.size, dtype=bool)
    if rows.size:  # the same pair twice (a neighbour found both ways): its first, nearest, entry
        pair = rows * n + cols
        _, first_seen = np.unique(pair, return_index=True)
        fresh[:] = False
        fresh[first_seen] = True
    rows, cols, values = rows[fresh], cols[fresh], values[fresh]
    counts = np.bincount(rows, minlength=n)
    width = max(1, int(counts.max()) if counts.size else 1)
    near = np.full((n, width), -1, dtype=np.int64)
    far = np.full((n, width), np.inf)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    place = np.arange(rows.size) - starts[rows]
    near[rows, place], far[rows, place] = cols, values
    return near, far
