"""The gallery store: embed image files once, search them by image, text or vector, save and load.

Public names: :class:`InMemoryImageEmbeddingStore`, :class:`Candidate`, :func:`read_rgb` and
:class:`ImageReadError`.
"""

from __future__ import annotations

from galleria.images.reading import ImageReadError, read_rgb
from galleria.store.candidate import Candidate
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = ["Candidate", "ImageReadError", "InMemoryImageEmbeddingStore", "read_rgb"]
