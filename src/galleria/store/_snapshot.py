"""One gallery state of a store, read under its lock, and the statistics that describe it.

The store and everything above it (the re-rankers' caches, the adaptive rules) read "the whole gallery
of one state" through :func:`take_snapshot`; :func:`store_statistics` gives the gallery's recorded
statistics while they still describe it, else computes and records them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from galleria.statistics import GalleryStatistics, gallery_statistics

if TYPE_CHECKING:
    from galleria.store._core import StoreCore

__all__ = ["GallerySnapshot", "gallery_state", "snapshot_locked", "store_statistics", "take_snapshot"]


@dataclass(frozen=True)
class GallerySnapshot:
    """The whole gallery of one state: its token, the path table and the (n, d) stored vectors."""

    state: int
    paths: Any
    vectors: np.ndarray
    space: str


def gallery_state(store: StoreCore) -> int:
    """The token of the store's current gallery state (changes with every add or remove)."""
    token: int = store._paths.token
    return token


def snapshot_locked(store: StoreCore) -> GallerySnapshot:
    """The store's whole gallery; call it holding the store's read lock."""
    paths = store._paths
    vectors = store._gallery_vectors(np.arange(len(paths), dtype=np.int64))
    return GallerySnapshot(paths.token, paths, vectors, store.space)


def take_snapshot(store: StoreCore) -> GallerySnapshot:
    """The store's whole gallery, read under its read lock (one state)."""
    with store._lock.reading():
        return snapshot_locked(store)


def store_statistics(store: Any) -> GalleryStatistics:
    """The statistics of a store's gallery: the recorded ones while they still describe it, else computed.

    A store records them when it is built (and keeps them in its file); ``add_images`` /
    ``remove_images`` drop them, and the next call computes and records them again.
    """
    recorded = getattr(store, "_rerank_statistics", None)
    if isinstance(recorded, GalleryStatistics) and recorded.n_items == len(store):
        return recorded
    snapshot = take_snapshot(store)  # the vectors of one gallery state
    stats = gallery_statistics(snapshot.vectors, space=store.space)
    with store._lock.writing():
        if gallery_state(store) == snapshot.state:  # kept only while they describe the gallery
            store._rerank_statistics = stats
    return stats
