"""Decoding an uploaded query image from bytes, with bounds on its size and pixel count."""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image

__all__ = ["DEFAULT_MAX_PIXELS", "UploadError", "decode_upload"]

#: Largest accepted image, in pixels (width × height), whatever its file size.
DEFAULT_MAX_PIXELS = 64_000_000


class UploadError(ValueError):
    """An upload that is not a usable image; ``too_large`` tells a size limit from bad content."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def decode_upload(data: bytes, *, max_bytes: int, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """The (H, W, 3) uint8 RGB array of an uploaded image file's bytes.

    Raises
    ------
    UploadError
        If ``data`` is empty, longer than ``max_bytes``, not an image Pillow can decode, or an image
        of more than ``max_pixels`` pixels (checked from its header, before it is decoded).

    Examples
    --------
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
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                if width * height > max_pixels:
                    raise UploadError(
                        f"the image is {width}×{height} pixels, over the limit of {max_pixels:,} pixels",
                        too_large=True,
                    )
                image.load()
                return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except UploadError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise UploadError("the upload is not an image galleria can read (PNG, JPEG, ...)") from None
