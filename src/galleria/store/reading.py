"""Decoding image files into RGB uint8 arrays."""

from __future__ import annotations

import os

import numpy as np
from PIL import Image

__all__ = ["ImageReadError", "read_rgb"]


class ImageReadError(OSError):
    """An image file could not be opened or decoded; the message names the path."""


def read_rgb(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an image file as an (H, W, 3) uint8 RGB array.

    Raises
    ------
    ImageReadError
        If the file is missing, unreadable, or not a decodable image; the message names the path.
    """
    name = os.fspath(path)
    try:
        with Image.open(name) as image:
            return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        raise ImageReadError(f"cannot read image {name!r}: {error}") from error
