"""The one image reader of galleria: images decoded to RGB uint8 arrays (rules: images.decoding).

Gallery files, query files, uploaded bytes, thumbnails and the report's contact sheets all go through
:func:`read_rgb` (a path) or :func:`decode_rgb` (bytes or an open binary file); no other module of
galleria opens an image with Pillow. Both apply a pixel limit checked on the header, before anything is
decoded, and neither lets a Pillow warning reach the user: problems are raised as
:class:`ImageReadError`.
"""

from __future__ import annotations

import io
import os
import re
import stat
import threading
import warnings
from collections.abc import Callable
from functools import partial
from typing import IO, Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from galleria._validation import is_int
from galleria.images.decoding import draft_for, rgb_array, rgb_image

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "ImageReadError",
    "ImageTooLargeError",
    "decode_rgb",
    "draft_size_for",
    "input_size_of",
    "read_image_size",
    "read_rgb",
    "read_rgb_image",
    "reader_for",
]

#: The pixel limit of uploads and thumbnails (width × height of the full image, from its header).
DEFAULT_MAX_PIXELS = 64_000_000

#: Warnings raised inside Pillow's own modules (EXIF and TIFF tag notes, APNG fallbacks, the
#: decompression-bomb notice): galleria reports what matters as an ImageReadError instead.
_PILLOW_MODULES = r"PIL(\.|$)"
_PILLOW_WARNINGS = ("ignore", None, Warning, re.compile(_PILLOW_MODULES), 0)
_QUIET_LOCK = threading.Lock()


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


class ImageTooLargeError(ImageReadError):
    """An image with more pixels than the reader's limit (or Pillow's decompression-bomb limit).

    Raised from the header, before the pixels are decoded. ``pixels`` is its width × height.
    """

    def __init__(self, message: str, *, path: str | None, reason: str, pixels: int) -> None:
        super().__init__(message, path=path, reason=reason)
        self.pixels = pixels


def _quiet_pillow() -> None:
    """Make sure Pillow's own warnings are ignored (one filter, added once; cheap to call again).

    A filter rather than ``warnings.catch_warnings``, which is not safe in the decoding threads.
    """
    if _PILLOW_WARNINGS in warnings.filters:
        return
    with _QUIET_LOCK:  # other decoding threads wait until the filter is in
        if _PILLOW_WARNINGS not in warnings.filters:
            warnings.filterwarnings("ignore", module=_PILLOW_MODULES)


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


def _check_max_pixels(max_pixels: Any) -> int | None:
    if max_pixels is None:
        return None
    if not is_int(max_pixels) or max_pixels <= 0:
        raise ValueError(f"max_pixels must be None or a positive int, got {max_pixels!r}")
    return int(max_pixels)


def _decode(
    source: str | IO[bytes], name: str, size: tuple[int, int] | None, limit: int | None
) -> np.ndarray:
    """Open ``source`` (a path or a binary file object) and decode it; every failure an ImageReadError."""
    array = _decode_any(source, name, size, limit, as_image=False)
    assert isinstance(array, np.ndarray)
    return array


def _decode_any(
    source: str | IO[bytes], name: str, size: tuple[int, int] | None, limit: int | None, *, as_image: bool
) -> np.ndarray | Image.Image:
    _quiet_pillow()
    try:
        with Image.open(source) as image:
            draft_for(image, size)  # a JPEG's size is now the reduced one it will be decoded at
            pixels = image.size[0] * image.size[1]
            if limit is not None and pixels > limit:
                reason = f"{image.size[0]}×{image.size[1]} is {pixels:,} pixels, over the limit of {limit:,}"
                raise ImageTooLargeError(
                    f"cannot read image {name!r}: {reason}", path=name, reason=reason, pixels=pixels
                )
            if not as_image:
                return rgb_array(image)
            picture = rgb_image(image)
            picture.load()
            return picture
    except (MemoryError, ImageReadError):
        raise
    except Image.DecompressionBombError as error:
        reason = f"decompression bomb: {_reason(error, name)}"
        found = re.search(r"\((\d+) pixels\)", str(error))
        raise ImageTooLargeError(
            f"cannot read image {name!r}: {reason}",
            path=name,
            reason=reason,
            pixels=int(found.group(1)) if found else 0,
        ) from error
    except Exception as error:  # Pillow's decoders raise many kinds (OSError, SyntaxError, struct.error...)
        reason = _reason(error, name)
        raise ImageReadError(f"cannot read image {name!r}: {reason}", path=name, reason=reason) from error


