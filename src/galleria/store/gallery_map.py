"""A 2-D map of a store's gallery: one point per image, kept beside the store (``STORE.map``).

**Projection** (:mod:`galleria.store._projection`). With the ``map`` extra (openTSNE) the vectors are
laid out by t-SNE (FFT-accelerated gradients, PCA initialisation: neighbourhoods stay together and
the global layout follows the principal axes) on the store's neighbour graph
(:func:`galleria.store.graph.neighbor_graph`); without it, by PCA onto the two leading axes (exact
and fast, but classes overlap). ``docs/map.md`` says why this choice and gives the measured cost.

**A large gallery** (more than :data:`~galleria.store._projection.TSNE_SAMPLE` items, cosine or l2
space) is mapped by t-SNE of a seeded sample of that many items (their affinities from their nearest
neighbours among the sample); every other item is placed from its neighbours in the store's graph
(:func:`~galleria.store._projection.place_along_graph`: the weighted mean of its nearest placed
neighbours, in rounds). Time and memory then grow with the sample, not with the gallery.

**Images added later** are placed without recomputing the map: an image is known to the map by its
path and a check of its vector (so a re-embedded image counts as new); each new one lands at the mean
position of its 5 nearest already-mapped images (exact distances in the store's space). A map whose
images are mostly gone (fewer than half of the store's images are on it) is recomputed.

**On disk** the map lives in ``STORE.map``, like the neighbour graph's ``STORE.graph``
(:mod:`galleria.store.graph`): written by ``galleria map``, by :func:`gallery_map` with a
``store_file``, or by ``galleria serve`` once it has computed one. The file is untrusted: its item
count is bounded by the store's size (at most twice the store plus 64), its size must be exactly
what the header says, its arrays must match their recorded SHA-256 and hold finite coordinates.
A damaged, hostile or stale file (of another gallery) is ignored with a :class:`MapFileWarning` and
the map recomputed.

Layout: ``b"GALLERIA-MAP1\\n"``, a 4-byte little-endian header length, a UTF-8 JSON header
(``{"format", "version", "state", "n", "method", "sha256"}`` and, for a sampled map, ``"sampled"``,
the size of the sample t-SNE laid out; at most 64 KiB), then n 8-byte
keys (the BLAKE2b digest of each image's path, little-endian uint64), n vector checks (float32, see
:func:`fingerprints`) and n·2 little-endian float32 coordinates.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from galleria._files import atomic_stream, load_json, open_regular_file
from galleria._validation import check_callback, check_choice
from galleria._warnings import GalleriaWarning
from galleria.store._projection import (
    MAP_METHODS,
    TSNE_PHASE,
    TSNE_SAMPLE,
    map_neighbors,
    place_points,
    project_vectors,
    sampled_map,
)
from galleria.store.graph import _rows_and_vectors
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = [
    "CHECK_TOLERANCE",
    "MAP_METHODS",
    "MAP_SUFFIX",
    "MAP_UNITS",
    "GalleryMap",
    "MapFileWarning",
    "fingerprints",
    "gallery_map",
    "map_file_for",
    "place_points",
    "project_vectors",
    "read_map_file",
    "remember_map_file",
]

MAP_SUFFIX = ".map"
_MAGIC = b"GALLERIA-MAP1\n"
_LENGTH = struct.Struct("<I")
_HEADER_LIMIT = 1 << 16
#: Largest absolute coordinate a map file may hold.
_MAX_COORDINATE = 1e7
#: Largest change of a row's vector check still taken as the image that was mapped.
CHECK_TOLERANCE = 1e-3
#: Bytes per item in a map file: key (8), vector check (4), x and y (4 each).
_ITEM_BYTES = 20
#: What the phases :func:`gallery_map` reports count, where it is not images.
MAP_UNITS: dict[str, str] = {TSNE_PHASE: "iteration"}
#: Rows whose vector checks are computed at once (bounds the float64 copy to a few MB).
_CHECK_BLOCK = 1 << 14
#: Threads the projection uses at most.
MAP_THREADS = max(1, min(4, os.cpu_count() or 1))


class MapFileWarning(GalleriaWarning):
    """A map file was ignored (damaged, hostile, or of another gallery); the map was recomputed."""


@dataclass(frozen=True)
class GalleryMap:
    """One store state's map: ``coordinates`` (n, 2) float32 in store row order; how it was drawn."""

    state: str
    coordinates: np.ndarray
    method: str
    #: Rows placed from their neighbours (added after the projection), not projected.
    placed: int = 0
    #: For a map of a large gallery: the size of the seeded sample t-SNE laid out (every other row
    #: placed from its neighbours in the store's graph); 0 when every row was projected.
    sampled: int = 0


