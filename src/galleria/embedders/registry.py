"""Save and rebuild embedders from their JSON-able configs (no pickle)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from galleria.embedders._config import check_config
from galleria.embedders.base import Embedder
from galleria.embedders.clip import ClipEmbedder
from galleria.embedders.pixel import PixelEmbedder
from galleria.embedders.timm import TimmEmbedder

__all__ = ["EMBEDDER_TYPES", "check_config", "embedder_config", "embedder_from_config"]

#: Embedder types that :func:`embedder_from_config` can rebuild.
EMBEDDER_TYPES: tuple[str, ...] = ("pixel", "clip", "timm")


def embedder_config(embedder: object) -> dict[str, Any] | None:
    """Return the embedder's ``config()`` (a JSON-able dict with a ``"type"``), or None if it has none.

    Raises TypeError if ``config()`` returns something that is not a JSON-able dict with a string
    ``"type"``.

    Examples
    --------
    >>> from galleria.embedders import PixelEmbedder
    >>> embedder_config(PixelEmbedder(size=4))["type"]
    'pixel'
    >>> embedder_config(object()) is None
    True
    """
    method = getattr(embedder, "config", None)
    if not callable(method):
        return None
    config = method()
    if not isinstance(config, dict) or not isinstance(config.get("type"), str):
        raise TypeError(f"{type(embedder).__name__}.config() must return a dict with a string 'type'")
    try:
        json.dumps(config)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{type(embedder).__name__}.config() is not JSON-able: {error}") from error
    return dict(config)


def embedder_from_config(
    config: Mapping[str, Any], *, checkpoint: Any = None, runtime: str | None = None
) -> Embedder:
    """Rebuild an embedder from a config written by :func:`embedder_config` (e.g. one in a store file).

    The config is untrusted: every value is checked before anything is built, and no file it names
    is ever opened. A CLIP config built from a local checkpoint records only the checkpoint's file
    name and SHA-256; pass the file as ``checkpoint`` and its digest is checked.

    Parameters
    ----------
    config : mapping
        A config with a ``"type"`` among :data:`EMBEDDER_TYPES`.
    checkpoint : str, os.PathLike or None
        The local checkpoint a CLIP config records (ValueError if it records none, or another one).
    runtime : {"torch", "onnx"} or None
        Force where a timm network, or a CLIP image side, runs (None: the runtime the config
        records, if installed). Pixel embedders have no network.

    Raises
    ------
    TypeError
        If ``config`` is not a mapping.
    ValueError
        For a missing or unknown ``"type"``, an unknown key, a value of the wrong type or out of
        bounds, or a checkpoint that is missing, unexpected or has another digest.

    Examples
    --------
    >>> embedder_from_config({"type": "pixel", "size": [4, 4], "grayscale": True, "batch_size": 8})
    PixelEmbedder(size=(4, 4), grayscale=True, batch_size=8)
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping, got {type(config).__name__}")
    kind = config.get("type")
    if kind == "pixel":
        if checkpoint is not None:
            raise ValueError(f"a pixel embedder takes no checkpoint, but checkpoint={checkpoint!r} was given")
        return PixelEmbedder.from_config(config)
    if kind == "clip":
        return ClipEmbedder.from_config(config, checkpoint=checkpoint, runtime=runtime)
    if kind == "timm":
        return TimmEmbedder.from_config(config, checkpoint=checkpoint, runtime=runtime)
    raise ValueError(f"unknown embedder type {kind!r} in config; known types are {EMBEDDER_TYPES}")
