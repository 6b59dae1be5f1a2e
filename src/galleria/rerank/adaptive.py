"""Re-ranking parameters read from the gallery itself: no labels, no paper constants.

The paper values of every re-ranker (k-reciprocal's k1 = 20, k2 = 6, λ = 0.3; αQE's n = 50...)
assume a gallery where each image has a few dozen same-class neighbours. A gallery of clip art with
five images per class, or one dominated by a single class, pulls the expanded queries and the
reciprocal neighbourhoods into the wrong class. This module estimates, from the gallery's vectors
alone, how large and how trustworthy a neighbourhood is, and turns the estimate into parameters:

1. :func:`gallery_statistics` samples up to :data:`SAMPLE` gallery items (seeded), queries each
   against the rest, and counts its *mutual* neighbours among its first k (j is in i's first k and
   i is in j's first k), for k in :data:`PROBE_KS`. Same-class images tend to be mutual neighbours;
   a stray match from a dominant class or a hub rarely is. Per k it keeps the mean share of mutual
   neighbours (how reliable a neighbourhood of size k is) and the median count (how many same-class
   images a query can lean on).
2. :func:`params_from_statistics` maps the statistics to every method's parameters; the rules and
   their reasoning are in its docstring and in ``docs/reranking.md``. In short: every method has
   one parameter that mixes its re-ranking with the original order (λ, the diffusions' α, the
   expansion weights' exponent); it is set from the mutual share, neighbourhood sizes from the
   mutual count, methods that move vectors (DBA, the GNN's aggregation) act only where a majority
   of neighbours are mutual, and a gallery without reciprocal structure gets (nearly) the plain
   order back. The targets, measured on real galleries without labels reaching the rules
   (``benchmarks/bench_real.py``): Recall@1 not lower by more than 0.01, mAP@100 not lower.

Both are pure functions on arrays and records; :func:`default_rerank_params` is the shell that reads
(or computes and caches) the statistics of a store. A store records its statistics when it is built
and writes them into its file; :meth:`GalleryStatistics.from_record` checks such a record (bounded,
every field typed) before anything uses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from galleria._validation import check_choice, check_positive_int, is_int
from galleria.rerank._common import stable_smallest

__all__ = [
    "AQE_PAPER_PARAMS",
    "PAPER_PARAMS",
    "PRESETS",
    "PROBE_KS",
    "SAMPLE",
    "GalleryStatistics",
    "default_rerank_params",
    "gallery_statistics",
    "paper_params",
    "params_from_statistics",
    "read_statistics",
    "store_statistics",
]

#: Neighbourhood sizes at which reciprocity is measured.
PROBE_KS: tuple[int, ...] = (5, 10, 20)
#: Gallery items sampled as probes (all of them in a smaller gallery).
SAMPLE = 200
#: Version of the statistics record (store files carry it).
RECORD_VERSION = 1
#: The preset names: ``"adaptive"`` (from the gallery; the default) and ``"paper"`` (the published values).
PRESETS: tuple[str, ...] = ("adaptive", "paper")
#: The published parameters of αQE and every re-ranker (derived from the declarations on first use).
PAPER_PARAMS: dict[str, dict[str, Any]]
#: αQE's published parameters (the re-rankers' are declared with them: ``Param.paper``).
AQE_PAPER_PARAMS: dict[str, Any] = {"expansion_alpha": 3.0, "expansion_neighbors": 50}
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
#: The diffusions' α (weight of the walk against the query's own similarities) when they diffuse.
DIFFUSION_ALPHA = 0.9
#: DBA's exponent of the neighbour weights ``cos ** α`` when it augments (the paper's 3 moves an
#: item by half a neighbour at cos 0.8; 10 by a tenth).
DBA_ALPHA = 10.0
#: DBA's exponent where the gallery does not support augmentation: every weight ``cos ** 1000`` is
#: negligible unless the neighbour is a near copy (0.37 at cos 0.999, 4e-5 at 0.99).
DBA_OFF_ALPHA = 1000.0
#: The GNN's weight of the original similarity below :data:`MAJORITY`.
GNN_MINORITY_LAMBDA = 0.9
#: A neighbourhood spans at most ``n_items // ROOM_SHARE`` items (a tenth of the gallery): the
#: statistics are read at the largest probe size within it, and every neighbourhood size is capped
#: by it (galleries of fewer than 200 items only; larger ones read k = 20 as before).
ROOM_SHARE = 10


def _clip(value: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(value))))


def params_from_statistics(stats: GalleryStatistics) -> dict[str, dict[str, Any]]:
    """Every method's parameters for a gallery with these statistics (keys as :data:`PAPER_PARAMS`).

    With ``m`` the median number of mutual neighbours among a sampled item's first 20 (first 10 or 5
    in a gallery of fewer than 200 or 100 items, where 20 would span more than a tenth of it; every
    neighbourhood size below is then also capped at a tenth of the gallery) (an estimate,
    capped at 20, of how many same-class images a query finds near it) and ``s`` their mean share
    (how far its neighbourhood can be trusted). Each method has one *mixing* parameter that sets how
    much of the original ranking it keeps — k-reciprocal's and the GNN's ``λ``, the diffusions' ``α``,
    DBA's and αQE's weight exponent and neighbour count — and the rules set it from ``s``; the
    neighbourhood sizes follow ``m``. The three guarantees the rules aim at, in order: do nothing
    where the gallery shows no structure; never move the first result on the strength of one
    neighbourhood; spend the rest of the lift only where neighbourhoods are reciprocal.

    * k-reciprocal: ``k1 = clip(2m, 4, 20)`` — the reciprocal sets must be able to hold the
      same-class images but no more: with ``k1`` far above the class size the sets fill with other
      classes, and a dominant class wins (the paper's 20 is reached from ``m = 10``);
      ``k2 = clip(m·s / 2, 2, 6)`` — the local expansion averages ``k2`` neighbours' encodings, so it
      may reach only as far as the *reliable* part of the neighbourhood (``k2 = 1``, no expansion,
      was measured to be worse than 2 on unreliable galleries);
      ``λ = clip(1.3 − 1.4·s, 0.3, 0.9)`` — the less reciprocal the neighbourhoods, the more of the
      original distance is kept (the paper's 0.3 from ``s ≈ 0.71``).
    * αQE: ``n = 2``, ``α = 3``. With at most two matches the first result cannot be overtaken by
      the second (its weight is no smaller), and the expanded query stays within the query's own
      nearest pair; larger ``n`` pulled queries into a dominant class on the stamps.
    * diffusion and decoupled diffusion: ``query_k = 1`` — the query is represented by its best
      match alone; the walk starts there with weight 1 and passes less than that to any other item
      unless it is a hub, so the first result (nearly always) stays where it was and the rest are
      re-ordered by how well they connect to it (the paper's
      ``query_k = 10`` mixes ten sources, and a hub reached from several of them overtakes the
      best match: −0.10 to −0.25 Recall@1 on the stamps and the Lite0 digits);
      ``k = clip(2m, 10, 30)`` graph neighbours (enough to connect a class of ``m`` mutual
      neighbours, few enough not to join classes); ``α = 0.9`` (``0.99`` spreads the walk to the
      graph's hubs; ``0.9`` keeps it near its source), ``γ = 3``; truncation as the paper (1000).
    * GNN: ``k1 = clip(2m, 4, 26)``; at a majority of mutual neighbours (``s ≥`` :data:`MAJORITY`)
      ``k2 = clip(m·s / 2, 1, 7)`` and k-reciprocal's ``λ``; below it the aggregation averages
      neighbours that are mostly not mutual, so it only corrects the original similarity:
      ``k2 = 2``, ``λ =`` :data:`GNN_MINORITY_LAMBDA`.
    * DBA + αQE rewrites the gallery itself, so a wrong neighbourhood moves an item for every query:
      it augments only at a majority of mutual neighbours, ``neighbors = aqe_neighbors =
      clip(m·s / 3, 1, 10)`` with ``α =`` :data:`DBA_ALPHA` (weights ``cos ** 10``: a tenth of a
      neighbour at cos 0.8); below it, one neighbour with ``α =`` :data:`DBA_OFF_ALPHA`, whose weight
      is negligible unless the neighbour is a near copy, and the αQE of one match (which keeps the
      first result).

    Where the gallery shows no neighbourhood structure (fewer than 3 items, ``m <`` :data:`MIN_MUTUAL`
    or ``s <`` :data:`MIN_SHARE`), every method falls back to (nearly) the plain order: k-reciprocal
    and the GNN get ``λ = 1`` (the candidates in their original order), the diffusions ``α = 0``
    (the walk stays at the query's own similarities: the original order), αQE one match, DBA the
    weights of :data:`DBA_OFF_ALPHA`. A default that does nothing is better than one that hurts.

    Examples
    --------
    >>> stats = GalleryStatistics(1000, 200, (5, 10, 20), (0.6, 0.62, 0.65), (3.0, 6.0, 14.0))
    >>> params_from_statistics(stats)["k-reciprocal"]
    {'k1': 20, 'k2': 5, 'lambda_value': 0.39}
    >>> params_from_statistics(stats)["diffusion"]
    {'k': 28, 'query_k': 1, 'alpha': 0.9, 'gamma': 3.0}
    >>> params_from_statistics(GalleryStatistics(2, 0, (), (), ()))["k-reciprocal"]["lambda_value"]
    1.0
    """
    from galleria.rerank.registry import reranker_components

    return {name: _rule(stats, name) for name in ("aqe", *(c.name for c in reranker_components()))}


def _rule(stats: GalleryStatistics, name: str) -> dict[str, Any]:
    """The parameters ``name``'s rule (αQE's here, a re-ranker's in its declaration) gives ``stats``;
    a method without a rule keeps its paper values (or its defaults)."""
    if name == "aqe":
        return {"expansion_alpha": 3.0, "expansion_neighbors": 1 if read_statistics(stats).flat else 2}
    from galleria.rerank.registry import reranker_component

    component = reranker_component(name)
    if component.adaptive is None:
        return component.paper_params() or component.defaults()
    return dict(component.adaptive(stats))


@dataclass(frozen=True)
class Reading:
    """What the rules read from a gallery's statistics (see :func:`params_from_statistics`).

    ``share`` and ``mutual`` are the mean share and median count of mutual neighbors among the
    first 20 (fewer in a small gallery: see ``room``); ``flat``: no structure to lean on;
    ``majority``: most neighbors mutual; ``reach``: ``mutual · share / 2``; ``lam``: k-reciprocal's
    λ rule; ``room``: the most items a neighborhood may span, a tenth of the gallery (at least
    5) — in a small one (Fashion-MNIST with 12 images a class: 120 items) a neighborhood of 20
    reaches past every class, its members are mutual by chance, and sizes read from it overshoot
    the classes. The rules cap their neighborhood sizes at it (:meth:`capped`).
    """

    share: float
    mutual: float
    flat: bool
    majority: bool
    reach: float
    lam: float
    room: int

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
    lam = 1.0 if flat else round(min(0.9, max(0.3, 1.3 - 1.4 * share)), 2)
    return Reading(share, mutual, flat, majority, mutual * share / 2.0, lam, room)


def clip_round(value: float, low: int, high: int) -> int:
    """``value`` rounded and clipped to [low, high] (the rules' neighborhood sizes)."""
    return _clip(value, low, high)


def store_statistics(store: Any) -> GalleryStatistics:
    """The statistics of a store's gallery: the recorded ones while they still describe it, else computed.

    A store records them when it is built (and keeps them in its file); ``add_images`` /
    ``remove_images`` drop them, and the next call computes and records them again.
    """
    from galleria.rerank._consistent import gallery_state, take_snapshot

    recorded = getattr(store, "_rerank_statistics", None)
    if isinstance(recorded, GalleryStatistics) and recorded.n_items == len(store):
        return recorded
    snapshot = take_snapshot(store)  # the vectors of one gallery state
    stats = gallery_statistics(snapshot.vectors, space=store.space)
    with store._lock.writing():
        if gallery_state(store) == snapshot.state:  # kept only while they describe the gallery
            store._rerank_statistics = stats
    return stats


def default_rerank_params(
    store: Any, method: str = "k-reciprocal", preset: str = "adaptive"
) -> dict[str, Any]:
    """The default parameters of ``method`` on ``store``: read from its gallery, or the paper's by name.

    This is the one call behind ``search --rerank``, ``evaluate --rerank``, the page's re-rank box
    and ``KReciprocalReranker(store)`` without parameters.

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        A built store (its vectors are sampled once; the result is cached on the store).
    method : str
        ``"k-reciprocal"``, ``"diffusion"``, ``"decoupled-diffusion"``, ``"gnn"``, ``"dba"`` or
        ``"aqe"``.
    preset : {"adaptive", "paper"}
        ``"paper"`` returns :data:`PAPER_PARAMS` for the method.

    Examples
    --------
    >>> from galleria.store import InMemoryImageEmbeddingStore
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2))
    >>> default_rerank_params(store, preset="paper")
    {'k1': 20, 'k2': 6, 'lambda_value': 0.3}
    """
    name = check_choice("method", method, tuple(paper_params()))
    chosen = check_choice("preset", preset, PRESETS)
    if chosen == "paper":
        return dict(paper_params()[name])
    return _rule(store_statistics(store), name)  # this method's rule only


def paper_params() -> dict[str, dict[str, Any]]:
    """The published parameters of αQE and of every re-ranker, by name (from their declarations)."""
    from galleria.rerank.registry import reranker_components

    result = {"aqe": dict(AQE_PAPER_PARAMS)}
    for component in reranker_components():
        result[component.name] = component.paper_params() or component.defaults()
    return result


def __getattr__(name: str) -> Any:
    # PAPER_PARAMS is derived from the declarations, which import this module: computed on first use.
    if name == "PAPER_PARAMS":
        return paper_params()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
