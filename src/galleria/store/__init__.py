"""The gallery store: embed image files once, search them by image, text or vector, save and load.

Public names: :class:`InMemoryImageEmbeddingStore`, :class:`Candidate`, :func:`read_rgb` and
:class:`ImageReadError`.
"""

from __future__ import annotations

from galleria.images.reading import ImageReadError, read_rgb
from galleria.store._checks import check_embedder_dim, resolve_index
from galleria.store._projection import TSNE_SAMPLE
from galleria.store._snapshot import (
    GallerySnapshot,
    gallery_state,
    snapshot_locked,
    store_statistics,
    take_snapshot,
)
from galleria.store._state import OfflineDiffusion
from galleria.store._urls import is_url
from galleria.store.candidate import Candidate
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = [
    "TSNE_SAMPLE",
    "Candidate",
    "GallerySnapshot",
    "ImageReadError",
    "InMemoryImageEmbeddingStore",
    "OfflineDiffusion",
    "check_embedder_dim",
    "gallery_state",
    "is_url",
    "read_rgb",
    "resolve_index",
    "snapshot_locked",
    "store_statistics",
    "take_snapshot",
]
