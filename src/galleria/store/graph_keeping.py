"""Keeping a store's neighbour graph across changes and builds elsewhere (:mod:`galleria.store.graph`).

:func:`hold_graph_file` and :func:`follow_graph_file` let a change of a store file (``galleria add``,
``remove``, ``sync``) update ``STORE.graph`` instead of leaving it stale; :func:`graph_snapshot` and
:func:`adopt_graph` let a graph built elsewhere (on Ray: :mod:`galleria.engines.ray_graph`) be kept
only if the store still holds the state it was built from.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np

from galleria.store.graph import (
    _HELD,
    _LOCK,
    GraphStateWarning,
    NeighborGraph,
    _followed,
    _hold,
    _prefix,
    _rows_and_vectors,
    _state_of,
    _write_graph_file,
    _write_or_warn,
    graph_file_for,
    read_graph_file,
)
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = ["GraphSnapshot", "adopt_graph", "follow_graph_file", "graph_snapshot", "hold_graph_file"]


def hold_graph_file(store: InMemoryImageEmbeddingStore, store_file: str | os.PathLike[str]) -> bool:
    """Hold ``STORE.graph``'s graph with ``store`` if it is of the store's state, so that a change of
    the store can update it (:func:`follow_graph_file`); False (nothing held) if there is none.

    A stale or damaged file is left alone (it is refused or rebuilt where a graph is wanted)."""
    path = graph_file_for(store_file)
    if not os.path.exists(path):
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", GraphStateWarning)
            graph = read_graph_file(path, store)
    except (OSError, ValueError):
        return False
    if graph is None:
        return False
    rows, vectors = _rows_and_vectors(store)
    _hold(store, rows, graph, vectors)
    return True


def follow_graph_file(store: InMemoryImageEmbeddingStore, store_file: str | os.PathLike[str]) -> bool:
    """Update the graph held for ``store`` to its current state and write it to ``STORE.graph``.

    Called by whoever changed the store, under the store's writer lock, after the store file is
    saved: the file written records the new state, so a graph never mixes two states (if this is
    never reached, the file left records the old state and is stale). False (nothing written)
    when no graph is held or the change is too large to update (the next use rebuilds it)."""
    with _LOCK:
        held = _HELD.get(store)
    if held is None:
        return False
    rows, vectors = _rows_and_vectors(store)
    if held.rows is rows:
        return False
    graph = _followed(held, rows, vectors, store.space, _state_of(store.space, vectors))
    if graph is None:
        return False
    _write_graph_file(graph_file_for(store_file), graph)
    _hold(store, rows, graph, vectors)
    return True


@dataclass(frozen=True)
class GraphSnapshot:
    """One state of a store, as a graph is built from it: its row table, vectors and state key."""

    rows: object
    vectors: np.ndarray
    state: str


def graph_snapshot(store: InMemoryImageEmbeddingStore) -> GraphSnapshot:
    """The store's current state, to build a graph from elsewhere and :func:`adopt_graph` it after."""
    rows, vectors = _rows_and_vectors(store)
    return GraphSnapshot(rows, vectors, _state_of(store.space, vectors))


def adopt_graph(
    store: InMemoryImageEmbeddingStore,
    snapshot: GraphSnapshot,
    ids: np.ndarray,
    distances: np.ndarray,
    method: str,
    *,
    store_file: str | os.PathLike[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Keep a graph built from ``snapshot`` as the store's (and in ``STORE.graph`` with ``store_file``).

    RuntimeError, with nothing kept or written, when the store no longer holds that state."""
    with _LOCK:
        changed = store._paths is not snapshot.rows
    if changed:
        raise RuntimeError(
            "the store changed while its neighbour graph was built (images added or removed); "
            "the graph was discarded, nothing was kept or written: build it again"
        )
    graph = NeighborGraph(snapshot.state, ids, distances, method)
    if store_file is not None:
        _write_or_warn(graph_file_for(store_file), graph)
    _hold(store, snapshot.rows, graph, snapshot.vectors)
    return _prefix(graph, graph.k)
