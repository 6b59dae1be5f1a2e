"""The decoding rules every image follows before an embedder sees it: orientation, bit depth, alpha.

One set of rules for files and in-memory PIL images alike (see ``docs/images.md``):

- **Orientation.** The EXIF Orientation tag is applied (:func:`PIL.ImageOps.exif_transpose`), so a
  photo embeds the way a viewer shows it.
- **Bit depth.** 16-bit integer modes (``I;16``, ``I;16B``, ``I;16L``, ``I;16N``) and 32-bit ``I`` are
  read as 16-bit values: clipped to [0, 65535] and divided by 257, rounded (65535 → 255 exactly, and an
  8-bit value v saved as v·257 comes back as v). 32-bit float images (``F``) are stretched from their
  own finite range [min, max] to [0, 255]; a constant or all-non-finite one is black, and non-finite
  pixels count as the minimum.
- **Transparency.** Images with an alpha channel (``RGBA``, ``LA``, ``PA``, premultiplied ``RGBa`` /
  ``La``) or a transparent colour (palette or ``L`` / ``RGB`` with a ``transparency`` entry, e.g. a PNG
  ``tRNS`` chunk or a GIF) are composited onto white, then alpha is dropped.
- **Colour.** Everything else (``1``, ``L``, ``P``, ``CMYK``, ``YCbCr``, ``LAB``, ``HSV``, ...) is
  converted to RGB by Pillow; Adobe CMYK JPEGs are un-inverted by Pillow's reader.
- **Animation.** Only the first frame of an animated GIF, WebP or PNG is used.
- **Size.** :func:`draft_for` asks the JPEG decoder for a reduced size (a power-of-two scale, DCT
  domain) that still keeps at least ``min_size`` on each side, so a 6000×4000 photo is decoded at
  750×500 for an embedder whose input is 224×224.

The decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``) is checked by ``Image.open`` on the
full size, before any draft, and stays on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image, ImageOps, JpegImagePlugin

__all__ = ["SIXTEEN_BIT_MODES", "draft_for", "rgb_array", "rgb_image", "to_rgb_image"]

#: Integer modes whose values are read as 16-bit samples.
SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16B", "I;16L", "I;16N", "I"})
_ALPHA_MODES = frozenset({"RGBA", "LA", "PA", "RGBa", "La"})
#: EXIF orientations that swap width and height (transpose, rotate 90/270, transverse).
_SWAPPING_ORIENTATIONS = frozenset({5, 6, 7, 8})
_ORIENTATION_TAG = 0x0112
_WHITE = (255, 255, 255, 255)


def _sixteen_to_eight(image: Image.Image) -> Image.Image:
    values = np.asarray(image).astype(np.int64)
    np.clip(values, 0, 65535, out=values)
    # round(v / 257) with halves up, in integers: floor((2v + 257) / 514).
    return Image.fromarray(((2 * values + 257) // 514).astype(np.uint8), mode="L")


def _float_to_eight(image: Image.Image) -> Image.Image:
    values = np.asarray(image, dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        return Image.new("L", image.size, 0)
    low, high = float(values[finite].min()), float(values[finite].max())
    if high <= low:
        return Image.new("L", image.size, 0)
    scaled = np.where(finite, (values - low) * (255.0 / (high - low)), 0.0)
    return Image.fromarray(np.rint(np.clip(scaled, 0.0, 255.0)).astype(np.uint8), mode="L")


def _on_white(image: Image.Image) -> Image.Image:
    if image.mode == "La":
        image = image.convert("LA")  # Pillow has no direct La → RGBA conversion
    rgba = image.convert("RGBA")
    return Image.alpha_composite(Image.new("RGBA", rgba.size, _WHITE), rgba).convert("RGB")


def to_rgb_image(image: Image.Image) -> Image.Image:
    """Return ``image`` as an 8-bit RGB PIL image by the bit-depth, transparency and colour rules.

    Orientation is not touched here (see :func:`rgb_array`). The input is not modified.

    Raises
    ------
    ValueError
        If Pillow cannot convert the image's mode to RGB.

    Examples
    --------
    >>> import numpy as np
    >>> from PIL import Image
    >>> sixteen = Image.fromarray(np.array([[0, 257 * 100, 65535]], dtype=np.uint16))
    >>> np.asarray(to_rgb_image(sixteen))[0, :, 0].tolist()
    [0, 100, 255]
    >>> half_transparent_black = Image.new("RGBA", (1, 1), (0, 0, 0, 128))
    >>> np.asarray(to_rgb_image(half_transparent_black))[0, 0].tolist()
    [127, 127, 127]
    """
    mode = image.mode
    if mode == "RGB" and "transparency" not in image.info:
        return image
    if mode in SIXTEEN_BIT_MODES:
        image = _sixteen_to_eight(image)
    elif mode == "F":
        image = _float_to_eight(image)
    elif mode in _ALPHA_MODES or "transparency" in image.info:
        return _on_white(image)
    return image.convert("RGB")


def _orientation(image: Image.Image) -> int:
    try:
        value: Any = image.getexif().get(_ORIENTATION_TAG, 1)
    except Exception:  # a malformed EXIF block is read as no orientation, as viewers do
        return 1
    return int(value) if isinstance(value, int) else 1


def draft_for(image: Image.Image, min_size: tuple[int, int] | None) -> None:
    """Ask a not-yet-loaded JPEG to decode at a reduced size that keeps ``min_size`` (width, height).

    ``min_size`` is meant in display orientation (EXIF applied); other formats, and JPEGs already
    small enough, are left alone. Must be called before the image is loaded.
    """
    if min_size is None or not isinstance(image, JpegImagePlugin.JpegImageFile):  # MPO photos included
        return
    width, height = min_size
    if _orientation(image) in _SWAPPING_ORIENTATIONS:
        width, height = height, width
    if image.size[0] >= 2 * width and image.size[1] >= 2 * height:
        image.draft(None, (width, height))


def rgb_image(image: Image.Image) -> Image.Image:
    """Return ``image`` as an 8-bit RGB PIL image: EXIF orientation applied, then :func:`to_rgb_image`."""
    if _orientation(image) != 1:
        image = ImageOps.exif_transpose(image)
    return to_rgb_image(image)


def rgb_array(image: Image.Image) -> np.ndarray:
    """Return ``image`` as an (H, W, 3) uint8 RGB array by every rule above (see :func:`rgb_image`).

    Examples
    --------
    >>> from PIL import Image
    >>> rgb_array(Image.new("LA", (3, 2), (0, 0))).tolist()[0][0]  # fully transparent → white
    [255, 255, 255]
    """
    return np.asarray(rgb_image(image), dtype=np.uint8)
