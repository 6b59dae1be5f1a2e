"""Reading and writing store files the way a tamperer with a safetensors writer would."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

__all__ = ["digest", "read_parts", "seal", "write_sealed"]


def seal(header: Any) -> str:
    """The header digest a store file carries: SHA-256 of the canonical JSON (sorted keys, compact)."""
    canonical = json.dumps(header, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data).hexdigest()


def read_parts(file: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with safe_open(str(file), framework="numpy") as reader:
        header = json.loads(reader.metadata()["galleria"])
        tensors = {key: reader.get_tensor(key) for key in reader.keys()}
    return header, tensors


def write_sealed(
    target: Path, header: Any, tensors: dict[str, np.ndarray], *, raw_header: str | None = None
) -> Path:
    """Write a store file the way an attacker with a safetensors writer would: checksums recomputed."""
    if isinstance(header, dict) and "tensors" in header:
        header["tensors"] = {name: {"sha256": digest(array)} for name, array in tensors.items()}
    text = json.dumps(header) if raw_header is None else raw_header
    metadata = {"galleria": text, "galleria_sha256": seal(header) if raw_header is None else "0" * 64}
    save_file(tensors, str(target), metadata=metadata)
    return target
