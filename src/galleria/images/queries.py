"""Turning the query forms a user may pass into a list of RGB uint8 arrays.

Accepted forms: one (H, W, 3) uint8 array, one PIL image, one file path (``str`` or
``os.PathLike``), a list or tuple of any mix of those, or an (N, H, W, 3) uint8 array (N images).
Arrays of another dtype raise TypeError, arrays of another shape ValueError; unreadable files
raise :class:`~galleria.images.reading.ImageReadError` naming the path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from PIL import Image

from galleria.images.decoding import rgb_array
from galleria.images.reading import read_rgb

__all__ = ["as_image_list", "as_text_list"]


def _check_image_array(name: str, array: np.ndarray) -> np.ndarray:
    if array.dtype != np.uint8:
        raise TypeError(f"{name} must be a uint8 RGB image array, got dtype {array.dtype}")
    if array.ndim != 3 or array.shape[2] != 3 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{name} must be an (H, W, 3) RGB image array, got shape {array.shape}")
    return array


def _one_image(name: str, item: Any, reader: Callable[[str], np.ndarray]) -> np.ndarray:
    if isinstance(item, np.ndarray):
        return _check_image_array(name, item)
    if isinstance(item, Image.Image):
        return rgb_array(item)
    if isinstance(item, (str, os.PathLike)):
        return reader(os.fspath(item))
    raise TypeError(
        f"{name} must be an (H, W, 3) uint8 array, a PIL image or an image path, got {type(item).__name__}"
    )


def as_image_list(
    queries: Any, name: str = "queries", *, reader: Callable[[str], np.ndarray] = read_rgb
) -> list[np.ndarray]:
    """Normalise query images into a non-empty list of (H, W, 3) uint8 RGB arrays.

    Parameters
    ----------
    queries
        One image (array, PIL image or path), a list/tuple of images, or an (N, H, W, 3) uint8 array.
    name : str
        The argument name used in error messages.
    reader : callable
        Decodes a path (the store passes :func:`~galleria.images.reading.reader_for` its embedder);
        PIL images follow the same rules (:func:`~galleria.images.decoding.rgb_array`).

    Examples
    --------
    >>> import numpy as np
    >>> len(as_image_list(np.zeros((2, 8, 8, 3), dtype=np.uint8)))
    2
    >>> as_image_list(np.zeros((8, 8, 3), dtype=np.uint8))[0].shape
    (8, 8, 3)
    """
    if isinstance(queries, np.ndarray):
        if queries.ndim == 4:
            if queries.dtype != np.uint8:
                raise TypeError(f"{name} must be a uint8 array of RGB images, got dtype {queries.dtype}")
            if queries.shape[0] == 0:
                raise ValueError(f"{name} must hold at least one image, got shape {queries.shape}")
            return [_check_image_array(f"{name}[{i}]", image) for i, image in enumerate(queries)]
        return [_check_image_array(name, queries)]
    if isinstance(queries, (Image.Image, str, os.PathLike)):
        return [_one_image(name, queries, reader)]
    if isinstance(queries, (list, tuple)):
        if not queries:
            raise ValueError(f"{name} must not be empty")
        return [_one_image(f"{name}[{i}]", item, reader) for i, item in enumerate(queries)]
    raise TypeError(
        f"{name} must be an image array, a PIL image, a path, a list of those, or an (N, H, W, 3) array; "
        f"got {type(queries).__name__}"
    )


def as_text_list(texts: Any, name: str = "texts") -> list[str]:
    """Normalise one string or a sequence of strings into a non-empty list of strings.

    Examples
    --------
    >>> as_text_list("a cat")
    ['a cat']
    """
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, bytes) or not isinstance(texts, Sequence):
        raise TypeError(f"{name} must be a string or a list of strings, got {type(texts).__name__}")
    result: list[str] = []
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{position}] must be a string, got {text!r} ({type(text).__name__})")
        result.append(text)
    if not result:
        raise ValueError(f"{name} must not be empty")
    return result
