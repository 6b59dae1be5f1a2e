"""Decoding an uploaded query image from bytes, with bounds on its size and pixel count.

The pixels come from galleria's one image reader (:func:`galleria.store.reading.decode_rgb`), so an
uploaded copy of a gallery file decodes exactly as the gallery did (EXIF orientation, transparency on
white, 16-bit scaling, CMYK, first frame, the same draft scale for large JPEGs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria.store.reading import DEFAULT_MAX_PIXELS, ImageReadError, ImageTooLargeError, decode_rgb

__all__ = ["DEFAULT_MAX_PIXELS", "UploadError", "decode_upload"]


class UploadError(ValueError):
    """An upload that is not a usable image; ``too_large`` tells a size limit from bad content."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def decode_upload(
    data: bytes,
    *,
    max_bytes: int,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    min_size: Any = None,
) -> np.ndarray:
    """The (H, W, 3) uint8 RGB array of an uploaded image file's bytes.

    Parameters
    ----------
    data : bytes
        The uploaded file.
    max_bytes : int
        Longest accepted upload.
    max_pixels : int
        Largest accepted width × height, checked from the header before decoding.
    min_size : (int, int) or None
        The draft size of the store's reader (:func:`galleria.store.reading.draft_size_for`), so that
        a large JPEG decodes at the scale its gallery copy was read at.

    Raises
    ------
    UploadError
        If ``data`` is empty, longer than ``max_bytes``, not an image galleria can decode, or an image
        of more than ``max_pixels`` pixels (``too_large`` is then True).

    Examples
    --------
    >>> import io
    >>> from PIL import Image
    >>> buffer = io.BytesIO(); Image.new("RGB", (4, 3)).save(buffer, "PNG")
    >>> decode_upload(buffer.getvalue(), max_bytes=1 << 20).shape
    (3, 4, 3)
    >>> decode_upload(b"hello", max_bytes=1 << 20)
    Traceback (most recent call last):
    ...
    galleria.viewer.uploads.UploadError: the upload is not an image galleria can read (PNG, JPEG, ...)
    """
    if not data:
        raise UploadError("the upload is empty; choose an image file")
    if len(data) > max_bytes:
        raise UploadError(
            f"the upload is {len(data) / 1e6:.1f} MB, over the limit of {max_bytes / 1e6:.1f} MB",
            too_large=True,
        )
    try:
        return decode_rgb(data, min_size, max_pixels=max_pixels, name="upload")
    except ImageTooLargeError as error:
        size = f"{error.pixels:,} pixels" if error.pixels else "a decompression bomb"
        raise UploadError(
            f"the image is {size}, over the limit of {max_pixels:,} pixels", too_large=True
        ) from None
    except ImageReadError:
        raise UploadError("the upload is not an image galleria can read (PNG, JPEG, ...)") from None
