"""Embedders: turn images (and, for CLIP, texts) into vectors.

:class:`ClipEmbedder` imports torch and open_clip only when it is instantiated.
"""

from __future__ import annotations

from galleria.embedders._cache import model_key, onnx_path, remember_checkpoint
from galleria.embedders._checkpoint import file_sha256
from galleria.embedders._lite0 import LITE0_MODEL, writes_without_torch
from galleria.embedders._onnx import cached_entry, verified_bytes
from galleria.embedders._runtime import choose_runtime
from galleria.embedders._weights import (
    LITE0_FILE,
    LITE0_PACKAGE,
    LITE0_SHA256,
    describe_weights,
    lite0_package_file,
)
from galleria.embedders.base import DEFAULT_BATCH_SIZE, Embedder, ImageInput, TextEmbedder, batch_size_of
from galleria.embedders.clip import ClipEmbedder
from galleria.embedders.pixel import PixelEmbedder
from galleria.embedders.registry import EMBEDDER_TYPES, embedder_config, embedder_from_config
from galleria.embedders.timm import TimmEmbedder
from galleria.images.reading import input_size_of

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "EMBEDDER_TYPES",
    "LITE0_FILE",
    "LITE0_MODEL",
    "LITE0_PACKAGE",
    "LITE0_SHA256",
    "ClipEmbedder",
    "Embedder",
    "ImageInput",
    "PixelEmbedder",
    "TextEmbedder",
    "TimmEmbedder",
    "batch_size_of",
    "cached_entry",
    "choose_runtime",
    "describe_weights",
    "embedder_config",
    "embedder_from_config",
    "file_sha256",
    "input_size_of",
    "lite0_package_file",
    "model_key",
    "onnx_path",
    "remember_checkpoint",
    "verified_bytes",
    "writes_without_torch",
]
