"""Uploaded query images: decoded from bytes within bounds, and the last few kept to search again.

The pixels come from galleria's one image reader (:func:`galleria.images.reading.decode_rgb`), so an
uploaded copy of a gallery file decodes exactly as the gallery did (EXIF orientation, transparency on
white, 16-bit scaling, CMYK, first frame, the same draft scale for large JPEGs).
"""

from __future__ import annotations

import re
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from galleria._validation import check_positive_int
from galleria.images.reading import DEFAULT_MAX_PIXELS, ImageReadError, ImageTooLargeError, decode_rgb

__all__ = ["DEFAULT_MAX_PIXELS", "KeptUpload", "UploadError", "UploadStore", "decode_upload"]


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
        The draft size of the store's reader (:func:`galleria.images.reading.draft_size_for`), so that
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


#: Uploads an :class:`UploadStore` keeps by default, and the bytes they may hold together.
DEFAULT_KEPT_UPLOADS = 32
DEFAULT_KEPT_BYTES = 128 * 1024 * 1024
#: The form of an upload id: 22 URL-safe characters (128 random bits).
_ID = re.compile(r"[A-Za-z0-9_-]{22}")


@dataclass(frozen=True)
class KeptUpload:
    """An upload kept for the session: the file's bytes and a JPEG preview of the image."""

    data: bytes
    preview: bytes


class UploadStore:
    """The last uploads, by unguessable id, so a page can search the same image again with other settings.

    At most ``max_items`` uploads and ``max_bytes`` bytes (file bytes plus previews) are kept; the
    least recently used go first. Ids are 128 random bits (:func:`secrets.token_urlsafe`), so one
    visitor cannot reach another's upload by guessing. Safe to share between threads.

    Examples
    --------
    >>> store = UploadStore(max_items=2)
    >>> first = store.add(b"one", b"p1"); second = store.add(b"two", b"p2"); third = store.add(b"3", b"p3")
    >>> store.get(first) is None, store.get(third).data, len(store)
    (True, b'3', 2)
    >>> store.get("../../etc/passwd") is None
    True
    """

    def __init__(self, max_items: int = DEFAULT_KEPT_UPLOADS, max_bytes: int = DEFAULT_KEPT_BYTES) -> None:
        self._max_items = check_positive_int("max_items", max_items)
        self._max_bytes = check_positive_int("max_bytes", max_bytes)
        self._items: OrderedDict[str, KeptUpload] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        """Bytes held now (never above ``max_bytes``)."""
        return self._bytes

    def add(self, data: bytes, preview: bytes) -> str:
        """Keep an upload's bytes and preview; return its new id (UploadError if it alone is too large)."""
        size = len(data) + len(preview)
        if size > self._max_bytes:
            raise UploadError(
                f"the upload is {size / 1e6:.1f} MB, more than the {self._max_bytes / 1e6:.1f} MB "
                "kept for uploads",
                too_large=True,
            )
        key = secrets.token_urlsafe(16)
        with self._lock:
            self._items[key] = KeptUpload(data, preview)
            self._bytes += size
            while len(self._items) > self._max_items or self._bytes > self._max_bytes:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= len(dropped.data) + len(dropped.preview)
        return key

    def get(self, key: object) -> KeptUpload | None:
        """The upload kept under ``key``; None when it is unknown, malformed or no longer kept."""
        if not isinstance(key, str) or not _ID.fullmatch(key):
            return None
        with self._lock:
            kept = self._items.get(key)
            if kept is not None:
                self._items.move_to_end(key)
            return kept
