"""A store's neighbour graph (:mod:`galleria.index.neighbor_graph`), kept with the store and beside it.

**In memory** the graph is held per store object with the gallery it was made for (adding or removing
images replaces the store's row table, and the next call updates the graph, or builds a new one). A
graph of ``k`` neighbours also answers every smaller ``k`` (its rows' prefixes).

**On disk** it lives in the side file ``STORE.graph`` next to the store file, written by
``galleria graph`` or :func:`save_neighbor_graph`. Saving the store never writes it, so an unchanged
graph is never rewritten. The file records the *state* it belongs to: the SHA-256 of the store's
space, shape and vectors (row order included). A graph file of another state (the store changed since)
is ignored with a :class:`GraphStateWarning` and rebuilt, never used; so is a damaged or unreadable one
(garbage, truncated, a flipped byte: a :class:`GraphFileWarning` naming the file and the problem) when
a graph is wanted, while :func:`read_graph_file` (``galleria check``) refuses it. The file is untrusted: its
size must be exactly what its header and the store's size say (the store, not the file, fixes the
item count, so it cannot make galleria allocate more), the arrays pass
:func:`~galleria.index.neighbor_graph.check_graph_arrays`, and :func:`verify_graph_rows` checks rows
drawn afresh at each read (:data:`VERIFY_ROWS` of them, the seed named in any refusal so the check can
be rerun; every row with ``galleria check --full``) against the store's vectors: their distances
recomputed, and their true nearest neighbours listed (nothing outside a row closer than its k-th
distance; an approximate graph, ``hnsw`` or ``ivf``, may miss at most 1 - :data:`APPROXIMATE_RECALL`
of them). A forged row outside the sample is not seen by one read (docs/security.md says what
sampling can and cannot see); ``--full`` sees every row.

A side file that cannot be read or written (a FIFO, a folder, a link to a device or a dangling one, a
read-only folder, a full disk) is a :class:`GraphFileWarning` for the commands that only want a graph:
they answer from the graph they computed. ``galleria graph`` and ``galleria check`` are strict.

Layout: ``b"GALLERIA-GRAPH1\\n"``, a 4-byte little-endian header length, a UTF-8 JSON header
(``{"format", "version", "state", "n", "k", "method", "sha256"}``, at most 64 KiB; version 2, a graph
updated since its build, adds ``"changed"``), then the ids (n·k little-endian int32) and the
distances (n·k little-endian float32).

**Changes.** After ``add_images``/``remove_images`` the held graph is updated rather than rebuilt
(:mod:`galleria.store._graph_follow`, :mod:`galleria.index.graph_update`); the command line writes it
to ``STORE.graph`` with the store (:mod:`galleria.store.graph_keeping`).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from galleria._files import open_regular_file
from galleria._validation import check_callback, check_positive_int
from galleria._warnings import GalleriaWarning
from galleria.index.neighbor_graph import MAX_GRAPH_K, METHODS, build_graph, check_graph_arrays
from galleria.store._graph_file import read_header as _read_header
from galleria.store._graph_file import write_graph_arrays
from galleria.store._graph_follow import fingerprints, follow
from galleria.store._graph_verify import APPROXIMATE_RECALL, verify_graph_rows
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = [
    "APPROXIMATE_RECALL",
    "GRAPH_SUFFIX",
    "VERIFY_ROWS",
    "GraphFileWarning",
    "GraphStateWarning",
    "NeighborGraph",
    "graph_file_for",
    "graph_state",
    "neighbor_graph",
    "read_graph_file",
    "read_graph_header",
    "remember_graph_file",
    "save_neighbor_graph",
    "verify_graph_rows",
]

GRAPH_SUFFIX = ".graph"
#: Rows of a graph file verified against the store's vectors at each read (drawn afresh each time).
VERIFY_ROWS = 64


class GraphStateWarning(GalleriaWarning):
    """A neighbour-graph file belongs to another state of the store; it was ignored (and rebuilt)."""


class GraphFileWarning(GraphStateWarning):
    """A neighbour-graph file is damaged or unreadable; it was ignored (and rebuilt), never used."""


@dataclass(frozen=True)
class NeighborGraph:
    """One store state's graph: ``ids`` (n, k) int32 store rows, ``distances`` (n, k) float32."""

    state: str
    ids: np.ndarray
    distances: np.ndarray
    method: str
    #: Rows verified against the vectors when the graph was read from a file (0: built here).
    verified: int = 0
    #: The seed the verified rows were drawn with (None: every row, or built here).
    seed: int | None = None
    #: Rows added and removed since the graph was built (0: as built; more: updated, approximate).
    changed: int = 0

    @property
    def k(self) -> int:
        return int(self.ids.shape[1])


