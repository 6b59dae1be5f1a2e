"""Embedders: turn images (and, for CLIP, texts) into vectors.

:class:`ClipEmbedder` imports torch and open_clip only when it is instantiated.
"""

from __future__ import annotations

from galleria.embedders._weights import lite0_package_file
from galleria.embedders.base import DEFAULT_BATCH_SIZE, Embedder, ImageInput, TextEmbedder, batch_size_of
from galleria.embedders.clip import ClipEmbedder
from galleria.embedders.pixel import PixelEmbedder
from galleria.embedders.registry import EMBEDDER_TYPES, embedder_config, embedder_from_config
from galleria.embedders.timm import TimmEmbedder
from galleria.images.reading import input_size_of

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "EMBEDDER_TYPES",
    "ClipEmbedder",
    "Embedder",
    "ImageInput",
    "PixelEmbedder",
    "TextEmbedder",
    "TimmEmbedder",
    "batch_size_of",
    "embedder_config",
    "embedder_from_config",
    "input_size_of",
    "lite0_package_file",
]
