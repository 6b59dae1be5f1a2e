"""Decoding image files into RGB uint8 arrays (the rules: :mod:`galleria.embedders.decoding`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from galleria._validation import is_int
from galleria.embedders.base import input_size_of
from galleria.embedders.decoding import draft_for, rgb_array

__all__ = ["ImageReadError", "read_rgb", "reader_for"]


class ImageReadError(OSError):
    """An image file could not be opened or decoded; the message names the path.

    Attributes
    ----------
    path : str or None
        The file that could not be read.
    reason : str or None
        Why, in a few words (Pillow's message, or "decompression bomb: ...").
    """

    def __init__(self, message: str, *, path: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


def _check_min_size(min_size: Any) -> tuple[int, int] | None:
    if min_size is None:
        return None
    pair = (min_size, min_size) if not isinstance(min_size, (tuple, list)) else tuple(min_size)
    if len(pair) != 2 or not all(is_int(side) and side > 0 for side in pair):
        raise ValueError(f"min_size must be None, a positive int or a (width, height) pair, got {min_size!r}")
    return int(pair[0]), int(pair[1])


def _reason(error: Exception, name: str) -> str:
    """A short reason, without the path (the message adds it once)."""
    if isinstance(error, UnidentifiedImageError):
        return "cannot identify image file"
    if isinstance(error, OSError) and error.strerror:
        return str(error.strerror)
    return str(error).replace(f" {name!r}", "").strip() or type(error).__name__


def read_rgb(path: str | os.PathLike[str], min_size: int | tuple[int, int] | None = None) -> np.ndarray:
    """Read an image file as an (H, W, 3) uint8 RGB array, by the rules of :mod:`galleria.embedders.decoding`.

    Parameters
    ----------
    path : str or os.PathLike
        The image file.
    min_size : int, (int, int) or None
        With a (width, height), a large JPEG may be decoded at a reduced scale (1/2, 1/4 or 1/8) that
        keeps at least that size on each side (in display orientation). None (the default) decodes at
        full size.

    Raises
    ------
    ImageReadError
        If the file is missing, unreadable, not a decodable image, or larger than Pillow's
        decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``); the message names the path.
    ValueError
        If ``min_size`` is malformed.
    """
    name = os.fspath(path)
    size = _check_min_size(min_size)
    try:
        with Image.open(name) as image:
            draft_for(image, size)
            return rgb_array(image)
    except MemoryError:
        raise
    except Exception as error:  # Pillow's decoders raise many kinds (OSError, SyntaxError, struct.error...)
        reason = _reason(error, name)
        if isinstance(error, Image.DecompressionBombError):
            reason = f"decompression bomb: {reason}"
        raise ImageReadError(f"cannot read image {name!r}: {reason}", path=name, reason=reason) from error


def reader_for(embedder: object) -> Callable[[str], np.ndarray]:
    """The :func:`read_rgb` a store uses for ``embedder``: drafts to twice its ``input_size``, if declared.

    Examples
    --------
    >>> from galleria.embedders import PixelEmbedder
    >>> reader_for(PixelEmbedder(size=(32, 16))).keywords
    {'min_size': (64, 32)}
    """
    size = input_size_of(embedder)
    min_size = None if size is None else (2 * size[0], 2 * size[1])
    return partial(read_rgb, min_size=min_size)
