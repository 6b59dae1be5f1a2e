"""One consistent read of a store for re-ranking: the candidates' rows and vectors, and every
gallery-derived structure they are scored against, all from the same state of the gallery.

A store replaces its path table whenever its gallery changes (``add_images``, ``remove_images``),
and each table carries a random ``token``: the token names the gallery's *state*. A structure
derived from the whole gallery (diffusion's gallery graph, decoupled diffusion's offline table)
is a :class:`Prepared` value that carries the state it was built for. :func:`read_candidates`
reads the candidates' rows under the store's read lock together with the state, and accepts a
structure only when the two agree; otherwise it rebuilds the structure and reads again. After
:data:`_TRIES` disagreements (a writer changing the gallery faster than the structure builds) it
takes the candidates' rows and a snapshot of the whole gallery under one read lock, and builds
the structure from that snapshot, so the answer always comes from one state.

Re-rankers built on :class:`~galleria.rerank.base.PoolReranker` get this for free: they name
their structure in ``_prepare_gallery`` and receive it beside the rows. A re-ranker that needs no
structure still reads its rows and vectors here, under one lock.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from galleria.store import (  # moved there (galleria 0.3); re-exported
    GallerySnapshot,
    gallery_state,
    snapshot_locked,
    take_snapshot,
)
from galleria.store.candidate import Candidate

if TYPE_CHECKING:
    from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = [
    "CandidateRead",
    "GallerySnapshot",
    "Prepared",
    "StateCache",
    "gallery_state",
    "kept_graph",
    "read_candidates",
    "take_snapshot",
]

T = TypeVar("T")

#: Structure rebuilds tried against a moving gallery before the one-lock fallback.
_TRIES = 3


@dataclass(frozen=True)
class Prepared(Generic[T]):
    """A gallery-derived ``value`` and the ``state`` (path-table token) it was built from."""

    state: int
    value: T


#: A re-ranker's structure: ``prepare(store, None)`` for the current state (cached or built),
#: ``prepare(store, snapshot)`` for exactly the snapshot's state.
Prepare = Callable[["InMemoryImageEmbeddingStore", "GallerySnapshot | None"], Prepared[Any]]


@dataclass(frozen=True)
class CandidateRead:
    """The candidates' gallery ``rows`` (n,), their ``vectors`` (n, d) and the ``prepared`` structure
    (None when none was asked for), all of gallery ``state``."""

    state: int
    rows: np.ndarray
    vectors: np.ndarray
    prepared: Any


def _rows_locked(
    store: InMemoryImageEmbeddingStore, candidates: Sequence[Candidate]
) -> tuple[np.ndarray, np.ndarray]:
    rows = store._candidate_rows(candidates)  # KeyError naming unknown paths
    return rows, store._gallery_vectors(rows)


def read_candidates(
    store: InMemoryImageEmbeddingStore, candidates: Sequence[Candidate], prepare: Prepare | None = None
) -> CandidateRead:
    """The candidates' rows and vectors and ``prepare``'s structure, all of one gallery state.

    Raises KeyError naming the candidates' paths the store does not hold (at the state read).
    """
    if prepare is None:
        with store._lock.reading():
            rows, vectors = _rows_locked(store, candidates)
            return CandidateRead(gallery_state(store), rows, vectors, None)
    for _ in range(_TRIES):
        prepared = prepare(store, None)
        with store._lock.reading():
            state = gallery_state(store)
            if prepared.state == state:
                rows, vectors = _rows_locked(store, candidates)
                return CandidateRead(state, rows, vectors, prepared.value)
    with store._lock.reading():  # the gallery keeps moving: rows and whole gallery from one lock
        snapshot = snapshot_locked(store)
        rows, vectors = _rows_locked(store, candidates)
    prepared = prepare(store, snapshot)
    if prepared.state != snapshot.state:  # pragma: no cover - a prepare that ignored its snapshot
        raise RuntimeError("a re-ranker's gallery structure was not built from the snapshot it was given")
    return CandidateRead(snapshot.state, rows, vectors, prepared.value)


class StateCache(Generic[T]):
    """One structure per store and key, kept while the store's gallery keeps its state.

    ``get(store, key, build, snapshot)`` answers the kept structure when it was built for the
    wanted state (the snapshot's, else the store's current one), else ``build(snapshot)`` on the
    given snapshot or a fresh one, and keeps it (replacing whatever the store had kept).
    """

    def __init__(self) -> None:
        self._kept: weakref.WeakKeyDictionary[Any, tuple[Any, Prepared[T]]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(
        self,
        store: InMemoryImageEmbeddingStore,
        key: Any,
        build: Callable[[GallerySnapshot], T],
        snapshot: GallerySnapshot | None = None,
    ) -> Prepared[T]:
        wanted = gallery_state(store) if snapshot is None else snapshot.state
        with self._lock:
            held = self._kept.get(store)
        if held is not None and held[0] == key and held[1].state == wanted:
            return held[1]
        source = take_snapshot(store) if snapshot is None else snapshot
        prepared = Prepared(source.state, build(source))
        with self._lock:
            self._kept[store] = (key, prepared)
        return prepared

    def clear(self) -> None:
        """Forget every kept structure."""
        with self._lock:
            self._kept.clear()


def kept_graph(store: Any, state: int, k: int) -> np.ndarray | None:
    """The ids of ``store``'s neighbour graph (:func:`galleria.store.graph.neighbor_graph`: the one
    kept in memory or beside the store, built there when missing) with ``k`` neighbours a row, when
    the gallery is in ``state`` before and after it is read; None otherwise (the gallery changed:
    the caller builds the lists from its snapshot of ``state``)."""
    from galleria.store.graph import neighbor_graph

    if gallery_state(store) != state:
        return None
    ids = neighbor_graph(store, k)[0]
    return ids if gallery_state(store) == state else None
