"""The map's projection: t-SNE (openTSNE, the ``map`` extra) on the store's neighbour graph, or PCA.

t-SNE's affinities come from each item's 3 × perplexity nearest neighbours (90 for a gallery of at
least 91 items). For a store in the cosine or l2 space they are the store's one neighbour graph
(:func:`galleria.store.graph.neighbor_graph`: kept in memory or in ``STORE.graph``, built there when
missing, exact up to 100,000 items), with l2 distances as Euclidean (not squared) ones; otherwise, and
for bare vectors, openTSNE searches them itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._progress import Progress
from galleria._validation import check_choice
from galleria.distances import pairwise_distances

__all__ = [
    "MAP_METHODS",
    "PLACE_GRAPH_K",
    "PLACE_NEAREST",
    "PLACE_NEIGHBORS",
    "TSNE_PHASE",
    "TSNE_SAMPLE",
    "map_neighbors",
    "place_along_graph",
    "place_points",
    "project_vectors",
    "sample_rows",
    "sampled_map",
]

#: ``auto``: t-SNE when openTSNE is installed (``galleria[map]``), else PCA.
MAP_METHODS = ("auto", "tsne", "pca")
#: Neighbours per item t-SNE's affinities take (3 × openTSNE's default perplexity of 30).
TSNE_NEIGHBORS = 90
#: t-SNE iterations between two progress reports (each report makes openTSNE compute its error).
TSNE_REPORT_EVERY = 50
#: The phase t-SNE's optimisation reports to ``on_progress`` (iterations).
TSNE_PHASE = "t-SNE"
#: Mapped neighbours whose mean places an image added after the map was drawn.
PLACE_NEIGHBORS = 5
#: A larger gallery is mapped by t-SNE of a seeded sample of this many items; every other item is
#: placed from its neighbours in the store's graph (:func:`place_along_graph`). 0: never sample.
TSNE_SAMPLE = 100_000
#: Neighbours of the store's graph read to place an item outside the sample.
PLACE_GRAPH_K = 30
#: Placed neighbours whose weighted mean places an item outside the sample.
PLACE_NEAREST = 5
#: Rounds of placement along the graph (each round places the items next to those placed before).
PLACE_ROUNDS = 8
#: Rows placed at once (bounds the temporary arrays to a few MB a round).
_PLACE_BLOCK = 1 << 16


class _Iterations:
    """An openTSNE callback that counts the optimisation's iterations (both phases) to ``on_progress``."""

    def __init__(self, on_progress: Progress, total: int) -> None:
        self._on_progress = on_progress
        self._total = total
        self._done = 0

    def __call__(self, iteration: int, error: float, embedding: Any) -> bool:
        self._done = min(self._total, self._done + TSNE_REPORT_EVERY)
        self._on_progress(TSNE_PHASE, self._done, self._total)
        return False  # never stops the optimisation


def _pca(vectors: np.ndarray) -> np.ndarray:
    centred = vectors.astype(np.float64) - vectors.mean(axis=0, dtype=np.float64)
    covariance = centred.T @ centred
    _, axes = np.linalg.eigh(covariance)
    top = axes[:, ::-1][:, :2]
    if top.shape[1] < 2:
        top = np.pad(top, ((0, 0), (0, 2 - top.shape[1])))
    signs = np.sign(top[np.argmax(np.abs(top), axis=0), [0, 1]])  # a deterministic orientation
    signs[signs == 0] = 1.0
    projected: np.ndarray = (centred @ (top * signs)).astype(np.float32)
    return projected


def _tsne(
    vectors: np.ndarray,
    space: str,
    seed: int,
    threads: int,
    neighbors: tuple[np.ndarray, np.ndarray] | None,
    on_progress: Progress | None = None,
) -> np.ndarray:
    from openTSNE import TSNE

    count = vectors.shape[0]
    perplexity = float(min(30.0, max(2.0, (count - 1) / 3.0)))
    model = TSNE(
        n_components=2,
        perplexity=perplexity,
        metric="euclidean" if space == "l2" else "cosine",
        initialization="pca",
        neighbors="exact" if count < 2_000 else "annoy",
        negative_gradient_method="bh" if count < 10_000 else "fft",
        n_jobs=threads,
        random_state=seed,
        verbose=False,
    )
    if on_progress is not None:  # read when the optimisation starts
        model.callbacks = _Iterations(on_progress, model.early_exaggeration_iter + model.n_iter)
        model.callbacks_every_iters = TSNE_REPORT_EVERY
    data = vectors.astype(np.float32)
    if neighbors is None:
        return np.asarray(model.fit(data), dtype=np.float32)
    from openTSNE import affinity, initialization
    from openTSNE.nearest_neighbors import PrecomputedNeighbors

    ids, distances = neighbors
    known = PrecomputedNeighbors(
        np.ascontiguousarray(ids, np.int64), np.ascontiguousarray(distances, np.float64)
    )
    affinities = affinity.PerplexityBasedNN(
        perplexity=perplexity, knn_index=known, n_jobs=threads, random_state=seed, verbose=False
    )
    start = initialization.pca(data, random_state=seed)
    return np.asarray(model.fit(affinities=affinities, initialization=start), dtype=np.float32)