def decode_rgb(
    data: bytes | bytearray | memoryview | IO[bytes],
    min_size: int | tuple[int, int] | None = None,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    name: str = "upload",
) -> np.ndarray:
    """Decode an image held in memory (or an open binary file) as an (H, W, 3) uint8 RGB array.

    The same rules and the same draft decoding as :func:`read_rgb`, so the bytes of a gallery file
    decode to exactly the pixels the gallery was built from.

    Parameters
    ----------
    data : bytes-like or binary file object
        The encoded image (PNG, JPEG, GIF, WebP, TIFF, ...). A file object is read from its current
        position and is not closed.
    min_size : int, (int, int) or None
        As in :func:`read_rgb` (a large JPEG may be decoded at a reduced scale keeping that size).
    max_pixels : int or None
        Largest accepted width × height, checked from the header before decoding (default
        :data:`DEFAULT_MAX_PIXELS`); for a JPEG drafted by ``min_size``, the reduced size it is
        decoded at. None keeps only Pillow's decompression-bomb limit (on the full size).
    name : str
        What the error messages call the image.

    Raises
    ------
    ImageTooLargeError
        If the image has more than ``max_pixels`` pixels (or is a decompression bomb).
    ImageReadError
        If the data is empty or not a decodable image.
    TypeError, ValueError
        If an argument is of the wrong kind or value.

    Examples
    --------
    >>> from PIL import Image
    >>> buffer = io.BytesIO(); Image.new("LA", (4, 3), (0, 0)).save(buffer, "PNG")
    >>> decode_rgb(buffer.getvalue())[0, 0].tolist()  # transparent → white
    [255, 255, 255]
    >>> decode_rgb(b"not an image")
    Traceback (most recent call last):
    ...
    galleria.images.reading.ImageReadError: cannot read image 'upload': cannot identify image file
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    size = _check_min_size(min_size)
    limit = _check_max_pixels(max_pixels)
    return _decode(_in_memory(data, name), name, size, limit)


def _in_memory(data: Any, name: str) -> IO[bytes]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        if len(data) == 0:
            raise ImageReadError(f"cannot read image {name!r}: empty", path=name, reason="empty")
        return io.BytesIO(data)
    if not (callable(getattr(data, "read", None)) and callable(getattr(data, "seek", None))):
        raise TypeError(f"data must be bytes or a binary file object, got {type(data).__name__}")
    return data  # type: ignore[no-any-return]


def _regular_file(path: str) -> str:
    """``path`` if it is a regular file; ImageReadError without opening it otherwise (a FIFO would block)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ImageReadError(
                f"cannot read image {path!r}: not a regular file", path=path, reason="not a regular file"
            )
    except ImageReadError:
        raise
    except OSError as error:
        reason = _reason(error, path)
        raise ImageReadError(f"cannot read image {path!r}: {reason}", path=path, reason=reason) from error
    return path


def read_rgb_image(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes],
    min_size: int | tuple[int, int] | None = None,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    name: str | None = None,
) -> Image.Image:
    """The pixels :func:`read_rgb` / :func:`decode_rgb` give, as an 8-bit RGB PIL image (no array copy).

    For callers that only shrink or re-encode the pixels (thumbnails, ``galleria serve``'s ``/image``):
    a path, bytes or an open binary file; the same rules, draft, pixel limit (default
    :data:`DEFAULT_MAX_PIXELS`) and errors.

    Examples
    --------
    >>> from PIL import Image
    >>> buffer = io.BytesIO(); Image.new("RGBA", (4, 3), (0, 0, 0, 0)).save(buffer, "PNG")
    >>> picture = read_rgb_image(buffer.getvalue())
    >>> picture.mode, picture.size, picture.getpixel((0, 0))
    ('RGB', (4, 3), (255, 255, 255))
    """
    size = _check_min_size(min_size)
    limit = _check_max_pixels(max_pixels)
    opened: str | IO[bytes]
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        label = path if name is None else name
        opened = _regular_file(path)
    else:
        label = "upload" if name is None else name
        opened = _in_memory(source, label)
    if not isinstance(label, str):
        raise TypeError(f"name must be a str, got {type(label).__name__}")
    picture = _decode_any(opened, label, size, limit, as_image=True)
    assert isinstance(picture, Image.Image)
    return picture


