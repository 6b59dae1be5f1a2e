"""Checks of embedder configs, shared by the embedders and the registry (which imports them).

A config may come from a store file, which is untrusted input: every value is checked for its type
and against bounds before anything is built, so a file cannot make an embedder allocate without limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from galleria._validation import is_int

__all__ = ["MAX_CONFIG_BATCH_SIZE", "check_config", "config_bool", "config_int", "config_name"]

#: The largest ``batch_size`` a config may ask for (images decoded and embedded at once).
MAX_CONFIG_BATCH_SIZE = 4096
_MAX_NAME_LENGTH = 128
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


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


def config_int(kind: str, key: str, value: Any, maximum: int) -> int:
    """``value`` as an int in [1, maximum]; ValueError naming the config key otherwise.

    Examples
    --------
    >>> config_int("pixel", "batch_size", 64, 4096)
    64
    """
    if not is_int(value):
        raise ValueError(f"{kind} embedder config: {key} must be an integer, got {value!r}")
    if not 1 <= value <= maximum:
        raise ValueError(f"{kind} embedder config: {key} must be between 1 and {maximum}, got {value!r}")
    return int(value)


def config_bool(kind: str, key: str, value: Any) -> bool:
    """``value`` if it is a bool; ValueError naming the config key otherwise."""
    if not isinstance(value, bool):
        raise ValueError(f"{kind} embedder config: {key} must be true or false, got {value!r}")
    return value


def config_name(kind: str, key: str, value: Any) -> str:
    """``value`` if it is a plain name (letters, digits, ``_ . -``; no path, URL or hub id).

    Examples
    --------
    >>> config_name("clip", "model_name", "ViT-B-32")
    'ViT-B-32'
    >>> config_name("clip", "pretrained", "hf-hub:org/repo")
    Traceback (most recent call last):
    ...
    ValueError: clip embedder config: pretrained must be a plain name (letters, digits, '_', '.', '-'), \
not a path, URL or hub repository; got 'hf-hub:org/repo'
    """
    if not isinstance(value, str) or len(value) > _MAX_NAME_LENGTH or not _NAME.fullmatch(value):
        raise ValueError(
            f"{kind} embedder config: {key} must be a plain name (letters, digits, '_', '.', '-'), "
            f"not a path, URL or hub repository; got {value!r}"
        )
    return value