def fingerprints(paths: Sequence[str], vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's key on the map: the 64-bit BLAKE2b digest of its path, and a check of its vector
    (its projection on a fixed random unit direction, after L2-normalisation) that tells a
    re-embedded image from the one that was mapped, while rounding noise (a store saved and loaded
    again) stays far below :data:`CHECK_TOLERANCE`."""
    out = np.empty(len(paths), np.uint64)
    for i, path in enumerate(paths):
        digest = hashlib.blake2b(
            path.encode("utf-8", "surrogateescape"), digest_size=8, person=b"galleria-map"
        )
        out[i] = int.from_bytes(digest.digest(), "little")
    array = np.asarray(vectors)
    direction = np.random.default_rng(20261204).normal(size=array.shape[1] if array.ndim == 2 else 0)
    direction /= max(float(np.linalg.norm(direction)), 1e-12)
    checks = np.zeros(len(paths), np.float32)
    for start in range(0, array.shape[0] if array.size else 0, _CHECK_BLOCK):  # float64, in blocks
        rows = np.asarray(array[start : start + _CHECK_BLOCK], dtype=np.float64)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        checks[start : start + rows.shape[0]] = (rows / np.where(norms > 0, norms, 1.0)) @ direction
    return out, checks


def _state(prints: np.ndarray, checks: np.ndarray) -> str:
    digest = hashlib.sha256(b"galleria-map-state:" + np.ascontiguousarray(prints, "<u8").tobytes())
    digest.update(np.ascontiguousarray(checks, "<f4").tobytes())
    return digest.hexdigest()


def map_file_for(store_file: str | os.PathLike[str]) -> str:
    """The side file that keeps the map of the store file ``store_file``: ``STORE.map``."""
    return os.fspath(store_file) + MAP_SUFFIX


def _read_header(name: str, stream: Any, bound: int) -> tuple[dict[str, Any], int]:
    lead = stream.read(len(_MAGIC) + _LENGTH.size)
    if len(lead) < len(_MAGIC) + _LENGTH.size or lead[: len(_MAGIC)] != _MAGIC:
        raise ValueError(f"map file {name!r} is not a galleria map file")
    (length,) = _LENGTH.unpack(lead[len(_MAGIC) :])
    if length > _HEADER_LIMIT:
        raise ValueError(f"map file {name!r}: header of {length} bytes exceeds {_HEADER_LIMIT}")
    header = load_json(stream.read(length), f"map file {name!r}")
    keys = {"format", "version", "state", "n", "method", "sha256"}
    if (
        not isinstance(header, dict)
        or set(header) - {"sampled"} != keys
        or header["format"] != "galleria-map"
    ):
        raise ValueError(
            f"map file {name!r}: the header must hold exactly the keys {sorted(keys)} (and 'sampled')"
        )
    if header["version"] != 1 or header["method"] not in ("tsne", "pca"):
        raise ValueError(f"map file {name!r}: unsupported version or method {header['method']!r}")
    count = header["n"]
    if type(count) is not int or not 0 <= count <= bound:
        raise ValueError(f"map file {name!r}: n must be an int in [0, {bound}] for this store, got {count!r}")
    sampled = header.setdefault("sampled", 0)
    if type(sampled) is not int or not 0 <= sampled <= count:
        raise ValueError(f"map file {name!r}: sampled must be an int in [0, n={count}], got {sampled!r}")
    for key in ("state", "sha256"):
        value = header[key]
        if not (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
            raise ValueError(f"map file {name!r}: header key {key!r} must be a hex SHA-256")
    return header, len(lead) + length


def read_map_header(path: str | os.PathLike[str], store_size: int) -> dict[str, Any]:
    """A map file's checked header (``sampled`` filled in: 0 for a map of every row); ValueError
    naming the file when it is not a map file or claims more items than ``store_size`` allows."""
    name = os.fspath(path)
    with open_regular_file(name, "map file") as stream:
        header, _ = _read_header(name, stream, 2 * int(store_size) + 64)
    return header


def read_map_file(
    path: str | os.PathLike[str], store_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """``(keys, checks, coordinates, method)`` kept in a map file; ValueError naming the file when it
    is damaged, not a map file, or holds more items than a store of ``store_size`` allows
    (:func:`read_map_header` reads the rest of its header)."""
    name = os.fspath(path)
    bound = 2 * int(store_size) + 64
    with open_regular_file(name, "map file") as stream:
        header, offset = _read_header(name, stream, bound)
        count = header["n"]
        expected = offset + _ITEM_BYTES * count
        if os.fstat(stream.fileno()).st_size != expected:
            raise ValueError(f"map file {name!r} must be exactly {expected} bytes for n={count}")
        payload = stream.read(_ITEM_BYTES * count)
    if len(payload) != _ITEM_BYTES * count or hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise ValueError(f"map file {name!r}: the arrays do not match their recorded SHA-256 (damaged)")
    prints = np.frombuffer(payload, dtype="<u8", count=count).astype(np.uint64)
    checks = np.frombuffer(payload, dtype="<f4", offset=8 * count, count=count).astype(np.float32)
    coordinates = np.frombuffer(payload, dtype="<f4", offset=12 * count).reshape(count, 2).astype(np.float32)
    if not (np.all(np.isfinite(coordinates)) and np.all(np.isfinite(checks))):
        raise ValueError(f"map file {name!r}: coordinates and checks must be finite")
    if np.any(np.abs(coordinates) > _MAX_COORDINATE):
        raise ValueError(f"map file {name!r}: coordinates must be at most {_MAX_COORDINATE:g}")
    if _state(prints, checks) != header["state"]:
        raise ValueError(f"map file {name!r}: its state does not match its keys (damaged)")
    return prints, checks, coordinates, header["method"]


def _write_map_file(path: str, keys: tuple[np.ndarray, np.ndarray], result: GalleryMap) -> None:
    payload = (
        np.ascontiguousarray(keys[0], dtype="<u8").tobytes()
        + np.ascontiguousarray(keys[1], dtype="<f4").tobytes()
        + np.ascontiguousarray(result.coordinates, dtype="<f4").tobytes()
    )
    header = {
        "format": "galleria-map",
        "version": 1,
        "state": result.state,
        "n": len(keys[0]),
        "method": result.method,
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    if result.sampled:
        header["sampled"] = result.sampled
    encoded = json.dumps(header, sort_keys=True).encode()
    with atomic_stream(path) as stream:
        stream.write(_MAGIC + _LENGTH.pack(len(encoded)) + encoded + payload)


class _Held:
    def __init__(self, rows: object, result: GalleryMap) -> None:
        self.rows = rows
        self.result = result


_HELD: weakref.WeakKeyDictionary[InMemoryImageEmbeddingStore, _Held] = weakref.WeakKeyDictionary()
_FILES: weakref.WeakKeyDictionary[InMemoryImageEmbeddingStore, str] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def remember_map_file(store: InMemoryImageEmbeddingStore, store_file: str | os.PathLike[str]) -> None:
    """Let :func:`gallery_map` read (and keep up to date) ``STORE.map`` beside ``store_file``."""
    with _LOCK:
        _FILES[store] = map_file_for(store_file)


def _from_file(
    path: str, vectors: np.ndarray, keys: tuple[np.ndarray, np.ndarray], space: str
) -> GalleryMap | None:
    """The map kept in ``path`` brought up to this gallery, or None (with a warning) when unusable."""
    prints, checks = keys
    try:
        kept, kept_checks, coordinates, method = read_map_file(path, len(prints))
        sampled = int(read_map_header(path, len(prints))["sampled"])
    except (ValueError, OSError) as error:
        warnings.warn(
            MapFileWarning(f"{error}; the map file is ignored and the map recomputed"), stacklevel=3
        )
        return None
    found = _positions(kept, prints)
    known = found >= 0
    known[known] = np.abs(kept_checks[found[known]] - checks[known]) <= CHECK_TOLERANCE
    if prints.size and known.sum() * 2 < prints.size:
        message = f"map file {path!r} belongs to another gallery (fewer than half of its images are on it)"
        warnings.warn(MapFileWarning(message + "; ignored and recomputed"), stacklevel=3)
        return None
    out = np.empty((len(prints), 2), np.float32)
    out[known] = coordinates[found[known]]
    new = np.flatnonzero(~known)
    if new.size:
        out[new] = place_points(vectors[new], vectors[known], out[known], space)
    return GalleryMap(_state(prints, checks), out, method, int(new.size), sampled)


def _positions(kept: np.ndarray, prints: np.ndarray) -> np.ndarray:
    """For each of ``prints``, the row of ``kept`` holding it (the first one), or -1."""
    order = np.argsort(kept, kind="stable")
    ordered = kept[order]
    at = np.searchsorted(ordered, prints)
    inside = at < ordered.size
    hit = np.zeros(prints.shape[0], dtype=bool)
    hit[inside] = ordered[at[inside]] == prints[inside]
    found = np.full(prints.shape[0], -1, dtype=np.int64)
    found[hit] = order[at[hit]]
    return found


def gallery_map(
    store: InMemoryImageEmbeddingStore,
    *,
    method: str = "auto",
    store_file: Any = None,
    write: bool | None = None,
    seed: int = 0,
    sample: int | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> GalleryMap:
    """The 2-D map of ``store``'s gallery, computed once per gallery and kept in memory on the store.

    With ``store_file`` (or a file remembered by :func:`remember_map_file`), ``STORE.map`` is read
    when it maps this gallery (images added since are placed from their neighbours), and written
    when the map was (re)computed or extended; ``write=False`` never writes it. A ``method`` other
    than ``auto`` that differs from the kept map's recomputes it.

    ``sample``: a t-SNE map of more images than this (default
    :data:`~galleria.store._projection.TSNE_SAMPLE`; 0: never) lays out a seeded sample of that many
    and places the others from their neighbours in the store's graph (module docstring).

    ``on_progress(phase, done, total)`` (optional) follows a computation: the store's neighbour
    graph when it is built here (the phases of :func:`galleria.index.neighbor_graph.build_graph`,
    rows), then t-SNE's optimisation (``"t-SNE"``, iterations; see :data:`MAP_UNITS`). PCA and a
    kept map report nothing.

    Examples
    --------
    >>> vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c"], vectors, space="l2")
    >>> result = gallery_map(store, method="pca")
    >>> result.method, result.coordinates.shape
    ('pca', (3, 2))
    """
    check_choice("method", method, MAP_METHODS)
    check_callback("on_progress", on_progress)
    if sample is None:
        sample = TSNE_SAMPLE
    if type(sample) is not int or sample < 0:
        raise ValueError(f"sample must be a non-negative int (0: never sample), got {sample!r}")
    if not isinstance(store, InMemoryImageEmbeddingStore):
        raise TypeError(f"store must be an InMemoryImageEmbeddingStore, got {type(store).__name__}")
    if not store.is_built:
        raise RuntimeError("the store is not built yet; call build_store() first")
    rows, vectors = _rows_and_vectors(store)  # a read-only snapshot: no copy of an exact store's vectors
    with _LOCK:
        held = _HELD.get(store)
        path = map_file_for(store_file) if store_file is not None else _FILES.get(store)
    if held is not None and held.rows is rows and method in ("auto", held.result.method):
        return held.result
    keys = fingerprints(rows, vectors)  # type: ignore[arg-type]  # the store's path table: a Sequence[str]
    result = None
    if path is not None and os.path.lexists(path):
        result = _from_file(path, vectors, keys, store.space)
        if result is not None and method not in ("auto", result.method):
            result = None
    fresh = result is None or result.placed > 0
    if result is None:
        result = _computed(store, rows, vectors, _state(*keys), method, seed, sample, on_progress)
    if path is not None and fresh and write is not False:
        try:
            _write_map_file(path, keys, result)
        except (OSError, ValueError) as error:  # a full disk, or a name that is no regular file
            warnings.warn(
                MapFileWarning(f"the map file {path!r} could not be written: {error}"), stacklevel=2
            )
    result.coordinates.flags.writeable = False
    with _LOCK:
        if store._paths is rows:
            _HELD[store] = _Held(rows, result)
    return result


def _computed(
    store: InMemoryImageEmbeddingStore,
    rows: object,
    vectors: np.ndarray,
    state: str,
    method: str,
    seed: int,
    sample: int,
    on_progress: Callable[[str, int, int], None] | None,
) -> GalleryMap:
    """The map drawn anew: sampled (a large gallery) or projected whole."""
    sampled = sampled_map(store, rows, vectors, method, seed, sample, on_progress, MAP_THREADS)
    if sampled is not None:
        return GalleryMap(state, sampled[0], "tsne", 0, sampled[1])
    neighbors = map_neighbors(store, rows, method, on_progress)  # the store's graph, for t-SNE
    coordinates, used = project_vectors(
        vectors,
        store.space,
        method=method,
        seed=seed,
        threads=MAP_THREADS,
        neighbors=neighbors,
        on_progress=on_progress,
    )
    return GalleryMap(state, coordinates, used)