def read_rgb(
    path: str | os.PathLike[str],
    min_size: int | tuple[int, int] | None = None,
    *,
    max_pixels: int | None = None,
) -> np.ndarray:
    """Read an image file as an (H, W, 3) uint8 RGB array, by the rules of :mod:`galleria.images.decoding`.

    Parameters
    ----------
    path : str or os.PathLike
        The image file.
    min_size : int, (int, int) or None
        With a (width, height), a large JPEG may be decoded at a reduced scale (1/2, 1/4 or 1/8) that
        keeps at least that size on each side (in display orientation). None (the default) decodes at
        full size.
    max_pixels : int or None
        Largest accepted width × height, checked from the header before decoding (for a drafted
        JPEG, its reduced size). None (the default) keeps Pillow's decompression-bomb limit only.

    Raises
    ------
    ImageReadError
        If the file is missing, not a regular file (a folder, FIFO or device is refused without
        opening it), unreadable, not a decodable image, or larger than Pillow's
        decompression-bomb limit (twice ``PIL.Image.MAX_IMAGE_PIXELS``); the message names the path.
        :class:`ImageTooLargeError` (an ImageReadError) for an image over ``max_pixels`` or a bomb.
    ValueError
        If ``min_size`` or ``max_pixels`` is malformed.
    """
    name = os.fspath(path)
    size = _check_min_size(min_size)
    limit = _check_max_pixels(max_pixels)
    return _decode(_regular_file(name), name, size, limit)


def read_image_size(path: str | os.PathLike[str]) -> tuple[int, int]:
    """An image file's (width, height) as displayed (EXIF orientation applied), from its header alone.

    Nothing is decoded: Pillow reads the header (a few kilobytes) of a regular file. ImageReadError
    naming the path for a missing, irregular or unidentifiable file.

    Examples
    --------
    >>> import tempfile
    >>> from PIL import Image
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     Image.new("RGB", (6, 4)).save(folder + "/a.png")
    ...     read_image_size(folder + "/a.png")
    (6, 4)
    """
    from galleria.images.decoding import _orientation

    name = os.fspath(path)
    _quiet_pillow()
    try:
        with Image.open(_regular_file(name)) as image:
            width, height = image.size
            turned = _orientation(image) in (5, 6, 7, 8)  # stored on its side
    except ImageReadError:
        raise
    except Exception as error:  # as _decode_any: Pillow raises many kinds
        reason = _reason(error, name)
        raise ImageReadError(f"cannot read image {name!r}: {reason}", path=name, reason=reason) from error
    return (height, width) if turned else (width, height)


def input_size_of(embedder: object) -> tuple[int, int] | None:
    """The embedder's ``input_size`` as (width, height), or None if it declares none (or a malformed one).

    Examples
    --------
    >>> from galleria.embedders import PixelEmbedder
    >>> input_size_of(PixelEmbedder(size=(8, 4))), input_size_of(object())
    ((8, 4), None)
    """
    size: Any = getattr(embedder, "input_size", None)
    pair = (size, size) if is_int(size) else size
    if isinstance(pair, (tuple, list)) and len(pair) == 2 and all(is_int(side) and side > 0 for side in pair):
        return int(pair[0]), int(pair[1])
    return None


def draft_size_for(embedder: object) -> tuple[int, int] | None:
    """The ``min_size`` a store reads images with for ``embedder``, or None (full size).

    An embedder whose first step shrinks the image to a known size declares it as ``draft_size``
    (width, height; the timm and CLIP embedders: their resize, e.g. 256 × 256 for EfficientNet-Lite0):
    a large JPEG is then decoded at the smallest DCT scale that still keeps that size, and the
    embedder's own filter does the rest. Without one, twice its ``input_size``; None without either.

    Examples
    --------
    >>> from galleria.embedders import PixelEmbedder
    >>> draft_size_for(PixelEmbedder(size=(32, 16))), draft_size_for(None)
    ((64, 32), None)
    """
    declared: Any = getattr(embedder, "draft_size", None)
    if (
        isinstance(declared, (tuple, list))
        and len(declared) == 2
        and all(is_int(side) and side > 0 for side in declared)
    ):
        return int(declared[0]), int(declared[1])
    size = input_size_of(embedder)
    return None if size is None else (2 * size[0], 2 * size[1])


def reader_for(embedder: object) -> Callable[[str], np.ndarray]:
    """The :func:`read_rgb` a store uses for ``embedder``: JPEGs drafted to :func:`draft_size_for` it.

    Examples
    --------
    >>> from galleria.embedders import PixelEmbedder
    >>> reader_for(PixelEmbedder(size=(32, 16))).keywords
    {'min_size': (64, 32)}
    """
    return partial(read_rgb, min_size=draft_size_for(embedder))
