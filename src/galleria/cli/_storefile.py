"""Reading the JSON header of a store file (the layout of :mod:`galleria.store.persistence`).

Only the safetensors metadata is parsed (no tensor is read). Callers use it for what the loaded
store object does not tell: the format version, and the settings of a build checkpoint.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["read_store_header"]


def read_store_header(path: str) -> dict[str, Any]:
    """The parsed ``"galleria"`` header of the store file ``path``; ValueError if it has none."""
    from safetensors import safe_open

    try:
        with safe_open(path, framework="numpy") as reader:
            metadata = reader.metadata() or {}
    except OSError:
        raise
    except Exception as error:  # safetensors raises its own error type for damaged files
        raise ValueError(f"{path!r} is not a readable store file: {error}") from error
    try:
        header = json.loads(metadata["galleria"])
    except (KeyError, json.JSONDecodeError):
        raise ValueError(f"{path!r} is not a galleria store file (no readable galleria header)") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path!r} has an invalid galleria header")
    return header
