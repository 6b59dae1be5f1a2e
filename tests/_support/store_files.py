"""Reading and writing store files the way a tamperer with a safetensors writer would."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

__all__ = ["OLD_RECORDS", "digest", "old_layout", "read_parts", "seal", "write_old_layout", "write_sealed"]

#: The records store files kept at the top of their header before the extension slot (galleria
#: 0.2.0 and earlier), with their tensors' old names (short name -> old name). Written out here rather
#: than imported, so that the tests build the old layout as those versions wrote it.
OLD_RECORDS: dict[str, dict[str, str]] = {
    "augmentation": {},
    "offline_diffusion": {"positions": "diffusion_positions", "values": "diffusion_values"},
    "rerank_statistics": {},
}


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


def old_layout(
    header: dict[str, Any], tensors: dict[str, np.ndarray]
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The parts of a store file laid out as before the extension slot (copies): each record of
    :data:`OLD_RECORDS` moved from ``header["extensions"]`` to the top of the header, its tensors
    (``ext/<name>/<short>``) renamed to their old names, the slot dropped when nothing else is in it."""
    header = json.loads(json.dumps(header))
    tensors = dict(tensors)
    slot = header.pop("extensions", {})
    for name, renamed in OLD_RECORDS.items():
        if name in slot:
            header[name] = slot.pop(name)
        for short, old in renamed.items():
            if f"ext/{name}/{short}" in tensors:
                tensors[old] = tensors.pop(f"ext/{name}/{short}")
    if slot:
        header["extensions"] = slot
    return header, tensors


def write_old_layout(source: Path, target: Path) -> Path:
    """Write ``source`` (a store file galleria wrote) to ``target`` laid out as before the extension
    slot (:func:`old_layout`: the records where galleria 0.2.0 wrote them), digests computed afresh."""
    return write_sealed(target, *old_layout(*read_parts(source)))
