"""Preparing images for a network in PIL and numpy alone: resize the short side, centre crop, normalise.

This is what timm's evaluation transform (``crop_mode="center"``, square input) and open_clip's image
transform do, without torch or torchvision, so that an embedder running on ONNX Runtime needs neither.
The steps follow torchvision's rules on PIL images: the short side becomes ``resize``, the long side
``int(resize * long / short)``; the crop's top-left corner is ``round((side - crop) / 2)``; pixels are
scaled to [0, 1] and then ``(x - mean) / std`` per channel. ``tests/embedders`` checks the output
equals timm's and open_clip's transforms on real images.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

__all__ = ["Preprocess", "from_timm_config", "prepare", "prepare_batch"]

_FILTERS = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}
#: The largest side a preprocessing record may ask for (a record read from the cache is checked).
MAX_SIDE = 2048


@dataclass(frozen=True)
class Preprocess:
    """How one network wants its images: short side, square crop, filter, per-channel mean and std."""

    resize: int
    crop: int
    interpolation: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    def __post_init__(self) -> None:
        for name, side in (("resize", self.resize), ("crop", self.crop)):
            if not isinstance(side, int) or isinstance(side, bool) or not 1 <= side <= MAX_SIDE:
                raise ValueError(f"preprocessing {name} must be an int in [1, {MAX_SIDE}], got {side!r}")
        if self.crop > self.resize:
            raise ValueError(f"preprocessing crop {self.crop} is larger than the resize {self.resize}")
        if self.interpolation not in _FILTERS:
            raise ValueError(
                f"preprocessing interpolation must be one of {sorted(_FILTERS)}, got {self.interpolation!r}"
            )
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) != 3 or not all(
                isinstance(v, float) and math.isfinite(v) and abs(v) < 1e3 for v in values
            ):
                raise ValueError(f"preprocessing {name} must be three finite floats, got {values!r}")
        if min(self.std) <= 0:
            raise ValueError(f"preprocessing std must be positive, got {self.std!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (for the ONNX cache's manifest)."""
        return {
            "resize": self.resize,
            "crop": self.crop,
            "interpolation": self.interpolation,
            "mean": list(self.mean),
            "std": list(self.std),
        }

    @classmethod
    def from_dict(cls, record: Any) -> Preprocess:
        """Rebuild from :meth:`to_dict` output, checking every value (ValueError otherwise)."""
        if not isinstance(record, Mapping) or set(record) != {
            "resize",
            "crop",
            "interpolation",
            "mean",
            "std",
        }:
            raise ValueError(
                f"a preprocessing record must hold resize, crop, interpolation, mean, std: {record!r}"
            )
        triples = []
        for key in ("mean", "std"):
            values = record[key]
            if not isinstance(values, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
            ):
                raise ValueError(f"preprocessing {key} must be a list of numbers, got {values!r}")
            triples.append(tuple(float(v) for v in values))
        return cls(record["resize"], record["crop"], record["interpolation"], triples[0], triples[1])  # type: ignore[arg-type]


def from_timm_config(config: Mapping[str, Any]) -> Preprocess | None:
    """The :class:`Preprocess` of a timm data config, or None when it is not a square centre crop."""
    size = tuple(config.get("input_size", ()))
    if len(size) != 3 or size[1] != size[2] or config.get("crop_mode", "center") != "center":
        return None
    interpolation = str(config.get("interpolation", "bilinear"))
    if interpolation not in _FILTERS:
        return None
    crop = int(size[1])
    resize = math.floor(crop / float(config.get("crop_pct") or 0.875))
    mean = tuple(float(v) for v in config["mean"])
    std = tuple(float(v) for v in config["std"])
    return Preprocess(resize, crop, interpolation, mean, std)  # type: ignore[arg-type]


def _resized_crop(image: Image.Image, spec: Preprocess) -> Image.Image:
    """The short side resized to ``spec.resize`` (torchvision's rule), then the centre crop."""
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(spec.resize * long / short)
    size = (spec.resize, new_long) if width <= height else (new_long, spec.resize)
    if size != (width, height):
        image = image.resize(size, _FILTERS[spec.interpolation])
    top = round((size[1] - spec.crop) / 2.0)
    left = round((size[0] - spec.crop) / 2.0)
    return image.crop((left, top, left + spec.crop, top + spec.crop))


def _prepare_into(image: Image.Image, spec: Preprocess, out: np.ndarray) -> None:
    """Write one image's (3, crop, crop) input into ``out``: ``(x / 255 - mean) / std`` per channel,
    computed as ``x * (1 / (255 std)) - mean / std`` in two passes, straight from the uint8 pixels."""
    pixels = np.asarray(_resized_crop(image, spec), dtype=np.uint8).transpose(2, 0, 1)
    std = np.asarray(spec.std, dtype=np.float64)
    scale = (1.0 / (255.0 * std)).astype(np.float32).reshape(3, 1, 1)
    offset = (-np.asarray(spec.mean, dtype=np.float64) / std).astype(np.float32).reshape(3, 1, 1)
    np.multiply(pixels, scale, out=out)
    out += offset


def prepare(image: Image.Image, spec: Preprocess) -> np.ndarray:
    """One RGB PIL image as the (3, crop, crop) float32 array the network takes."""
    out = np.empty((3, spec.crop, spec.crop), dtype=np.float32)
    _prepare_into(image, spec, out)
    return out


def prepare_batch(images: Sequence[Image.Image], spec: Preprocess) -> np.ndarray:
    """A list of RGB PIL images as one (n, 3, crop, crop) float32 array (each written in place)."""
    batch = np.empty((len(images), 3, spec.crop, spec.crop), dtype=np.float32)
    for position, image in enumerate(images):
        _prepare_into(image, spec, batch[position])
    return batch
