"""Duplicate and near-duplicate groups of a gallery, from its neighbor graph.

Two images are linked when they are **exact duplicates** (the same decoded pixels: equal pixel
digests, recorded at build — :attr:`~galleria.InMemoryImageEmbeddingStore.pixel_digests`) or
**near-duplicates** (one is among the other's ``k`` nearest neighbors at a distance of at most
``threshold``, in the store's space). A group is a connected component of those links, so a chain
of near copies (a resize of a crop of a photo) is one group. Groups are listed largest first, then
by their first path; every group names the image a ``keep`` rule keeps:

* ``first`` — the first path in sorted order;
* ``largest`` — the largest file (bytes on disk; ties: the first path);
* ``oldest`` — the file modified longest ago (ties: the first path).

The rules only ``stat`` the files (they open none). The default threshold is the embedder's
(:data:`DEFAULT_THRESHOLDS`, measured on planted copies: ``benchmarks/experiments/bench_duplicates.py``).

The core, :func:`group_rows`, works on the graph's arrays: memory grows with the gallery times
``k``, never with the gallery squared.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_K",
    "DEFAULT_THRESHOLDS",
    "KEEP_RULES",
    "DuplicateGroup",
    "check_threshold",
    "default_threshold",
    "duplicate_groups",
    "duplicates",
    "find_duplicates",
    "group_rows",
]

#: Neighbors per image searched for near copies (a group larger than this is still found whole,
#: through its chain of links).
DEFAULT_K = 10
#: The near-duplicate threshold (a cosine distance) per embedder type, measured on Tux Paint's stamps
#: with planted resized, recompressed, 3 %-cropped and colour-shifted copies
#: (``benchmarks/experiments/bench_duplicates.py``; docs/duplicates.md): the smallest threshold of the
#: sweep at which recall and precision both reach 0.95. CLIP's is not measured here (no CLIP weights
#: ship in a package); it takes the CNN's.
DEFAULT_THRESHOLDS: dict[str, float] = {"pixel": 0.1, "timm": 0.15, "clip": 0.15}
#: The threshold of a store whose embedder is unknown (vectors imported from elsewhere).
FALLBACK_THRESHOLD = 0.1
#: How ``keep`` chooses the image kept in each group.
KEEP_RULES = ("first", "largest", "oldest")


def check_threshold(value: Any) -> float:
    """A near-duplicate threshold: a number in [0, 2] (TypeError / ValueError naming it otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"threshold must be a number in [0, 2], got {value!r} ({type(value).__name__})")
    number = float(value)
    if not 0.0 <= number <= 2.0:  # NaN fails too
        raise ValueError(f"threshold must lie in [0, 2], got {value!r}")
    return number


def default_threshold(embedder_config: Any) -> float:
    """The threshold of the embedder a store records (its config's ``type``), else the fallback."""
    kind = embedder_config.get("type") if isinstance(embedder_config, dict) else None
    return DEFAULT_THRESHOLDS.get(kind, FALLBACK_THRESHOLD) if isinstance(kind, str) else FALLBACK_THRESHOLD


