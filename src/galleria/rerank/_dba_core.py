"""Database-side augmentation (DBA) and αQE on pools: the augmented gallery, cached per store state, and the
feature-set function (pure numeric cores, plus the store shell that caches the augmentation)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from galleria._params import Param, Space
from galleria._validation import check_positive_int
from galleria.expansion import MAX_EXPANSION_ALPHA, alpha_query_expansion, check_expansion_alpha
from galleria.index.neighbor_graph import build_graph
from galleria.rerank._consistent import kept_graph
from galleria.rerank.base import check_features, check_store, top_similar
from galleria.store import take_snapshot
from galleria.store.store import InMemoryImageEmbeddingStore
from galleria.vectors import stable_smallest

#: Rows augmented together (bounds the (rows, neighbours, d) array handed to αQE).
_BLOCK = 256


#: DBA + αQE's parameters, declared once (:data:`galleria.rerank.dba.COMPONENT` lists them; the
#: constructor and the feature functions read their defaults here).
PARAMS: tuple[Param, ...] = (
    Param(
        "neighbors",
        int,
        10,
        1,
        10_000,
        paper=10,
        cost=True,
        space=Space("int", 1, 50, log=True),
        help="neighbors averaged into each gallery vector",
    ),
    Param(
        "alpha",
        float,
        3.0,
        0.0,
        MAX_EXPANSION_ALPHA,
        paper=3.0,
        space=Space("float", 1.0, MAX_EXPANSION_ALPHA, log=True),  # holds the adaptive 10 and 1000
        help="exponent of the augmentation weights",
    ),
    Param(
        "aqe_neighbors",
        int,
        10,
        1,
        10_000,
        paper=10,
        cost=True,
        space=Space("int", 1, 50, log=True),
        help="matches averaged into the query",
    ),
    Param(
        "aqe_alpha",
        float,
        3.0,
        0.0,
        MAX_EXPANSION_ALPHA,
        paper=3.0,
        space=Space("float", 1.0, MAX_EXPANSION_ALPHA, log=True),  # holds the adaptive 10 and 1000
        help="exponent of the query expansion weights",
    ),
)


def database_augmentation(
    vectors: Any, *, neighbors: int = PARAMS[0].default, alpha: float = PARAMS[1].default
) -> np.ndarray:
    """Augment every row of ``vectors`` with its ``neighbors`` most similar other rows (DBA).

    Parameters
    ----------
    vectors : array_like, shape (n, d)
        The gallery vectors (any scale; compared by cosine).
    neighbors : int
        Other rows averaged into each row (capped at ``n - 1``).
    alpha : float
        The αQE exponent of the weights, finite and ≥ 0.

    Returns
    -------
    numpy.ndarray
        (n, d) float32 unit rows.

    Raises
    ------
    TypeError, ValueError
        Non-numeric, empty, non-2-D or non-finite ``vectors``; bad ``neighbors`` / ``alpha``.

    Examples
    --------
    >>> out = database_augmentation(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]), neighbors=1, alpha=0.0)
    >>> np.round(out.astype(float), 4).tolist()  # row 1 is equally close to rows 0 and 2: row 0 counts
    [[0.9239, 0.3827], [0.9239, 0.3827], [0.3827, 0.9239]]
    """
    count = check_positive_int("neighbors", neighbors)
    power = check_expansion_alpha("alpha", alpha)
    unit = check_features("vectors", vectors)
    return _augment(unit, count, power)


def _augment(
    unit: np.ndarray, neighbors: int, alpha: float, positions: np.ndarray | None = None
) -> np.ndarray:
    """DBA of unit rows; ``positions`` (n, ≥ neighbors), if given, are their precomputed neighbour lists."""
    size = unit.shape[0]
    chosen = min(neighbors, size - 1)
    if chosen == 0:
        copy: np.ndarray = unit.copy()
        return copy
    if positions is None or positions.shape[1] < chosen:
        positions, _ = top_similar(unit, unit, chosen, exclude_self=True)
    positions = positions[:, :chosen]
    result = np.empty_like(unit)
    for start in range(0, size, _BLOCK):
        stop = min(size, start + _BLOCK)
        result[start:stop] = alpha_query_expansion(unit[start:stop], unit[positions[start:stop]], alpha=alpha)
    return result


def augment_store(
    store: InMemoryImageEmbeddingStore,
    *,
    neighbors: int = PARAMS[0].default,
    alpha: float = PARAMS[1].default,
    neighbor_lists: np.ndarray | None = None,
    neighbour_lists: np.ndarray | None = None,
) -> InMemoryImageEmbeddingStore:
    """A new store over the DBA-augmented vectors of ``store`` (same paths, embedder, index kind).

    The original store is left unchanged. The new store records the augmentation
    (:attr:`~galleria.store.InMemoryImageEmbeddingStore.augmentation`), and its saved file keeps
    it. Images added to it later are not augmented. ``neighbor_lists`` — the (n, m ≥ neighbors)
    output of :func:`~galleria.rerank.base.top_similar` on the store's vectors with
    ``exclude_self=True`` — lets a caller that augments one store many times (the tuner) find the
    neighbours once; it is trusted as given.

    Raises
    ------
    TypeError
        ``store`` is not an ``InMemoryImageEmbeddingStore``; bad ``neighbors`` / ``alpha``.
    ValueError
        The store is not in the cosine space, is on an ``ExternalSearchIndex``, or is already augmented.
    RuntimeError
        The store is not built.
    """
    check_store(store, "database-side augmentation")
    count = check_positive_int("neighbors", neighbors)
    power = check_expansion_alpha("alpha", alpha)
    if store.space != "cosine":
        raise ValueError(f"database-side augmentation needs a cosine store, got space {store.space!r}")
    if store.augmentation is not None:
        raise ValueError(f"store is already augmented ({store.augmentation}); augment the original store")
    if not store.is_built:
        raise RuntimeError("the store is not built yet; call build_store() first")
    if neighbour_lists is not None:  # the old spelling, kept working
        warnings.warn(
            "augment_store(neighbour_lists=...) is deprecated; use neighbor_lists=",
            DeprecationWarning,
            stacklevel=2,
        )
        if neighbor_lists is not None:
            raise TypeError("give neighbor_lists or its old name neighbour_lists, not both")
        neighbor_lists = neighbour_lists
    snapshot = take_snapshot(store)  # paths and vectors of one gallery state
    if neighbor_lists is None:  # the gallery's neighbor graph (galleria.store.graph), of that state
        wanted = min(count, max(len(snapshot.vectors) - 1, 1))
        neighbor_lists = kept_graph(store, snapshot.state, wanted)
        if neighbor_lists is None:  # the gallery changed since the snapshot: the same core over it
            neighbor_lists = build_graph(snapshot.vectors, wanted, snapshot.space)[0]
    augmented = _augment(snapshot.vectors, count, power, neighbor_lists)
    index = store.search_index
    result = InMemoryImageEmbeddingStore.from_embeddings(
        list(snapshot.paths),
        augmented,
        store.embedder,
        index.name,
        space="cosine",
        index_params=index.params() or None,
    )
    result._augmentation = {"method": "dba", "neighbors": count, "alpha": power}
    result._query_transform = store._query_transform  # a normalised view stays one, queries and all
    return result


def augmented_store_for(
    store: InMemoryImageEmbeddingStore, neighbors: int, alpha: float, what: str
) -> InMemoryImageEmbeddingStore:
    """``store`` augmented with ``neighbors`` and ``alpha`` (checked): ``store`` itself when it already
    is (a saved augmented store), else its augmented copy (:func:`augment_store`). ``what`` names the
    method in the errors; ValueError for a store augmented with other settings."""
    check_store(store, what)
    record = store.augmentation
    if record is None:
        return augment_store(store, neighbors=neighbors, alpha=alpha)
    if record == {"method": "dba", "neighbors": neighbors, "alpha": alpha}:
        return store
    raise ValueError(f"store is augmented with {record}, not with neighbors={neighbors}, alpha={alpha}")


def aqe_pools(probe: np.ndarray, among: np.ndarray, *, neighbors: int, alpha: float) -> np.ndarray:
    """Cosine distances of every candidate to the αQE-expanded query, for ``B`` pools (see the module).

    ``probe`` (B, N) holds ``cos(q̂, x̃_i)``, ``among`` (B, N, N) the cosines among the candidates (only
    the rows of the expansion's matches are read); the expansion uses the ``neighbors`` most similar
    candidates (ties to the lower position).
    """
    chosen = stable_smallest(-probe, min(neighbors, probe.shape[1]))
    rows = np.take_along_axis(among, chosen[:, :, None], axis=1)  # (B, m, N)
    return _aqe_from_rows(probe, chosen, rows, alpha)


def _aqe_from_rows(probe: np.ndarray, chosen: np.ndarray, rows: np.ndarray, alpha: float) -> np.ndarray:
    """:func:`aqe_pools` given the chosen matches and their cosines to every candidate ``rows`` (B, m, N)."""
    similar = np.take_along_axis(probe, chosen, axis=1)
    weights = np.where(similar > 0, np.maximum(similar, 0.0) ** alpha, 0.0)
    numerator = probe + np.einsum("bm,bmn->bn", weights, rows)
    inner = np.take_along_axis(rows, chosen[:, None, :], axis=2)  # (B, m, m)
    quadratic = np.einsum("bk,bk->b", np.einsum("bm,bmk->bk", weights, inner), weights)
    squared = 1.0 + 2.0 * np.einsum("bm,bm->b", weights, similar) + quadratic
    norm = np.sqrt(np.maximum(squared, 0.0))
    cosine = np.divide(numerator, norm[:, None], out=np.zeros_like(numerator), where=norm[:, None] > 0)
    result: np.ndarray = 1.0 - cosine
    return result


def dba_aqe_rerank_features(
    probe_features: Any,
    gallery_features: Any,
    *,
    neighbors: int = PARAMS[0].default,
    alpha: float = PARAMS[1].default,
    aqe_neighbors: int = PARAMS[2].default,
    aqe_alpha: float = PARAMS[3].default,
) -> np.ndarray:
    """DBA + αQE distances of every probe to every gallery item (cosine, whole gallery).

    The gallery is augmented (:func:`database_augmentation`); each probe is expanded with its
    ``aqe_neighbors`` best augmented matches; the result is ``1 - cos(q', x̃_g)``.

    Returns
    -------
    numpy.ndarray
        (P, G) float64 distances, lower is closer.

    Examples
    --------
    >>> gallery = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> distances = dba_aqe_rerank_features([[1.0, 0.05]], gallery, neighbors=1, aqe_neighbors=1)
    >>> np.argsort(distances[0], kind="stable")[:2].tolist()
    [0, 1]
    """
    count = check_positive_int("neighbors", neighbors)
    power = check_expansion_alpha("alpha", alpha)
    expansion = check_positive_int("aqe_neighbors", aqe_neighbors)
    expansion_power = check_expansion_alpha("aqe_alpha", aqe_alpha)
    probes = check_features("probe_features", probe_features)
    gallery = check_features("gallery_features", gallery_features, probes.shape[1])
    augmented = _augment(gallery, count, power)
    chosen, _ = top_similar(probes, augmented, min(expansion, augmented.shape[0]))
    result = np.empty((probes.shape[0], augmented.shape[0]), dtype=np.float64)
    for start in range(0, probes.shape[0], _BLOCK):
        stop = min(probes.shape[0], start + _BLOCK)
        expanded = alpha_query_expansion(
            probes[start:stop], augmented[chosen[start:stop]], alpha=expansion_power
        )
        result[start:stop] = 1.0 - (expanded @ augmented.T).astype(np.float64)
    return result
