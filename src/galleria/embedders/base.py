"""The contract every embedder follows.

An embedder turns a batch of RGB images into an (n, d) float32 array. Anything with an ``embed``
method works; ``batch_size`` is optional (:func:`batch_size_of` falls back to a default), and
``embed_text`` is present only for embedders with a text side (CLIP). ``config()`` returns a
JSON-able dict with a ``"type"`` key so a saved store can rebuild its embedder without pickle.
``input_size`` is optional too: the (width, height) an embedder resizes its images to, or an int for a
square; a store then decodes large JPEGs at a reduced scale that keeps twice that size
(:func:`input_size_of`). An embedder whose first step resizes to a known size may declare that size
as ``draft_size`` (width, height) instead: large JPEGs are then decoded at the smallest scale that
keeps it (:func:`galleria.images.reading.draft_size_for`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from PIL import Image

from galleria._moved import moved_names
from galleria._validation import is_int

__all__ = ["DEFAULT_BATCH_SIZE", "Embedder", "ImageInput", "TextEmbedder", "batch_size_of"]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(__name__, {"input_size_of": "galleria.images.reading"})

#: A single image: an (H, W, 3) uint8 RGB array or a PIL image.
ImageInput = np.ndarray | Image.Image

DEFAULT_BATCH_SIZE = 32


@runtime_checkable
class Embedder(Protocol):
    """Maps images to vectors."""

    def embed(self, images: Sequence[ImageInput]) -> np.ndarray:
        """Return an (len(images), d) float32 array."""
        ...


@runtime_checkable
class TextEmbedder(Embedder, Protocol):
    """An embedder with a text side in the same space as its images."""

    def embed_text(self, texts: Sequence[str]) -> np.ndarray:
        """Return an (len(texts), d) float32 array."""
        ...


def batch_size_of(embedder: object) -> int:
    """The embedder's ``batch_size`` if it has a positive integer one, else :data:`DEFAULT_BATCH_SIZE`."""
    size: Any = getattr(embedder, "batch_size", None)
    if is_int(size) and size > 0:
        return int(size)
    return DEFAULT_BATCH_SIZE
