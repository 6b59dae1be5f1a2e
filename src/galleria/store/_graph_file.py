"""The neighbour-graph side file's layout (:mod:`galleria.store.graph` documents it): header and arrays."""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any

import numpy as np

from galleria._files import atomic_stream, load_json
from galleria.index.neighbor_graph import MAX_GRAPH_K, METHODS

__all__ = ["read_header", "write_graph_arrays"]

_MAGIC = b"GALLERIA-GRAPH1\n"
_LENGTH = struct.Struct("<I")
_HEADER_LIMIT = 1 << 16


def read_header(name: str, stream: Any) -> tuple[dict[str, Any], int]:
    """The checked header of a graph file open at its start, and the offset of its arrays."""
    lead = stream.read(len(_MAGIC) + _LENGTH.size)
    if len(lead) < len(_MAGIC) + _LENGTH.size or lead[: len(_MAGIC)] != _MAGIC:
        raise ValueError(f"graph file {name!r} is not a galleria graph file")
    (length,) = _LENGTH.unpack(lead[len(_MAGIC) :])
    if length > _HEADER_LIMIT:
        raise ValueError(f"graph file {name!r}: header of {length} bytes exceeds {_HEADER_LIMIT}")
    header = load_json(stream.read(length), f"graph file {name!r}")
    keys = {"format", "version", "state", "n", "k", "method", "sha256"}
    if isinstance(header, dict) and header.get("version") == 2:
        keys.add("changed")  # version 2: a graph updated since its build
    if not isinstance(header, dict) or set(header) != keys or header["format"] != "galleria-graph":
        raise ValueError(f"graph file {name!r}: the header must hold exactly the keys {sorted(keys)}")
    for key in sorted(keys & {"n", "k", "version", "changed"}):
        if type(header[key]) is not int or header[key] < 0:
            raise ValueError(f"graph file {name!r}: header key {key!r} must be a non-negative int")
    for key in ("state", "sha256"):
        value = header[key]
        if not (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
            raise ValueError(f"graph file {name!r}: header key {key!r} must be a hex SHA-256")
    if header["version"] not in (1, 2) or header["method"] not in METHODS or header["k"] > MAX_GRAPH_K:
        raise ValueError(f"graph file {name!r}: unsupported version, method or k > {MAX_GRAPH_K}")
    return header, len(lead) + length


def write_graph_arrays(
    path: str, ids: np.ndarray, distances: np.ndarray, state: str, method: str, changed: int
) -> None:
    """Write a graph file atomically (version 2 with ``changed`` when the graph was updated)."""
    ids = np.ascontiguousarray(ids, dtype="<i4")
    distances = np.ascontiguousarray(distances, dtype="<f4")
    digest = hashlib.sha256(ids.reshape(-1).view(np.uint8).data)
    digest.update(distances.reshape(-1).view(np.uint8).data)
    header: dict[str, Any] = {
        "format": "galleria-graph",
        "version": 2 if changed else 1,
        "state": state,
        "n": int(ids.shape[0]),
        "k": int(ids.shape[1]),
        "method": method,
        "sha256": digest.hexdigest(),
    }
    if changed:
        header["changed"] = changed
    encoded = json.dumps(header, sort_keys=True).encode()
    with atomic_stream(path) as stream:
        stream.write(_MAGIC + _LENGTH.pack(len(encoded)) + encoded)
        stream.write(ids.reshape(-1).view(np.uint8).data)
        stream.write(distances.reshape(-1).view(np.uint8).data)