def _tsne_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("openTSNE") is not None


def project_vectors(
    vectors: np.ndarray,
    space: str = "cosine",
    *,
    method: str = "auto",
    seed: int = 0,
    threads: int = 1,
    neighbors: tuple[np.ndarray, np.ndarray] | None = None,
    on_progress: Progress | None = None,
) -> tuple[np.ndarray, str]:
    """The (n, 2) float32 map of ``vectors`` and the method used (``"tsne"`` or ``"pca"``).

    ``neighbors`` (t-SNE only): each row's nearest other rows and their distances, ``(ids,
    distances)`` of shape (n, k), as :func:`map_neighbors` gives them; None lets openTSNE search.
    ``on_progress(phase, done, total)`` (t-SNE only) follows the optimisation's iterations (phase
    :data:`TSNE_PHASE`); it never changes the map.

    ``auto`` uses t-SNE when openTSNE is installed and there are at least 10 vectors, PCA otherwise;
    ``tsne`` without openTSNE raises ImportError naming the extra.

    Examples
    --------
    >>> points, used = project_vectors(np.array([[0.0, 0, 1], [0, 0, 2], [0, 0, 4]]), "l2", method="pca")
    >>> used, points.shape, [round(float(x), 3) for x in points[:, 0]]
    ('pca', (3, 2), [-1.333, -0.333, 1.667])
    """
    chosen = check_choice("method", method, MAP_METHODS)
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError(f"vectors must be a 2-D array, got shape {array.shape}")
    if chosen == "tsne" and not _tsne_available():
        raise ImportError("the t-SNE map needs openTSNE: pip install 'galleria[map]'")
    if chosen == "auto":
        chosen = "tsne" if array.shape[0] >= 10 and _tsne_available() else "pca"
    if array.shape[0] == 0:
        return np.zeros((0, 2), np.float32), chosen
    if chosen == "tsne" and array.shape[0] >= 4:
        return _tsne(array, space, seed, threads, neighbors, on_progress), "tsne"
    return _pca(array), "pca"


def map_neighbors(
    store: Any, rows: Any, method: str, on_progress: Progress | None = None, *, probe: bool = False
) -> tuple[np.ndarray, np.ndarray] | None:
    """t-SNE's neighbours from ``store``'s neighbour graph while its gallery is still ``rows`` (the
    path table the caller read its vectors with): ``(ids, distances)``; None when the map will not
    be a t-SNE, the store's space is neither cosine nor l2, or the gallery changed meanwhile.
    ``on_progress`` follows the graph's build when it is built here. ``probe=True`` only says
    whether there would be such neighbours (empty arrays) and builds nothing."""
    count = len(rows)
    if method == "pca" or count < 10 or store.space not in ("cosine", "l2") or not _tsne_available():
        return None
    if probe:
        return np.zeros((0, 0), np.int64), np.zeros((0, 0))
    from galleria.store.graph import neighbor_graph

    ids, distances = neighbor_graph(store, min(TSNE_NEIGHBORS, count - 1), on_progress=on_progress)
    if store._paths is not rows:
        return None
    return ids, (np.sqrt(np.maximum(distances, 0.0)) if store.space == "l2" else distances)


def sample_rows(count: int, sample: int, seed: int) -> np.ndarray:
    """The sorted rows of a seeded sample of ``sample`` out of ``count`` items (all when fewer).

    Examples
    --------
    >>> sample_rows(5, 10, 0).tolist()
    [0, 1, 2, 3, 4]
    >>> len(sample_rows(1000, 10, 0)), bool((sample_rows(1000, 10, 0) == sample_rows(1000, 10, 0)).all())
    (10, True)
    """
    if sample >= count:
        return np.arange(count, dtype=np.int64)
    chosen = np.random.default_rng([seed, count, 20261207]).choice(count, size=sample, replace=False)
    return np.sort(chosen).astype(np.int64)


