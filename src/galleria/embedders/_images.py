"""Input checks shared by the embedders: a batch of RGB uint8 arrays or PIL images (made RGB)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from PIL import Image

from galleria.images.decoding import rgb_image

__all__ = ["check_images", "to_pil"]


def check_images(images: Any) -> list[Any]:
    """Return ``images`` as a list, accepting any sequence of images or an (N, H, W, 3) uint8 array."""
    if isinstance(images, np.ndarray):
        if images.ndim == 4:
            return list(images)
        raise ValueError(
            f"images given as one array must have shape (N, H, W, 3), got {images.shape}; "
            "pass a list to embed a single image"
        )
    if isinstance(images, (str, bytes, Image.Image)) or not isinstance(images, Iterable):
        raise TypeError(
            f"images must be a sequence of (H, W, 3) uint8 arrays or PIL images, got {type(images).__name__}"
        )
    return list(images)


def to_pil(image: Any, position: int) -> Image.Image:
    """Return ``images[position]`` as an RGB PIL image, checking arrays are (H, W, 3) uint8.

    PIL images follow the decoding rules of files (:mod:`galleria.images.decoding`): EXIF
    orientation, 16-bit and float scaling, transparency composited onto white.
    """
    if isinstance(image, Image.Image):
        return rgb_image(image)
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            raise TypeError(f"images[{position}] must be a uint8 array, got dtype {image.dtype}")
        if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] == 0 or image.shape[1] == 0:
            raise ValueError(f"images[{position}] must be an (H, W, 3) RGB array, got shape {image.shape}")
        return Image.fromarray(np.ascontiguousarray(image), mode="RGB")
    raise TypeError(
        f"images[{position}] must be an (H, W, 3) uint8 array or a PIL image, got {type(image).__name__}"
    )
