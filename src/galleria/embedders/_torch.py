"""What the torch-backed embedders (CLIP, timm) share: lazy imports, device choice, checkpoint-like names."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

__all__ = ["CHECKPOINT_SUFFIXES", "forward_batches", "import_extra", "looks_like_path", "pick_device"]

#: File endings that mark a ``pretrained`` value as a local checkpoint rather than a weights tag.
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")


def import_extra(who: str, extra: str, *modules: str) -> tuple[Any, ...]:
    """Import ``modules``, or raise an ImportError saying which galleria extra brings them."""
    try:
        return tuple(importlib.import_module(module) for module in modules)
    except ImportError as error:
        names = " and ".join(modules)
        raise ImportError(
            f"{who} needs {names}; install them with: pip install -e '.[{extra}]' (in a galleria clone)"
        ) from error


def pick_device(torch: Any, device: Any) -> Any:
    """``device`` as a ``torch.device``; None picks cuda, then mps, then cpu."""
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be None, a str or a torch.device, got {type(device).__name__}")
    try:
        return torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device {device!r} is not a valid torch device: {error}") from error


def looks_like_path(value: str) -> bool:
    """Whether a ``pretrained`` string names a file (a separator, or a checkpoint file ending)."""
    return os.sep in value or "/" in value or value.lower().endswith(CHECKPOINT_SUFFIXES)


def forward_batches(
    torch: Any,
    device: Any,
    batches: Iterable[Any],
    forward: Callable[[Any], Any],
    *,
    normalize: bool,
    dim: int,
) -> np.ndarray:
    """The (n, dim) float32 outputs of ``forward`` over torch ``batches`` (under inference mode, with
    autocast on cuda), each row L2-normalised when ``normalize``; the batches are consumed in that mode."""
    outputs: list[np.ndarray] = []
    autocast = torch.autocast(device_type="cuda") if device.type == "cuda" else contextlib.nullcontext()
    with torch.inference_mode(), autocast:
        for batch in batches:
            features = forward(batch.to(device)).float()
            if normalize:
                features = torch.nn.functional.normalize(features, dim=-1)
            outputs.append(features.cpu().numpy().astype(np.float32, copy=False))
    if not outputs:
        return np.zeros((0, dim), dtype=np.float32)
    return np.ascontiguousarray(np.concatenate(outputs, axis=0), dtype=np.float32)
