"""Whether two image files are the same picture: a check of candidate near-duplicate pairs.

The store's vectors say which images lie close; they cannot tell a copy from a look-alike (a
neighbouring view of an object, the same digit written alike, a card of the same deck), nor find a
crop the pixel embedder sees shifted. The check looks at the pictures themselves: each file is
decoded once, small (a JPEG at a reduced scale; galleria's one reader, its pixel limit), to a
:data:`THUMB_SIDE`-pixel colour thumbnail; two thumbnails are compared at :data:`SIDE` × :data:`SIDE`
after cutting :data:`CROP_SHARES` off every side of one or the other (a crop of the one is the other
whole), as the correlation of their pixels (mean removed: a brighter or darker copy correlates
fully). Their similarity is the best of those; they are the same picture at :data:`SAME_PICTURE` or
above. A mirrored or greyscale image correlates less (left and right swapped; colour lost), so it is
no copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CROP_SHARES", "SAME_PICTURE", "SIDE", "THUMB_SIDE", "PictureCheck", "similarity", "thumbnail"]

#: Side of the thumbnail kept per image (pixels; the image's aspect is not kept: a copy has it too).
THUMB_SIDE = 48
#: Side at which two thumbnails are compared.
SIDE = 24
#: Shares cut off every side of one thumbnail before comparing (crops of up to 12 % a side).
CROP_SHARES = (0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.12)
#: The similarity at or above which two images are the same picture. Fitted on planted copies in
#: the corpus' digits, stamps and icons (docs/benchmarks/duplicates.md): above every image's nearest
#: other image there (at most 0.984 on digits, 0.974 on stamps; 99.9 % below 0.989 on icons) and
#: below most copies (0.99–1.00; brightness changes of drawings on transparency score lower).
SAME_PICTURE = 0.985


def thumbnail(path: str) -> np.ndarray | None:
    """The (THUMB_SIDE, THUMB_SIDE, 3) uint8 thumbnail of an image file; None if it cannot be read."""
    from galleria.images.reading import DEFAULT_MAX_PIXELS, ImageReadError, read_rgb_image

    try:
        picture = read_rgb_image(path, (THUMB_SIDE, THUMB_SIDE), max_pixels=DEFAULT_MAX_PIXELS)
    except (ImageReadError, ValueError):
        return None
    from PIL import Image

    return np.asarray(picture.resize((THUMB_SIDE, THUMB_SIDE), Image.Resampling.BOX), dtype=np.uint8)


def _view(thumb: np.ndarray, share: float) -> np.ndarray:
    """The thumbnail with ``share`` cut off every side, at SIDE × SIDE: a unit vector, mean removed."""
    from PIL import Image

    cut = share * THUMB_SIDE
    box = (cut, cut, THUMB_SIDE - cut, THUMB_SIDE - cut)
    small = Image.fromarray(thumb).resize((SIDE, SIDE), Image.Resampling.BILINEAR, box=box)
    values = np.asarray(small, dtype=np.float64).ravel()
    values -= values.mean()
    norm = float(np.linalg.norm(values))
    return values / norm if norm > 0 else values


def similarity(first: np.ndarray, second: np.ndarray) -> float:
    """How alike two thumbnails are as one picture, in [-1, 1]: the best correlation over crops."""
    whole_first, whole_second = _view(first, 0.0), _view(second, 0.0)
    best = float(whole_first @ whole_second)
    for share in CROP_SHARES[1:]:
        best = max(best, float(_view(first, share) @ whole_second), float(whole_first @ _view(second, share)))
    return best


class PictureCheck:
    """Checks candidate pairs of a gallery's rows: thumbnails made once per row, when first wanted.

    ``paths`` are the rows' files; a row whose file cannot be read (a URL, a missing file, not an
    image) has no thumbnail, and a pair holding one is not checked (:meth:`check` gives None).
    """

    def __init__(self, paths: list[str], readable: Any) -> None:
        self._paths = paths
        self._readable = readable
        self._thumbs: dict[int, np.ndarray | None] = {}
        self.checked = 0

    def _thumb(self, row: int) -> np.ndarray | None:
        if row not in self._thumbs:
            self._thumbs[row] = thumbnail(self._paths[row]) if self._readable(row) else None
        return self._thumbs[row]

    def check(self, first: int, second: int) -> float | None:
        """The pair's :func:`similarity`; None when either file cannot be read."""
        one, other = self._thumb(first), self._thumb(second)
        if one is None or other is None:
            return None
        self.checked += 1
        return similarity(one, other)
