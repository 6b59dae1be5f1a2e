"""A gallery's reciprocal-neighbour statistics: pure functions on its vectors.

:func:`gallery_statistics` samples up to :data:`SAMPLE` gallery items (seeded), queries each against the
rest, and counts its *mutual* neighbours among its first k (j is in i's first k and i is in j's first k),
for k in :data:`PROBE_KS`. Per k it keeps the mean share of mutual neighbours and the median count.
The store records them when it is built and keeps them in its file (:meth:`GalleryStatistics.record`,
checked on load by :meth:`GalleryStatistics.from_record`); the adaptive re-ranking rules
(:mod:`galleria.rerank.adaptive`) turn them into parameters. This module sits on the ground floor
(see ``docs/architecture.md``), so the store and the re-rankers both use it without importing each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from galleria._validation import check_choice, check_positive_int, is_int
from galleria.vectors import stable_smallest

__all__ = [
    "EXPAND_RISE",
    "EXPAND_SHARE",
    "FIRST_RISE",
    "FIRST_SHARE",
    "LAMBDA_AT_ZERO",
    "LAMBDA_HIGH",
    "LAMBDA_LOW",
    "MAJORITY",
    "MIN_MUTUAL",
    "MIN_SHARE",
    "PROBE_KS",
    "RECORD_VERSION",
    "ROOM_SHARE",
    "SAMPLE",
    "GalleryStatistics",
    "Reading",
    "clip_round",
    "gallery_statistics",
    "read_statistics",
]

#: Neighbourhood sizes at which reciprocity is measured.
PROBE_KS: tuple[int, ...] = (5, 10, 20)
#: Gallery items sampled as probes (all of them in a smaller gallery).
SAMPLE = 200
#: Version of the statistics record (store files carry it).
RECORD_VERSION = 1
_MAX_ITEMS = 1 << 40
_BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class GalleryStatistics:
    """Reciprocal-neighbour statistics of a gallery (see the module docstring).

    ``ks[i]`` is a neighbourhood size; ``share[i]`` the mean share of mutual neighbours among a
    sampled item's first ``ks[i]``, in [0, 1]; ``median[i]`` their median count, in [0, ks[i]].
    ``n_sample`` is 0 (and the tuples empty) for a gallery of fewer than 3 items.
    """

    n_items: int
    n_sample: int
    ks: tuple[int, ...]
    share: tuple[float, ...]
    median: tuple[float, ...]

    def record(self) -> dict[str, Any]:
        """The JSON-able record a store file keeps."""
        return {
            "version": RECORD_VERSION,
            "n_items": self.n_items,
            "n_sample": self.n_sample,
            "ks": list(self.ks),
            "share": [round(value, 6) for value in self.share],
            "median": [float(value) for value in self.median],
        }

    @classmethod
    def from_record(cls, record: Any) -> GalleryStatistics:
        """Check a record (from a store file: untrusted) and return its statistics.

        Raises
        ------
        ValueError
            Anything but ``{"version": 1, "n_items", "n_sample", "ks", "share", "median"}`` with
            integers in range, 1–8 increasing neighbourhood sizes below ``n_items``, shares in
            [0, 1] and medians in [0, k].
        """
        keys = {"version", "n_items", "n_sample", "ks", "share", "median"}
        if not isinstance(record, dict) or set(record) != keys:
            raise ValueError(f"the re-ranking statistics must be an object with exactly {sorted(keys)}")
        if record["version"] != RECORD_VERSION or isinstance(record["version"], bool):
            raise ValueError(f"the re-ranking statistics have version {record['version']!r}, not 1")
        n_items, n_sample = record["n_items"], record["n_sample"]
        for name, value in (("n_items", n_items), ("n_sample", n_sample)):
            if not is_int(value) or not 0 <= value <= _MAX_ITEMS:
                raise ValueError(f"the re-ranking statistics' {name} must be a count, got {value!r}")
        ks, share, median = record["ks"], record["share"], record["median"]
        if not all(isinstance(v, list) and len(v) <= 8 for v in (ks, share, median)):
            raise ValueError("the re-ranking statistics' ks, share, median must be lists of at most 8")
        if not len(ks) == len(share) == len(median) or (n_sample == 0) != (len(ks) == 0):
            raise ValueError("the re-ranking statistics' ks, share and median must have one entry per k")
        if n_sample > n_items:
            raise ValueError(f"the re-ranking statistics sample {n_sample} of {n_items} items")
        if not all(is_int(k) and 1 <= k < max(n_items, 2) for k in ks) or ks != sorted(set(ks)):
            raise ValueError(f"the re-ranking statistics' ks must increase within the gallery, got {ks!r}")
        for k, s, m in zip(ks, share, median, strict=True):
            if not (_real(s) and 0.0 <= s <= 1.0 and _real(m) and 0.0 <= m <= k):
                raise ValueError(f"the re-ranking statistics at k={k} are out of range: {s!r}, {m!r}")
        return cls(
            int(n_items),
            int(n_sample),
            tuple(int(k) for k in ks),
            tuple(float(s) for s in share),
            tuple(float(m) for m in median),
        )

    def at(self, k: int) -> tuple[float, float]:
        """``(share, median)`` at the largest measured neighbourhood size not above ``k``."""
        chosen = [i for i, size in enumerate(self.ks) if size <= k] or [0]
        return self.share[chosen[-1]], self.median[chosen[-1]]


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _scores(vectors: np.ndarray, rows: np.ndarray, space: str) -> np.ndarray:
    """Similarity-like scores of ``rows`` against every vector, higher nearer, in ``space``."""
    block: np.ndarray = vectors[rows] @ vectors.T
    if space == "l2":  # -|a - b|^2 / 2 up to a per-row constant
        block -= 0.5 * np.einsum("ij,ij->i", vectors, vectors)[None, :]
    block[np.arange(len(rows)), rows] = -np.inf  # an item is not its own neighbour
    return block


def _neighbours(vectors: np.ndarray, rows: np.ndarray, k: int, space: str) -> np.ndarray:
    """The first ``k`` neighbours of each of ``rows`` (self excluded; ties to the lower index)."""
    result = np.empty((len(rows), k), dtype=np.int64)
    step = max(1, _BLOCK_ELEMENTS // max(1, len(vectors)))
    for start in range(0, len(rows), step):
        part = rows[start : start + step]
        result[start : start + step] = stable_smallest(-_scores(vectors, part, space), k)
    return result


def gallery_statistics(
    vectors: Any, *, space: str = "cosine", sample: int = SAMPLE, seed: int = 0
) -> GalleryStatistics:
    """Reciprocal-neighbour statistics of a gallery's vectors (see the module docstring).

    Parameters
    ----------
    vectors : (n, d) array
        The gallery vectors, as the store's space keeps them (unit rows for ``"cosine"``).
    space : {"cosine", "ip", "l2"}
        Nearness: inner product (cosine, ip) or Euclidean distance (l2).
    sample : int
        How many items are probed (all of them when the gallery is smaller).
    seed : int
        Seed of the sample.

    Examples
    --------
    >>> pairs = np.repeat(np.eye(4), 6, axis=0) + 0.01 * np.arange(24)[:, None]
    >>> stats = gallery_statistics(pairs)
    >>> stats.ks, stats.share[0]
    ((5, 10, 20), 1.0)
    """
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2 or not np.isfinite(array).all():
        raise ValueError(f"vectors must be a finite (n, d) array, got shape {array.shape}")
    check_choice("space", space, ("cosine", "ip", "l2"))
    count = check_positive_int("sample", sample)
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    n = array.shape[0]
    if n < 3:
        return GalleryStatistics(n, 0, (), (), ())
    depth = min(max(PROBE_KS), n - 1)
    ks = tuple(k for k in PROBE_KS if k <= depth) or (depth,)
    rng = np.random.default_rng(int(seed))
    rows = np.sort(rng.choice(n, size=min(count, n), replace=False))
    lists = _neighbours(array, rows, depth, space)  # (S, depth)
    others = np.unique(lists)
    their = _neighbours(array, others, depth, space)  # (U, depth)
    lookup = np.searchsorted(others, lists)  # row of each neighbour in `their`
    # position of the probe in each neighbour's list (depth when absent)
    found = their[lookup] == rows[:, None, None]  # (S, depth, depth)
    position = np.where(found.any(axis=2), found.argmax(axis=2), depth)
    shares, medians = [], []
    for k in ks:
        mutual = (position[:, :k] < k).sum(axis=1)
        shares.append(round(float(np.mean(mutual) / k), 6))
        medians.append(float(np.median(mutual)))
    return GalleryStatistics(n, len(rows), ks, tuple(shares), tuple(medians))


#: Below this median count of mutual neighbours among the first 20, a gallery has no neighbourhood
#: structure to lean on, and the defaults do not re-rank (λ = 1, diffusion α = 0...).
MIN_MUTUAL = 2.0
#: Below this share of mutual neighbours, likewise.
MIN_SHARE = 0.25
#: The share of mutual neighbours from which a neighbourhood is trusted to *move vectors*: a majority
#: of an item's first 20 are mutual. DBA (which rewrites the gallery) and the GNN's aggregation
#: (which averages neighbours' similarity rows) change only by small amounts below it.
MAJORITY = 0.5
#: The mixing weight of the original distance (k-reciprocal's and the GNN's λ) is
#: ``clip(LAMBDA_AT_ZERO − 1.4·s, LAMBDA_LOW, LAMBDA_HIGH)``: the less reciprocal the neighbourhoods, the
#: more of the original order is kept. Fitted on the corpus's fitting galleries (digits, stamps, icons;
#: ``benchmarks/suites/bench_defaults.py``): below 0.55 the Jaccard term decides the first result on its
#: own, and Recall@1 fell by 0.01–0.03 on galleries of small or loose classes (galleria 0.2's 0.3 floor).
LAMBDA_LOW = 0.55
LAMBDA_HIGH = 0.9
LAMBDA_AT_ZERO = 1.45
#: Unless a majority of an item's first five neighbours are mutual, its nearest matches are too often
#: of another class to pull a query towards them: αQE (and DBA's expansion) keep the query where it is.
#: Fitted on the corpus's fitting galleries: αQE lowered mAP@100 on the Lite0 digits (share 0.42–0.46)
#: and lifted it on the Lite0 stamps and icons (0.53–0.58).
FIRST_SHARE = 0.5
#: ... and only where neighbourhoods grow more reciprocal from the first five to the first 20 (by at
#: least this share): classes larger than a few images. Where the share stays flat, the mutual first
#: neighbours are as often of a look-alike class (icons drawn in one theme's style): on freedesktop
#: icons of 5–8 per class with Lite0 (share 0.57 at 5 and at 20, Recall@1 0.40) every method that
#: leans on the first match lowered mAP@100 (the diffusions by 0.02–0.03); on the stamps (+0.04–0.06)
#: and the digits (+0.13) it lifted it.
FIRST_RISE = 0.02
#: The methods that average an item with several of its neighbours — k-reciprocal's local expansion
#: (k2), the GNN's aggregation, DBA's augmentation — reach past the first neighbour only where the
#: mutual share grows by at least this much from the first five to the first 20 (classes large and
#: coherent enough that the 2nd to 5th neighbours are of the item's class), or is at least
#: :data:`EXPAND_SHARE`. Elsewhere they average the first neighbour alone (k2 = 2, DBA one neighbour),
#: and the 2nd to 5th neighbours, as often of a look-alike class, stay out. Fitted on the corpus's
#: fitting galleries (``benchmarks/experiments/sweep_defaults.py``): on the pixel digits (rise 0.12–0.13
#: over three splits) k2 = 5 lifts mAP@100 by 0.097 and k2 = 2 by 0.074; on the Lite0 stamps (rise
#: 0.04–0.06, share 0.59–0.61) k2 = 2 and 4 lift it alike (0.062, 0.060), as do the GNN's k2 = 2 and 4
#: (0.064) and DBA's one to three neighbours (0.019); 0.09 lies between the two.
EXPAND_RISE = 0.09
#: ... or where the share is at least this high (see :data:`EXPAND_RISE`). Fitted on the pixel digits
#: cut to 20 images a class (``sweep_defaults.py --per-class 20``: share 0.72–0.75, rise 0.07–0.09, as
#: neighbourhoods fill their class): k2 = 4 lifted mAP@100 by 0.114, k2 = 2 by 0.099; 0.66 lies
#: between that and the Lite0 stamps' 0.61.
EXPAND_SHARE = 0.66
#: A neighbourhood spans at most ``n_items // ROOM_SHARE`` items (a tenth of the gallery): the
#: statistics are read at the largest probe size within it, and every neighbourhood size is capped
#: by it (galleries of fewer than 200 items only; larger ones read k = 20 as before).
ROOM_SHARE = 10


def _clip(value: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(value))))


@dataclass(frozen=True)
class Reading:
    """What the rules read from a gallery's statistics (see :func:`params_from_statistics`).

    ``share`` and ``mutual`` are the mean share and median count of mutual neighbors among the
    first 20 (fewer in a small gallery: see ``room``); ``flat``: no structure to lean on;
    ``majority``: most neighbors mutual; ``reach``: ``mutual · share / 2``; ``lam``: k-reciprocal's
    λ rule; ``first``: the share among the first five; ``rise``: ``share − first``; ``spreads``: the
    share rises by at least :data:`EXPAND_RISE` or is at least :data:`EXPAND_SHARE` (neighbours past
    the first may be averaged in); ``room``: the most items a neighborhood may span, a tenth of the
    gallery (at least 5) — in a small one (Fashion-MNIST with 12 images a class: 120 items) a
    neighborhood of 20 reaches past every class, its members are mutual by chance, and sizes read
    from it overshoot the classes. The rules cap their neighborhood sizes at it (:meth:`capped`).
    """

    share: float
    mutual: float
    flat: bool
    majority: bool
    reach: float
    lam: float
    room: int
    first: float = 0.0
    rise: float = 0.0
    spreads: bool = False

    def capped(self, value: float, low: int, high: int) -> int:
        """``value`` rounded and clipped to [low, high], then held within ``max(low, room)``."""
        return min(_clip(value, low, high), max(low, self.room))


def read_statistics(stats: GalleryStatistics) -> Reading:
    """The quantities every adaptive rule reads, from ``stats`` (the rules live with their methods).

    Examples
    --------
    >>> read_statistics(GalleryStatistics(2, 0, (), (), ())).flat
    True
    """
    room = max(PROBE_KS[0], stats.n_items // ROOM_SHARE)
    if stats.n_sample == 0:
        share, mutual = 0.0, 0.0
    else:
        share, mutual = stats.at(min(20, room))
    flat = mutual < MIN_MUTUAL or share < MIN_SHARE
    majority = not flat and share >= MAJORITY
    lam = 1.0 if flat else round(min(LAMBDA_HIGH, max(LAMBDA_LOW, LAMBDA_AT_ZERO - 1.4 * share)), 2)
    first = stats.share[0] if stats.n_sample else 0.0  # the share among the first 5 (or fewer)
    rise = round(share - first, 6)
    spreads = not flat and (rise >= EXPAND_RISE or share >= EXPAND_SHARE)
    return Reading(share, mutual, flat, majority, mutual * share / 2.0, lam, room, first, rise, spreads)


def clip_round(value: float, low: int, high: int) -> int:
    """``value`` rounded and clipped to [low, high] (the rules' neighborhood sizes)."""
    return _clip(value, low, high)