class _Held:
    def __init__(self, rows: object, graph: NeighborGraph, vectors: np.ndarray) -> None:
        self.rows = rows
        self.graph = graph
        self.fingerprints = fingerprints(vectors)  # to tell, after a change, which rows kept their vector


_HELD: weakref.WeakKeyDictionary[InMemoryImageEmbeddingStore, _Held] = weakref.WeakKeyDictionary()
_FILES: weakref.WeakKeyDictionary[InMemoryImageEmbeddingStore, str] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def graph_file_for(store_file: str | os.PathLike[str]) -> str:
    """The side file that keeps the graph of the store file ``store_file``: ``STORE.graph``."""
    return os.fspath(store_file) + GRAPH_SUFFIX


def _rows_and_vectors(store: InMemoryImageEmbeddingStore) -> tuple[object, np.ndarray]:
    if not isinstance(store, InMemoryImageEmbeddingStore):
        raise TypeError(f"store must be an InMemoryImageEmbeddingStore, got {type(store).__name__}")
    if not store.is_built:
        raise RuntimeError("the store is not built yet; call build_store() first")
    from galleria.index.exact import ExactIndex

    with store._lock.reading():
        rows = store._paths
        if store._vectors is not None:  # replaced, never written in place: a view is a snapshot
            vectors = store._vectors.view()
            vectors.flags.writeable = False
        elif isinstance(store._index, ExactIndex):  # no copy of a million vectors (ExactIndex.snapshot)
            vectors = store._index.snapshot()
        else:
            vectors = store._gallery_vectors(np.arange(len(rows), dtype=np.int64))
    return rows, np.ascontiguousarray(vectors, dtype=np.float32)


def _state_of(space: str, vectors: np.ndarray) -> str:
    digest = hashlib.sha256(f"galleria-graph-state:{space}:{vectors.shape[0]}:{vectors.shape[1]}:".encode())
    digest.update(vectors.reshape(-1).view(np.uint8).data)
    return digest.hexdigest()


def graph_state(store: InMemoryImageEmbeddingStore) -> str:
    """The state key a graph of ``store`` is recorded under (hex SHA-256 of space, shape and vectors)."""
    _, vectors = _rows_and_vectors(store)
    return _state_of(store.space, vectors)


def remember_graph_file(store: InMemoryImageEmbeddingStore, store_file: str | os.PathLike[str]) -> None:
    """Let :func:`neighbor_graph` use (and update) ``STORE.graph`` beside ``store_file`` for ``store``."""
    with _LOCK:
        _FILES[store] = graph_file_for(store_file)


