"""The gallery's k-nearest-neighbour graph a diffusion walks on, cached per gallery state."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from galleria.index.neighbor_graph import build_graph
from galleria.rerank._consistent import StateCache, kept_graph
from galleria.store import GallerySnapshot
from galleria.store.store import InMemoryImageEmbeddingStore


class _GalleryGraph(NamedTuple):
    """Each gallery row's nearest other rows (ties to the lower row), for one state of one store."""

    rows: Any  # the store's path table this graph was built from (its token names the state)
    neighbours: np.ndarray  # (n, m) int32, rows sorted ascending within each row
    others: int  # m requested (capped at n - 1)


#: One graph per store (the latest state, the latest size), kept while the gallery keeps its state.
_GRAPHS: StateCache[_GalleryGraph] = StateCache()


def _graph_of(store: InMemoryImageEmbeddingStore, snapshot: GallerySnapshot, others: int) -> _GalleryGraph:
    """The gallery's k-NN lists in its space: the store's neighbour graph (:func:`kept_graph`) while
    the store holds the snapshot's state, else the same core (:func:`galleria.index.neighbor_graph.
    build_graph`: blockwise, exact up to 100,000 items) over the snapshot's vectors; each row's ids
    sorted ascending."""
    size = snapshot.vectors.shape[0]
    wanted = min(others, size - 1)
    if wanted <= 0:
        return _GalleryGraph(snapshot.paths, np.empty((size, 0), dtype=np.int32), others)
    ids = kept_graph(store, snapshot.state, wanted)
    if ids is None:
        ids = build_graph(snapshot.vectors, wanted, snapshot.space)[0]
    return _GalleryGraph(snapshot.paths, np.sort(ids[:, :wanted], axis=1).astype(np.int32), others)


def gallery_graph(
    store: InMemoryImageEmbeddingStore, others: int, snapshot: GallerySnapshot | None = None
) -> _GalleryGraph:
    """The store's gallery graph with ``others`` neighbours per row: built once, kept while the store
    keeps its gallery (adding or removing images makes a new one on next use). With ``snapshot``
    (:func:`galleria.rerank._consistent.take_snapshot`), the graph of exactly that state."""
    return _GRAPHS.get(store, others, lambda source: _graph_of(store, source, others), snapshot).value


def truncated_neighbors(graph: _GalleryGraph, rows: np.ndarray) -> np.ndarray:
    """``(B, N, N)`` mask: candidate ``j`` of pool ``b`` is among the gallery neighbours of candidate ``i``.

    ``rows`` (B, N) are the candidates' gallery rows; the gallery graph is restricted to each pool.
    """
    count, size = rows.shape
    gallery = graph.neighbours.shape[0]
    offset = (np.arange(count, dtype=np.int64) * gallery)[:, None]
    keys = rows.astype(np.int64) + offset  # (B, N), distinct within a pool
    order = np.argsort(keys, axis=None)
    sorted_keys = keys.ravel()[order]
    wanted = graph.neighbours[rows].astype(np.int64) + offset[:, :, None]  # (B, N, m)
    where = np.minimum(np.searchsorted(sorted_keys, wanted), sorted_keys.size - 1)
    found = sorted_keys[where] == wanted
    member = np.zeros((count, size, size), dtype=bool)
    batch, item, _ = np.nonzero(found)
    member[batch, item, order[where[found]] % size] = True
    return member
