"""Small JPEG thumbnails of gallery images, and a bounded, thread-safe in-memory cache of them."""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict

import numpy as np
from PIL import Image

from galleria._validation import check_positive_int

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_THUMBNAIL_SIZE",
    "ThumbnailCache",
    "array_thumbnail",
    "make_thumbnail",
]

#: Longest side of a thumbnail, in pixels.
DEFAULT_THUMBNAIL_SIZE = 160
#: Default bound of a :class:`ThumbnailCache`, in bytes of JPEG data.
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024


def make_thumbnail(path: str | os.PathLike[str], size: int = DEFAULT_THUMBNAIL_SIZE) -> bytes:
    """The JPEG bytes of the image at ``path`` shrunk to fit in ``size`` × ``size`` (aspect kept).

    Raises OSError (or Pillow's ``UnidentifiedImageError``, an OSError) when the file cannot be read.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> path = tempfile.mkdtemp() + "/a.png"
    >>> Image.fromarray(np.zeros((300, 600, 3), np.uint8)).save(path)
    >>> Image.open(io.BytesIO(make_thumbnail(path, 100))).size
    (100, 50)
    """
    size = check_positive_int("size", size)
    with Image.open(os.fspath(path)) as image:
        image.draft("RGB", (size, size))  # JPEG: decode at a reduced scale
        picture = image.convert("RGB")
    return _jpeg(picture, size)


def array_thumbnail(pixels: np.ndarray, size: int = DEFAULT_THUMBNAIL_SIZE) -> bytes:
    """The JPEG bytes of an (H, W, 3) uint8 RGB array shrunk to fit in ``size`` × ``size``."""
    return _jpeg(Image.fromarray(np.asarray(pixels, dtype=np.uint8)), check_positive_int("size", size))


def _jpeg(picture: Image.Image, size: int) -> bytes:
    picture.thumbnail((size, size), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    picture.convert("RGB").save(buffer, format="JPEG", quality=85)
    return buffer.getvalue()


class ThumbnailCache:
    """Thumbnails made on first request and kept, least recently used first out, within ``max_bytes``.

    Safe to share between threads: lookups and insertions hold one lock; thumbnails are made outside it.

    Parameters
    ----------
    max_bytes : int
        Upper bound of the JPEG bytes held.
    size : int
        Longest side of the thumbnails.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> path = tempfile.mkdtemp() + "/a.png"
    >>> Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(path)
    >>> cache = ThumbnailCache(max_bytes=1 << 20, size=32)
    >>> cache.get(path) is cache.get(path), len(cache)
    (True, 1)
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES, size: int = DEFAULT_THUMBNAIL_SIZE) -> None:
        self._max_bytes = check_positive_int("max_bytes", max_bytes)
        self._size = check_positive_int("size", size)
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes held now (never above ``max_bytes``)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def get(self, path: str) -> bytes:
        """The thumbnail of ``path``, made and cached on first use (OSError if it cannot be read)."""
        with self._lock:
            data = self._items.get(path)
            if data is not None:
                self._items.move_to_end(path)
                return data
        data = make_thumbnail(path, self._size)
        with self._lock:
            if path in self._items or len(data) > self._max_bytes:
                return self._items.get(path, data)
            self._items[path] = data
            self._bytes += len(data)
            while self._bytes > self._max_bytes:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= len(dropped)
        return data