def read_graph_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked JSON header of a graph file (no arrays read). ValueError naming the file otherwise."""
    with open_regular_file(path, "graph file") as stream:
        return _read_header(os.fspath(path), stream)[0]


def read_graph_file(
    path: str | os.PathLike[str],
    store: InMemoryImageEmbeddingStore,
    *,
    verify: int | None = VERIFY_ROWS,
    seed: int | None = None,
) -> NeighborGraph | None:
    """The graph kept in ``path`` for ``store``'s current state, or None (with a warning) if it is of another.

    ``verify`` rows (None: every row), drawn with ``seed`` (None: a fresh one), are checked by
    :func:`verify_graph_rows`; the graph returned records how many and the seed. Raises ValueError
    naming the file (and the seed) when the file is damaged, not a graph of this store's size, or a
    verified row does not hold its true neighbours.
    """
    name = os.fspath(path)
    _, vectors = _rows_and_vectors(store)
    state = _state_of(store.space, vectors)
    with open_regular_file(name, "graph file") as stream:
        header, offset = _read_header(name, stream)
        if header["state"] != state:
            warnings.warn(
                GraphStateWarning(f"graph file {name!r} belongs to another state of the store; ignored"),
                stacklevel=2,
            )
            return None
        count, k = header["n"], header["k"]
        if count != vectors.shape[0]:
            raise ValueError(
                f"graph file {name!r}: {count} items recorded, the store holds {vectors.shape[0]}"
            )
        expected = offset + 8 * count * k
        if os.fstat(stream.fileno()).st_size != expected:
            raise ValueError(f"graph file {name!r} must be exactly {expected} bytes for n={count}, k={k}")
        payload = stream.read(8 * count * k)
    if len(payload) != 8 * count * k or hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise ValueError(f"graph file {name!r}: the arrays do not match their recorded SHA-256 (damaged)")
    ids = np.frombuffer(payload, dtype="<i4", count=count * k).reshape(count, k).astype(np.int32)
    distances = np.frombuffer(payload, dtype="<f4", offset=4 * count * k).reshape(count, k).astype(np.float32)
    check_graph_arrays(ids, distances, count, f"graph file {name!r}")
    if verify is None or verify >= count:
        rows, used = np.arange(count, dtype=np.int64), None
        what = f"graph file {name!r} (every row verified)"
    else:
        used = secrets.randbits(32) if seed is None else int(seed)
        chosen = np.random.default_rng(used).choice(count, size=min(count, max(0, verify)), replace=False)
        rows = np.sort(chosen)
        what = f"graph file {name!r} ({len(rows)} rows verified, seed {used})"
    changed = int(header.get("changed", 0))
    checked = header["method"] if not changed else "updated"  # an updated graph is approximate
    verify_graph_rows(ids, distances, vectors, store.space, checked, what, rows)
    return NeighborGraph(state, ids, distances, header["method"], len(rows), used, changed)


def _usable_graph_file(path: str, store: InMemoryImageEmbeddingStore) -> NeighborGraph | None:
    """:func:`read_graph_file`, or None with a :class:`GraphFileWarning` when the file is damaged."""
    try:
        return read_graph_file(path, store)
    except (ValueError, OSError) as error:  # damaged, truncated, forged, unreadable: rebuild, never use
        warnings.warn(
            GraphFileWarning(f"graph file {path!r} is unusable ({error}); ignored and rebuilt"), stacklevel=3
        )
        return None


def _write_graph_file(path: str, graph: NeighborGraph) -> None:
    write_graph_arrays(path, graph.ids, graph.distances, graph.state, graph.method, graph.changed)


def _prefix(graph: NeighborGraph, k: int) -> tuple[np.ndarray, np.ndarray]:
    return graph.ids[:, :k], graph.distances[:, :k]


def neighbor_graph(
    store: InMemoryImageEmbeddingStore,
    k: Any,
    *,
    method: str = "auto",
    store_file: Any = None,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each gallery item's ``k`` nearest other items: ``(ids, distances)``, two (n, k') arrays.

    ``k' = min(k, n - 1)``; row i is sorted by distance in the store's space, ties to the lower id,
    and never holds i; ids are store rows. Built once per store state (:mod:`galleria.index.neighbor_graph`:
    exact up to 100,000 items under ``method="auto"``, HNSW candidates refined exactly above)
    and kept in memory on the store. With ``store_file``, ``STORE.graph`` is read if it holds this
    state's graph and (re)written otherwise; a store loaded by the command line reads it too, but
    never writes it. The arrays returned are read-only views. ``on_progress(phase, done, total)`` follows
    a build (:func:`galleria.index.neighbor_graph.build_graph`); a graph found is not reported.

    Examples
    --------
    >>> from galleria import InMemoryImageEmbeddingStore
    >>> vectors = np.array([[0.0], [1.0], [3.0]])
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c"], vectors, space="l2")
    >>> ids, distances = neighbor_graph(store, 1)
    >>> ids.ravel().tolist(), distances.ravel().tolist()
    ([1, 0, 1], [1.0, 1.0, 4.0])
    """
    requested = wanted = check_positive_int("k", k)
    check_callback("on_progress", on_progress)
    if wanted > MAX_GRAPH_K:
        raise ValueError(f"k must be at most {MAX_GRAPH_K}, got {k!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    rows, vectors = _rows_and_vectors(store)
    wanted = min(wanted, max(len(rows) - 1, 0))  # type: ignore[arg-type]
    with _LOCK:
        held = _HELD.get(store)
        kept_file = _FILES.get(store)
    if held is not None and held.rows is rows and held.graph.k >= wanted and _answers(held.graph, method):
        return _prefix(held.graph, wanted)
    path = graph_file_for(store_file) if store_file is not None else kept_file
    state = _state_of(store.space, vectors)
    graph = None
    if held is not None and held.rows is not rows and held.graph.k >= wanted and _answers(held.graph, method):
        graph = _followed(held, rows, vectors, store.space, state)  # updated, not rebuilt, when it can be
    fresh = graph is not None
    if graph is None and path is not None and os.path.exists(path):
        graph = _usable_graph_file(path, store)
        if graph is not None and (graph.k < wanted or not _answers(graph, method)):
            graph = None
    if graph is None:
        ids, distances, used = build_graph(vectors, requested, store.space, method, on_progress=on_progress)
        graph, fresh = NeighborGraph(state, ids, distances, used), True
    if fresh and store_file is not None:  # a file remembered from loading is read, never written
        _write_or_warn(path, graph)  # type: ignore[arg-type]
    _hold(store, rows, graph, vectors)
    return _prefix(graph, wanted)


def _answers(graph: NeighborGraph, method: str) -> bool:
    """Whether ``graph`` answers a request for ``method`` (an updated graph is no longer exact)."""
    return method == "auto" or (method == graph.method and not (graph.changed and method == "exact"))


def _hold(
    store: InMemoryImageEmbeddingStore, rows: object, graph: NeighborGraph, vectors: np.ndarray
) -> None:
    graph.ids.flags.writeable = False
    graph.distances.flags.writeable = False
    held = _Held(rows, graph, vectors)
    with _LOCK:
        if store._paths is rows:
            _HELD[store] = held


def _write_or_warn(path: str, graph: NeighborGraph) -> None:
    try:
        _write_graph_file(path, graph)
    except (OSError, ValueError) as error:  # no regular file, a read-only folder, a full disk
        warnings.warn(
            GraphFileWarning(
                f"graph file {path!r} cannot be written ({error}); answered from the graph "
                "computed, which is not kept"
            ),
            stacklevel=3,
        )


def _followed(held: _Held, rows: object, vectors: np.ndarray, space: str, state: str) -> NeighborGraph | None:
    """``held``'s graph carried over to the store's new rows (:mod:`galleria.store._graph_follow`)."""
    old = held.graph
    found = follow(held.rows, held.fingerprints, old.ids, old.distances, old.changed, rows, vectors, space)  # type: ignore[arg-type]
    if found is None:
        return None
    ids, distances, changed, _ = found
    return NeighborGraph(state, ids, distances, old.method, changed=changed)


def save_neighbor_graph(store: InMemoryImageEmbeddingStore, store_file: str | os.PathLike[str]) -> bool:
    """Write the store's in-memory graph to ``STORE.graph``; False (nothing written) if it holds it."""
    rows, _ = _rows_and_vectors(store)
    with _LOCK:
        held = _HELD.get(store)
    if held is None or held.rows is not rows:
        raise ValueError(
            "the store holds no neighbour graph of its current gallery; call neighbor_graph() first"
        )
    path = graph_file_for(store_file)
    if os.path.exists(path):
        try:
            header = read_graph_header(path)
        except ValueError:
            header = None
        if header is not None and header["state"] == held.graph.state and header["k"] == held.graph.k:
            return False
    _write_graph_file(path, held.graph)
    return True
