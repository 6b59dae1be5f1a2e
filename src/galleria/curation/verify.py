"""Whether two image files are the same picture: candidates by a picture fingerprint, then a check.

The store's vectors say which images lie close; they cannot tell a copy from a look-alike (a
neighbouring view of an object, the same digit written alike, a card of the same deck), and a
semantic embedder may place a resized or cropped copy of a tiny image far from its original. So the
pictures themselves are looked at, in two steps:

* **candidates** — every readable image's :func:`fingerprint` (the whole picture at
  :data:`FINGERPRINT_SIDE` × :data:`FINGERPRINT_SIDE` in colour, mean removed: a brighter or darker
  copy has the same one) and its :data:`FINGERPRINT_K` nearest fingerprints (:func:`fingerprint_pairs`,
  an exact blockwise search) are candidate pairs beside the vectors' own;
* **the check** — two pictures are compared at :data:`COMPARE_SIDE` pixels a side (fewer when one is
  smaller: nothing is invented), after cutting :data:`CROP_SHARES` off every side of one or the other
  (1 % steps: a crop of the one is the other whole, aligned to a third of a pixel), as the correlation
  of their pixels with the mean removed. :func:`similarity` is the best over those; they are the same
  picture at :data:`SAME_PICTURE` or above. A mirrored or greyscale copy correlates less (left and
  right swapped; colour lost), so it is no copy.

Each file is decoded once, small (a JPEG at a reduced scale; galleria's one reader, its pixel limit),
to a picture of at most :data:`PICTURE_SIDE` pixels a side (:func:`thumbnail`). Everything but
:func:`thumbnail` and :class:`PictureCheck`'s reading is a pure function of pixel arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "COMPARE_SIDE",
    "CROP_SHARES",
    "FINGERPRINT_CROPS",
    "FINGERPRINT_K",
    "FINGERPRINT_LIMIT",
    "FINGERPRINT_SIDE",
    "NATIVE_SIDE",
    "PICTURE_SIDE",
    "SAME_PICTURE",
    "PictureCheck",
    "fingerprint",
    "fingerprint_pairs",
    "similarity",
    "thumbnail",
]

#: Longest side of the picture kept per image (pixels; its aspect is kept).
PICTURE_SIDE = 96
#: Side at which two pictures are compared, unless the smaller one is small (:data:`NATIVE_SIDE`).
COMPARE_SIDE = 32
#: A picture whose shorter side is at most this is compared at that side, its own pixels (a crop of
#: an icon cuts whole pixels: compared on its own grid, it is its original's pixels exactly).
NATIVE_SIDE = 48
#: Shares cut off every side of one picture before comparing: crops of up to 12 % a side, in 1 % steps.
CROP_SHARES = tuple(round(0.01 * step, 2) for step in range(13))
#: The similarity at or above which two images are the same picture. Fitted on planted copies in the
#: corpus' digits, stamps and icons (docs/benchmarks/duplicates.md): the only value meeting recall
#: ≥ 0.95 and pair precision ≥ 0.9 on two of the three (digits' look-alikes reach 0.982, stamps'
#: copies drop to 0.968; no value does on icons, whose sibling icons score as high as copies).
SAME_PICTURE = 0.972
#: Side of the fingerprint (colour, so 3 × side² numbers per image).
FINGERPRINT_SIDE = 12
#: Nearest fingerprints per image taken as candidate pairs.
FINGERPRINT_K = 5
#: Shares cut off every side of each picture for the fingerprints a cropped copy is searched against.
FINGERPRINT_CROPS = (0.04, 0.08)
#: Galleries above this many images get no fingerprints (the exact search grows with the square of
#: the gallery): their candidates come from the store's vectors alone, and the report says so.
FINGERPRINT_LIMIT = 20_000
#: Rows whose compared views a :class:`PictureCheck` keeps (a representative is checked against each of
#: its candidates in turn): at most 13 views of 48 × 48 × 3 numbers each, so about 90 MB at most.
VIEW_CACHE_ROWS = 256
#: A pixel this light in every channel is background (a drawing on white, transparency composited).
WHITE = 250


def thumbnail(path: str) -> np.ndarray | None:
    """The (h, w, 3) uint8 picture of an image file, at most PICTURE_SIDE a side; None if unreadable."""
    from galleria.images.reading import DEFAULT_MAX_PIXELS, ImageReadError, read_rgb_image

    try:
        picture = read_rgb_image(path, (PICTURE_SIDE, PICTURE_SIDE), max_pixels=DEFAULT_MAX_PIXELS)
    except (ImageReadError, ValueError):
        return None
    from PIL import Image

    if max(picture.size) > PICTURE_SIDE:
        picture.thumbnail((PICTURE_SIDE, PICTURE_SIDE), Image.Resampling.BOX)
    return np.asarray(picture, dtype=np.uint8)


def _unit(values: Any) -> np.ndarray:
    flat: np.ndarray = np.asarray(values, dtype=np.float64).ravel()
    flat = flat - flat.mean()
    norm = float(np.linalg.norm(flat))
    return flat / norm if norm > 0 else flat


def _view(picture: Any, share: float, side: int) -> np.ndarray:
    """``picture`` (a PIL image) with ``share`` cut off every side, at side × side: a unit vector."""
    from PIL import Image

    width, height = picture.size
    box = (share * width, share * height, width - share * width, height - share * height)
    return _unit(np.asarray(picture.resize((side, side), Image.Resampling.BOX, box=box)))


def fingerprint(picture: np.ndarray, share: float = 0.0) -> np.ndarray:
    """A picture's fingerprint: the whole (or with ``share`` cut off every side) at FINGERPRINT_SIDE² in
    colour, mean removed, unit (float32).

    Examples
    --------
    >>> flat = np.zeros((8, 8, 3), np.uint8); flat[:4] = 200
    >>> bright = np.minimum(flat.astype(int) * 6 // 5, 255).astype(np.uint8)
    >>> float(fingerprint(flat) @ fingerprint(bright)) > 0.999
    True
    """
    from PIL import Image

    return _view(Image.fromarray(picture), share, FINGERPRINT_SIDE).astype(np.float32)


def _pixels(picture: Any, share: float, side: int) -> np.ndarray:
    from PIL import Image

    width, height = picture.size
    box = (share * width, share * height, width - share * width, height - share * height)
    return np.asarray(picture.resize((side, side), Image.Resampling.BOX, box=box), dtype=np.float64)


def _drawn_correlation(first: np.ndarray, second: np.ndarray) -> float:
    """The correlation of two aligned views over the pixels not white in both (a drawing on white)."""
    drawn = ~((first.min(axis=2) >= WHITE) & (second.min(axis=2) >= WHITE))
    if drawn.sum() < 4 or drawn.all():
        return -1.0
    return float(_unit(first[drawn]) @ _unit(second[drawn]))


def _compare_side(first: np.ndarray, second: np.ndarray) -> int:
    smallest = max(1, min(*first.shape[:2], *second.shape[:2]))
    return smallest if smallest <= NATIVE_SIDE else COMPARE_SIDE


def similarity(first: np.ndarray, second: np.ndarray) -> float:
    """How alike two pictures are as one picture, in [-1, 1]: the best correlation over crops."""
    from PIL import Image

    one, other = Image.fromarray(first), Image.fromarray(second)
    side = _compare_side(first, second)
    return _aligned(
        lambda share: _view(one, share, side),
        lambda share: _view(other, share, side),
        lambda share: _pixels(one, share, side),
        lambda share: _pixels(other, share, side),
    )


def _aligned(view_one: Any, view_other: Any, pixels_one: Any, pixels_other: Any) -> float:
    """:func:`similarity` from the two pictures' views (unit vectors) and pixels by the share cut."""
    whole_one, whole_other = view_one(0.0), view_other(0.0)
    best, where = float(whole_one @ whole_other), (0.0, 0.0)
    for share in CROP_SHARES[1:]:
        cut_one, cut_other = float(view_one(share) @ whole_other), float(whole_one @ view_other(share))
        if cut_one > best:
            best, where = cut_one, (share, 0.0)
        if cut_other > best:
            best, where = cut_other, (0.0, share)
    return max(best, _drawn_correlation(pixels_one(where[0]), pixels_other(where[1])))


def fingerprint_pairs(
    prints: np.ndarray, k: int = FINGERPRINT_K, block: int = 2048, against: np.ndarray | None = None
) -> np.ndarray:
    """Each row's ``k`` nearest other rows by fingerprint: an (n, k) array of row numbers (−1: none).

    ``prints`` is (n, d) unit rows (a zero row, a flat picture, has no neighbours); ``against``
    (default ``prints``) the rows' fingerprints searched, e.g. of their cropped views. Exact and
    deterministic: ties go to the lower row.

    Examples
    --------
    >>> prints = np.array([[1, 0], [0.99, 0.141], [0, 1]], dtype=np.float32)
    >>> fingerprint_pairs(prints, 1).tolist()
    [[1], [0], [1]]
    """
    searched = prints if against is None else against
    n = prints.shape[0]
    width = max(0, min(k, n - 1))
    found = np.full((n, k), -1, dtype=np.int64)
    if width == 0:
        return found
    flat = ~np.any(prints != 0, axis=1) | ~np.any(searched != 0, axis=1)
    for start in range(0, n, block):
        scores = prints[start : start + block] @ searched.T
        rows = np.arange(start, min(n, start + block))
        scores[rows - start, rows] = -np.inf
        scores[:, flat] = -np.inf
        order = np.argsort(-scores, axis=1, kind="stable")[:, :width]
        picked = np.take_along_axis(scores, order, axis=1)
        order[~np.isfinite(picked)] = -1
        order[flat[rows]] = -1
        found[rows, :width] = order
    return found


class PictureCheck:
    """Checks candidate pairs of a gallery's rows: pictures read once per row, when first wanted.

    ``paths`` are the rows' files; a row whose file cannot be read (a URL, a missing file, not an
    image) has no picture, and a pair holding one is not checked (:meth:`check` gives None).
    """

    def __init__(self, paths: list[str], readable: Any) -> None:
        self._paths = paths
        self._readable = readable
        self._pictures: dict[int, np.ndarray | None] = {}
        self._views: dict[tuple[int, int, bool], dict[float, np.ndarray]] = {}
        self.checked = 0

    def picture(self, row: int) -> np.ndarray | None:
        """Row ``row``'s picture (read once), None when it cannot be read."""
        if row not in self._pictures:
            self._pictures[row] = thumbnail(self._paths[row]) if self._readable(row) else None
        return self._pictures[row]

    def fingerprint_pairs(self, rows: np.ndarray, k: int = FINGERPRINT_K) -> tuple[np.ndarray, np.ndarray]:
        """Candidate pairs ``(first, second)`` (row numbers, first < second, unique) among ``rows``: each
        readable row with its ``k`` nearest by fingerprint. Reads every one of ``rows``."""
        readable = [row for row in np.asarray(rows, dtype=np.int64).tolist() if self.picture(row) is not None]
        if len(readable) < 2:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        pictures = [self._pictures[row] for row in readable]
        prints = np.stack([fingerprint(picture) for picture in pictures])  # type: ignore[arg-type]
        found = [fingerprint_pairs(prints, k)]
        for share in FINGERPRINT_CROPS:  # a crop of one is the other's middle: whole against cut views
            cut = np.stack([fingerprint(picture, share) for picture in pictures])  # type: ignore[arg-type]
            found.append(fingerprint_pairs(prints, k, against=cut))
        near = np.concatenate(found, axis=1)
        index = np.asarray(readable, dtype=np.int64)
        first = np.repeat(np.arange(len(readable)), near.shape[1])
        second = near.ravel()
        keep = second >= 0
        a, b = index[first[keep]], index[second[keep]]
        pairs = np.unique(np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1), axis=0)
        return pairs[:, 0], pairs[:, 1]

    def _cached(self, row: int, side: int, unit: bool) -> Any:
        """Row ``row``'s views (unit vectors) or pixels at ``side`` by the share cut, each made once
        while the row is among the :data:`VIEW_CACHE_ROWS` last asked for."""
        from PIL import Image

        key = (row, side, unit)
        held = self._views.pop(key, None)
        if held is None:
            held = {}
            while len(self._views) >= VIEW_CACHE_ROWS:
                self._views.pop(next(iter(self._views)))
        self._views[key] = held  # the last asked for: kept longest
        picture = Image.fromarray(self._pictures[row])  # type: ignore[arg-type]
        make = _view if unit else _pixels

        def get(share: float) -> np.ndarray:
            if share not in held:
                held[share] = make(picture, share, side).astype(np.float32 if unit else np.float64)
            return held[share]

        return get

    def check(self, first: int, second: int) -> float | None:
        """The pair's :func:`similarity`; None when either file cannot be read."""
        one, other = self.picture(first), self.picture(second)
        if one is None or other is None:
            return None
        self.checked += 1
        side = _compare_side(one, other)  # each row's views are made once per side and share
        return _aligned(
            self._cached(first, side, True),
            self._cached(second, side, True),
            self._cached(first, side, False),
            self._cached(second, side, False),
        )