def _exact_links(digests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, row) pairs linking every image to the first image of the same non-zero digest."""
    known = np.flatnonzero(np.any(digests != 0, axis=1))
    if known.size < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    keys = np.ascontiguousarray(digests[known]).view(np.dtype((np.void, digests.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    heads = known[first[inverse.ravel()]]
    linked = heads != known
    return known[linked], heads[linked]


def group_rows(
    n: int,
    ids: np.ndarray,
    distances: np.ndarray,
    threshold: float,
    digests: np.ndarray | None = None,
) -> list[tuple[np.ndarray, bool]]:
    """The duplicate groups of ``n`` rows: ``(rows, exact)`` per group of two or more, the largest
    group first (ties: the lower first row); ``rows`` ascending; ``exact`` when all share a digest.

    ``ids`` / ``distances`` are the (n, k) neighbor graph (ids −1 are ignored); ``digests`` an
    optional (n, d) uint8 array of pixel digests (an all-zero row: unknown).

    Examples
    --------
    >>> ids = np.array([[1], [0], [3], [2]]); distances = np.array([[0.01], [0.01], [0.5], [0.5]])
    >>> [(rows.tolist(), exact) for rows, exact in group_rows(4, ids, distances, 0.05)]
    [([0, 1], False)]
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    close = (distances <= threshold) & (ids >= 0)
    sources = np.repeat(np.arange(n, dtype=np.int64), ids.shape[1])[close.ravel()]
    targets = ids.astype(np.int64).ravel()[close.ravel()]
    if digests is not None:
        more_sources, more_targets = _exact_links(digests)
        sources, targets = np.concatenate([sources, more_sources]), np.concatenate([targets, more_targets])
    if sources.size == 0:
        return []
    links = coo_matrix((np.ones(sources.size, dtype=np.int8), (sources, targets)), shape=(n, n))
    _, component = connected_components(links, directed=True, connection="weak")
    sizes = np.bincount(component)
    order = np.argsort(component, kind="stable")
    bounds = np.cumsum(sizes)[:-1]
    groups = [rows for rows in np.split(order, bounds) if rows.size > 1]
    groups.sort(key=lambda rows: (-rows.size, int(rows[0])))
    result = []
    for rows in groups:
        exact = (
            digests is not None
            and bool(np.any(digests[rows[0]] != 0))
            and bool(np.all(digests[rows] == digests[rows[0]]))
        )
        result.append((rows, exact))
    return result


def _stat_key(path: str, rule: str) -> tuple[float, str]:
    try:
        status = os.stat(path)
    except OSError:
        return (float("inf"), path)  # a file that is gone is never the one kept
    return (-float(status.st_size), path) if rule == "largest" else (float(status.st_mtime_ns), path)


def keep_of(paths: Sequence[str], rule: str) -> str:
    """The path ``rule`` (one of :data:`KEEP_RULES`) keeps among ``paths``."""
    if rule == "first":
        return min(paths)
    return min(paths, key=lambda path: _stat_key(path, rule))


@dataclass(frozen=True)
class DuplicateGroup:
    """One group: its paths (sorted), whether all are the same pixels, and the path to keep."""

    paths: tuple[str, ...]
    exact: bool
    keep: str

    def to_dict(self) -> dict[str, Any]:
        return {"paths": list(self.paths), "kind": "exact" if self.exact else "near", "keep": self.keep}


def duplicates(
    store: Any,
    *,
    threshold: Any = None,
    k: Any = DEFAULT_K,
    keep: str = "first",
    store_file: Any = None,
) -> list[DuplicateGroup]:
    """The duplicate groups of ``store``'s gallery (see the module docstring).

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        A built store.
    threshold : float in [0, 2], optional
        The largest distance of a near copy; None: the store's embedder's default.
    k : int
        Neighbors searched per image (the graph's ``k``).
    keep : {"first", "largest", "oldest"}
        Which image each group keeps.
    store_file : str, optional
        The store's file: its neighbor graph is then kept beside it (``STORE.graph``).

    Raises
    ------
    TypeError, ValueError
        A threshold outside [0, 2], a bad ``k`` or ``keep``, naming the value.
    """
    from galleria._validation import check_choice
    from galleria.store.graph import neighbor_graph

    rule = check_choice("keep", keep, KEEP_RULES)
    if threshold is None:
        from galleria.embedders import embedder_config

        embedder = getattr(store, "embedder", None)
        value = default_threshold(embedder_config(embedder) if embedder is not None else None)
    else:
        value = check_threshold(threshold)
    paths = list(store.paths)
    if len(paths) < 2:
        return []
    ids, distances = neighbor_graph(store, k, store_file=store_file)
    digests = getattr(store, "pixel_digests", None)
    return [
        DuplicateGroup(
            tuple(paths[row] for row in rows),
            exact,
            keep_of([paths[row] for row in rows], rule),
        )
        for rows, exact in group_rows(len(paths), ids, distances, value, digests)
    ]


#: Other names of :func:`duplicates` (``galleria.duplicates`` is the public one).
duplicate_groups = find_duplicates = duplicates
