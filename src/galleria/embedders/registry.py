"""Save and rebuild embedders from their JSON-able configs (no pickle)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from galleria.embedders.base import Embedder

__all__ = ["EMBEDDER_TYPES", "check_config", "embedder_config", "embedder_from_config"]

#: Embedder types that :func:`embedder_from_config` can rebuild.
EMBEDDER_TYPES: tuple[str, ...] = ("pixel", "clip", "timm")


def check_config(config: Any, kind: str, keys: frozenset[str]) -> Mapping[str, Any]:
    """Return ``config`` if it is a mapping of embedder type ``kind`` with no key outside ``keys``.

    Raises TypeError for a non-mapping, ValueError for another type or unknown keys (named).

    Examples
    --------
    >>> check_config({"type": "pixel", "size": 8}, "pixel", frozenset({"type", "size"}))["size"]
    8
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping, got {type(config).__name__}")
    if config.get("type") != kind:
        raise ValueError(f"config is not a {kind} embedder config (type {config.get('type')!r})")
    unknown = sorted(map(str, set(config) - keys))
    if unknown:
        raise ValueError(f"unknown {kind} embedder config key(s) {unknown}")
    return config


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


def embedder_from_config(config: Mapping[str, Any]) -> Embedder:
    """Rebuild an embedder from a config written by :func:`embedder_config`.

    Raises TypeError if ``config`` is not a mapping and ValueError for a missing or unknown
    ``"type"`` (the known types are :data:`EMBEDDER_TYPES`).

    Examples
    --------
    >>> embedder_from_config({"type": "pixel", "size": [4, 4], "grayscale": True, "batch_size": 8})
    PixelEmbedder(size=(4, 4), grayscale=True, batch_size=8)
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping, got {type(config).__name__}")
    kind = config.get("type")
    if kind == "pixel":
        from galleria.embedders.pixel import PixelEmbedder

        return PixelEmbedder.from_config(config)
    if kind == "clip":
        from galleria.embedders.clip import ClipEmbedder

        return ClipEmbedder.from_config(config)
    if kind == "timm":
        from galleria.embedders.timm import TimmEmbedder

        return TimmEmbedder.from_config(config)
    raise ValueError(f"unknown embedder type {kind!r} in config; known types are {EMBEDDER_TYPES}")
