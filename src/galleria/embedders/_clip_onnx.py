"""The image side of a CLIP model on ONNX Runtime: its preprocessing read off open_clip's, its export.

Only the image encoder is exported (``model.encode_image``); the text side stays on torch. The
preprocessing is read from open_clip's own transform (resize of the short side, square centre crop,
mean and standard deviation) and refused when it has another shape, so that the PIL/numpy version
(:mod:`galleria.embedders._preprocess`) does exactly what it does.
"""

from __future__ import annotations

from typing import Any

from galleria.embedders._cache import model_key
from galleria.embedders._onnx import OnnxNetwork, cached_entry, export_network
from galleria.embedders._preprocess import Preprocess

__all__ = ["clip_network", "clip_preprocess"]


def clip_preprocess(transform: Any) -> Preprocess | None:
    """The :class:`Preprocess` of an open_clip image transform, or None when it is not the usual chain."""
    steps = list(getattr(transform, "transforms", []))
    names = [type(step).__name__ for step in steps]
    if len(steps) < 3 or names[0] != "Resize" or names[1] != "CenterCrop" or names[-1] != "Normalize":
        return None
    resize, crop, normalize = steps[0], steps[1], steps[-1]
    size = resize.size if isinstance(resize.size, int) else None
    crop_size = tuple(crop.size)
    interpolation = str(getattr(resize.interpolation, "value", resize.interpolation))
    if size is None or len(crop_size) != 2 or crop_size[0] != crop_size[1] or crop_size[0] > size:
        return None
    if interpolation not in ("bicubic", "bilinear") or getattr(resize, "max_size", None) is not None:
        return None
    mean = tuple(float(v) for v in normalize.mean)
    std = tuple(float(v) for v in normalize.std)
    return Preprocess(int(size), int(crop_size[0]), interpolation, mean, std)  # type: ignore[arg-type]


def clip_network(
    torch: Any, model: Any, model_name: str, weights: str, spec: Preprocess, dim: int
) -> OnnxNetwork:
    """The ONNX Runtime session of ``model``'s image encoder, exported into the cache on first use."""
    key = model_key("clip", model_name, weights)
    entry = cached_entry(key)
    if entry is None:

        class ImageEncoder(torch.nn.Module):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, images: Any) -> Any:
                return self.model.encode_image(images)

        entry = export_network(torch, ImageEncoder().eval(), key, spec, dim)
    return OnnxNetwork(key, entry)