def place_along_graph(
    ids: np.ndarray,
    distances: np.ndarray,
    coordinates: np.ndarray,
    placed: np.ndarray,
    nearest: int = PLACE_NEAREST,
    rounds: int = PLACE_ROUNDS,
) -> tuple[np.ndarray, np.ndarray]:
    """Positions for the rows not ``placed`` yet, from their neighbours in a graph: ``(coordinates,
    placed)``, both new arrays.

    ``ids``/``distances`` (n, k) are each row's nearest other rows, sorted by distance (the store's
    neighbour graph); ``coordinates`` (n, 2) holds the positions of the rows where ``placed`` (n,
    bool) is true. Each round, every row not placed yet that has a placed neighbour lands at the mean
    position of its ``nearest`` nearest placed neighbours, weighted by 1 / (distance + 10⁻⁶) (a near
    copy lands on its original); only the rows placed in earlier rounds count, so the result does not
    depend on the order of the rows. After ``rounds`` rounds, rows still unplaced (no path to a placed
    row) stay unplaced: the caller places them otherwise.

    Examples
    --------
    >>> ids = np.array([[1, 2], [0, 2], [1, 0], [2, 1]])
    >>> distances = np.array([[1.0, 2.0], [1.0, 1.0], [1.0, 2.0], [1.0, 2.0]])
    >>> xy = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    >>> out, done = place_along_graph(ids, distances, xy, np.array([True, True, False, False]), nearest=1)
    >>> out.tolist(), done.tolist()
    ([[0.0, 0.0], [4.0, 0.0], [4.0, 0.0], [4.0, 0.0]], [True, True, True, True])
    """
    out = np.array(coordinates, dtype=np.float32, copy=True)
    done = np.array(placed, dtype=bool, copy=True)
    out[~done] = 0.0
    for _ in range(rounds):
        waiting = np.flatnonzero(~done)
        if waiting.size == 0:
            break
        known = done.copy()  # this round reads only rows placed before it
        for start in range(0, waiting.size, _PLACE_BLOCK):
            rows = waiting[start : start + _PLACE_BLOCK]
            candidates = ids[rows]
            usable = known[candidates]
            usable &= np.cumsum(usable, axis=1) <= nearest
            weights = np.where(usable, 1.0 / (np.asarray(distances[rows], np.float64) + 1e-6), 0.0)
            total = weights.sum(axis=1)
            found = total > 0
            if not found.any():
                continue
            weights = weights[found] / total[found, None]
            spots = out[candidates[found]].astype(np.float64)  # (m, k, 2)
            out[rows[found]] = np.einsum("mk,mkc->mc", weights, spots).astype(np.float32)
            done[rows[found]] = True
        if done.sum() == known.sum():
            break
    return out, done


def place_points(
    new: np.ndarray, mapped: np.ndarray, coordinates: np.ndarray, space: str, k: int = PLACE_NEIGHBORS
) -> np.ndarray:
    """Positions of the ``new`` vectors: the mean position of each one's ``k`` nearest ``mapped`` ones.

    Works in blocks of rows, so memory stays near 64 MB whatever the sizes.

    Examples
    --------
    >>> mapped = np.array([[0.0], [1.0], [10.0]])
    >>> place_points(np.array([[0.4]]), mapped, np.array([[0.0, 0], [2, 2], [9, 9]]), "l2", k=2).tolist()
    [[1.0, 1.0]]
    """
    new = np.asarray(new, dtype=np.float32)
    mapped = np.asarray(mapped, dtype=np.float32)
    if mapped.shape[0] == 0:
        return np.zeros((new.shape[0], 2), np.float32)
    nearest = min(k, mapped.shape[0])
    out = np.empty((new.shape[0], 2), np.float32)
    block = max(1, (1 << 24) // max(1, mapped.shape[0]))
    for start in range(0, new.shape[0], block):
        distances = pairwise_distances(new[start : start + block], mapped, space)
        if nearest < mapped.shape[0]:
            picked = np.argpartition(distances, nearest - 1, axis=1)[:, :nearest]
        else:
            picked = np.broadcast_to(np.arange(nearest), (distances.shape[0], nearest))
        out[start : start + block] = coordinates[picked].mean(axis=1)
    return out


def sampled_map(
    store: Any,
    rows: object,
    vectors: np.ndarray,
    method: str,
    seed: int,
    sample: int,
    on_progress: Progress | None,
    threads: int = 1,
) -> tuple[np.ndarray, int] | None:
    """A large gallery's map: t-SNE of a seeded sample, the other rows placed along the store's
    graph, ``(coordinates, sample size)``; None when the map is not sampled (small gallery, PCA,
    no openTSNE, a space without a graph, or the gallery changed meanwhile)."""
    count = vectors.shape[0]
    if not sample or count <= sample or map_neighbors(store, rows, method, probe=True) is None:
        return None
    from galleria.index.neighbor_graph import build_graph
    from galleria.store.graph import neighbor_graph

    chosen = sample_rows(count, sample, seed)
    subset = np.ascontiguousarray(vectors[chosen])
    near, far, _ = build_graph(subset, min(TSNE_NEIGHBORS, sample - 1), store.space, on_progress=on_progress)
    if store.space == "l2":
        far = np.sqrt(np.maximum(far, 0.0))
    laid, _ = project_vectors(
        subset,
        store.space,
        method="tsne",
        seed=seed,
        threads=threads,
        neighbors=(near, far),
        on_progress=on_progress,
    )
    del near, far, subset
    ids, distances = neighbor_graph(store, min(PLACE_GRAPH_K, count - 1), on_progress=on_progress)
    if store._paths is not rows:
        return None
    start = np.zeros((count, 2), np.float32)
    start[chosen] = laid
    placed = np.zeros(count, dtype=bool)
    placed[chosen] = True
    coordinates, placed = place_along_graph(ids, distances, start, placed)
    left = np.flatnonzero(~placed)
    if left.size:  # no path along the graph to the sample: the nearest sampled vectors place it
        coordinates[left] = place_points(vectors[left], vectors[chosen], laid, store.space)
    return coordinates, int(sample)
