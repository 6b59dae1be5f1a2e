"""Small JPEG thumbnails of gallery images, and a bounded, thread-safe in-memory cache of them.

Pixels come from galleria's one image reader (:func:`galleria.images.reading.read_rgb_image`): EXIF
orientation, transparency on white, 16-bit scaling, a draft scale for large JPEGs and the pixel limit
of uploads, checked from the header before anything is decoded. Pillow is used here only to shrink and
encode pixels that reader decoded.
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
from PIL import Image

from galleria._validation import check_positive_int
from galleria.images.reading import DEFAULT_MAX_PIXELS, read_rgb_image
from galleria.viewer.flight import SingleFlight

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_THUMBNAIL_SIZE",
    "MAX_CONCURRENT_DECODES",
    "ThumbnailCache",
    "array_thumbnail",
    "encode_pixels",
    "make_thumbnail",
]

#: Longest side of a thumbnail, in pixels.
DEFAULT_THUMBNAIL_SIZE = 160
#: Default bound of a :class:`ThumbnailCache`, in bytes of JPEG data.
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: Images a :class:`ThumbnailCache` decodes at once (bounds memory: each may hold up to the pixel limit).
MAX_CONCURRENT_DECODES = 2


def make_thumbnail(
    path: str | os.PathLike[str],
    size: int = DEFAULT_THUMBNAIL_SIZE,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> bytes:
    """The JPEG bytes of the image at ``path`` shrunk to fit in ``size`` × ``size`` (aspect kept).

    Raises :class:`~galleria.images.reading.ImageReadError` (an OSError) when the file cannot be read,
    and its subclass ``ImageTooLargeError`` for an image of more than ``max_pixels`` pixels.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> path = tempfile.mkdtemp() + "/a.png"
    >>> Image.fromarray(np.zeros((300, 600, 3), np.uint8)).save(path)
    >>> from galleria.images.reading import decode_rgb
    >>> decode_rgb(make_thumbnail(path, 100)).shape  # height, width, channels
    (50, 100, 3)
    """
    size = check_positive_int("size", size)
    return _jpeg(read_rgb_image(path, (size, size), max_pixels=max_pixels), size)


def array_thumbnail(pixels: np.ndarray, size: int = DEFAULT_THUMBNAIL_SIZE) -> bytes:
    """The JPEG bytes of an (H, W, 3) uint8 RGB array shrunk to fit in ``size`` × ``size``."""
    return _jpeg(Image.fromarray(np.asarray(pixels, dtype=np.uint8)), check_positive_int("size", size))


def encode_pixels(pixels: np.ndarray | Image.Image, image_format: str) -> bytes:
    """The ``"PNG"`` or ``"JPEG"`` (quality 95) bytes of an (H, W, 3) uint8 RGB array or an RGB image.

    Examples
    --------
    >>> encode_pixels(np.zeros((2, 3, 3), np.uint8), "PNG")[:4]
    b'\\x89PNG'
    """
    if image_format not in {"PNG", "JPEG"}:
        raise ValueError(f"image_format must be 'PNG' or 'JPEG', got {image_format!r}")
    buffer = io.BytesIO()
    options = {"quality": 95} if image_format == "JPEG" else {"compress_level": 3}
    picture = (
        pixels if isinstance(pixels, Image.Image) else Image.fromarray(np.asarray(pixels, np.uint8), "RGB")
    )
    picture.save(buffer, image_format, **options)
    return buffer.getvalue()


def _jpeg(picture: Image.Image, size: int) -> bytes:
    picture.thumbnail((size, size), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    picture.convert("RGB").save(buffer, format="JPEG", quality=85)
    return buffer.getvalue()


class ThumbnailCache:
    """Thumbnails made on first request and kept, least recently used first out, within ``max_bytes``.

    Safe to share between threads: lookups and insertions hold one lock; thumbnails are made outside it,
    at most :data:`MAX_CONCURRENT_DECODES` at a time, each from decoding to its JPEG bytes (so
    concurrent requests for large images cannot multiply the memory one thumbnail takes), and
    concurrent misses of one path are merged: it is decoded once, the others wait for its bytes.

    Parameters
    ----------
    max_bytes : int
        Upper bound of the JPEG bytes held.
    size : int
        Longest side of the thumbnails.
    max_pixels : int or None
        Largest image decoded (width × height, from the header); larger ones raise
        ``ImageTooLargeError``.
    reader : callable, optional
        Decodes a key into an RGB PIL image (or an (H, W, 3) uint8 array), given ``(key, min_size,
        max_pixels)``; the default is :func:`~galleria.images.reading.read_rgb_image` (keys are
        paths). ``galleria serve`` passes one that checks the path against the gallery root first.
    decoding : threading.Semaphore, optional
        Held while a thumbnail is made (decode, shrink, encode); ``galleria serve`` shares one with
        its full-size images. Default: a semaphore of :data:`MAX_CONCURRENT_DECODES`.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> path = tempfile.mkdtemp() + "/a.png"
    >>> Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(path)
    >>> cache = ThumbnailCache(max_bytes=1 << 20, size=32)
    >>> cache.get(path) is cache.get(path), len(cache)
    (True, 1)
    """

    def __init__(
        self,
        max_bytes: int = DEFAULT_CACHE_BYTES,
        size: int = DEFAULT_THUMBNAIL_SIZE,
        *,
        max_pixels: int | None = DEFAULT_MAX_PIXELS,
        reader: Callable[[str, tuple[int, int], int | None], np.ndarray | Image.Image] | None = None,
        decoding: threading.Semaphore | None = None,
    ) -> None:
        self._max_bytes = check_positive_int("max_bytes", max_bytes)
        self._size = check_positive_int("size", size)
        self._max_pixels = None if max_pixels is None else check_positive_int("max_pixels", max_pixels)
        self._reader = reader if reader is not None else _read_path
        self._decoding = threading.BoundedSemaphore(MAX_CONCURRENT_DECODES) if decoding is None else decoding
        self._flight: SingleFlight[bytes] = SingleFlight()
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
        """The thumbnail of ``path``, made and cached on first use.

        Raises :class:`~galleria.images.reading.ImageReadError` (an OSError) if it cannot be read, or
        ``ImageTooLargeError`` if it is over the pixel limit; failures are not cached.
        """
        with self._lock:
            data = self._items.get(path)
            if data is not None:
                self._items.move_to_end(path)
                return data
        return self._flight.do(path, lambda: self._make(path))

    def _make(self, path: str) -> bytes:
        """Decode, shrink and encode ``path`` under the semaphore, then keep the bytes."""
        with self._decoding:
            pixels = self._reader(path, (self._size, self._size), self._max_pixels)
            picture = (
                pixels if isinstance(pixels, Image.Image) else Image.fromarray(np.asarray(pixels, np.uint8))
            )
            del pixels
            data = _jpeg(picture, self._size)
            del picture
        with self._lock:
            if path in self._items or len(data) > self._max_bytes:
                return self._items.get(path, data)
            self._items[path] = data
            self._bytes += len(data)
            while self._bytes > self._max_bytes:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= len(dropped)
        return data


def _read_path(path: str, min_size: tuple[int, int], max_pixels: int | None) -> Image.Image:
    return read_rgb_image(path, min_size, max_pixels=max_pixels)
