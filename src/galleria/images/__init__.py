"""Images: the one reader of image files and arrays (see ``docs/images.md``).

- :mod:`galleria.images.decoding`: the decoding rules (EXIF orientation, alpha on white, 16-bit and
  palette modes to 8-bit RGB, JPEG drafts);
- :mod:`galleria.images.reading`: reading a file or bytes through those rules, with a pixel limit;
- :mod:`galleria.images.batches`: decoded batches of gallery files (what the store embeds);
- :mod:`galleria.images.queries`: query inputs (paths, arrays) turned into RGB arrays.

No other module of galleria opens an image; the store, the embedders, the page, thumbnails and
reports all read through here. This package sits just above the ground floor
(``docs/architecture.md``): it imports nothing of the store or the embedders.
"""

from __future__ import annotations

from galleria.images.batches import DecodedBatch, iter_decoded_batches
from galleria.images.reading import (
    DEFAULT_MAX_PIXELS,
    ImageReadError,
    ImageTooLargeError,
    decode_rgb,
    draft_size_for,
    input_size_of,
    read_rgb,
    read_rgb_image,
    reader_for,
)

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "DecodedBatch",
    "ImageReadError",
    "ImageTooLargeError",
    "decode_rgb",
    "draft_size_for",
    "input_size_of",
    "iter_decoded_batches",
    "read_rgb",
    "read_rgb_image",
    "reader_for",
]
