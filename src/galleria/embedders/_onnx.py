"""Running an embedder's image network on ONNX Runtime (optional extra ``galleria[onnx]``).

A network is exported once with torch (``torch.onnx.export``, TorchScript exporter) into galleria's model
cache (:mod:`galleria.embedders._cache`), and its manifest entry records the file's SHA-256 and size,
the feature length and the preprocessing. Loading reads the manifest entry, checks the file's size
before reading it and its SHA-256 once read, and hands ONNX Runtime the verified bytes, never a path:
a damaged or swapped file is refused before ONNX Runtime parses a byte of it. The verified bytes
may still name files (a tensor's ``external_data``, which ONNX Runtime would resolve against the
working directory): such a model is refused before ONNX Runtime sees it, unless every file it names
is one of the cache folder's that its manifest entry lists with its own SHA-256 and size; those are
verified and put inside the model (:mod:`._onnx_files`). Loading needs onnxruntime only (and onnx
for a model with allowed external data); exporting needs torch and onnx too.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from galleria._files import read_regular_file, short
from galleria.embedders._cache import (
    MAX_ONNX_BYTES,
    cache_dir,
    onnx_path,
    read_manifest,
    write_manifest_entry,
)
from galleria.embedders._preprocess import Preprocess
from galleria.embedders._torch import import_extra

__all__ = [
    "OnnxNetwork",
    "cached_entry",
    "embed_onnx",
    "export_network",
    "onnxruntime_available",
    "save_network",
    "self_contained",
    "usable_threads",
]

_OPSET = 17
_MAX_DIM = 1 << 16
_MAX_EXTERNAL_FILES = 64
_HEX64 = re.compile(r"[0-9a-f]{64}")


def onnxruntime_available() -> bool:
    """Whether onnxruntime can be imported here (looked up without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("onnxruntime") is not None
    except (ImportError, ValueError):
        return False


def usable_threads(requested: int | None = None) -> int:
    """``requested`` threads (None: every CPU this process may use), capped at those CPUs."""
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        available = os.cpu_count() or 1
    return max(1, available if requested is None else min(requested, available))


def _check_entry(key: str, entry: Any) -> dict[str, Any]:
    """A manifest entry with every value checked (ValueError naming the key otherwise)."""
    where = f"ONNX manifest entry {key[:12]}…"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} is not an object")
    digest, size, dim = entry.get("sha256"), entry.get("size"), entry.get("dim")
    if not isinstance(digest, str) or len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        raise ValueError(f"{where}: sha256 must be 64 lower-case hex digits, got {digest!r}")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_ONNX_BYTES:
        raise ValueError(f"{where}: size must be an int in [1, {MAX_ONNX_BYTES}], got {size!r}")
    if not isinstance(dim, int) or isinstance(dim, bool) or not 0 < dim <= _MAX_DIM:
        raise ValueError(f"{where}: dim must be an int in [1, {_MAX_DIM}], got {dim!r}")
    preprocess = Preprocess.from_dict(entry.get("preprocess"))
    return {
        "sha256": digest,
        "size": size,
        "dim": dim,
        "preprocess": preprocess,
        "external": _check_external(key, where, entry.get("external", {})),
    }


def _check_external(key: str, where: str, files: Any) -> dict[str, dict[str, Any]]:
    """The entry's external data files: ``KEY.NAME`` in the cache folder → checked sha256 and size."""
    if not isinstance(files, Mapping) or len(files) > _MAX_EXTERNAL_FILES:
        raise ValueError(f"{where}: external must be an object of at most {_MAX_EXTERNAL_FILES} files")
    checked: dict[str, dict[str, Any]] = {}
    for name, record in files.items():
        plain = isinstance(name, str) and re.fullmatch(re.escape(key) + r"\.[A-Za-z0-9_-]{1,64}", name)
        if not plain:
            raise ValueError(f"{where}: external file {short(name)} must be named {key[:12]}….NAME")
        digest = record.get("sha256") if isinstance(record, Mapping) else None
        size = record.get("size") if isinstance(record, Mapping) else None
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            raise ValueError(f"{where}: external file {name!r}: sha256 must be 64 lower-case hex digits")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_ONNX_BYTES:
            raise ValueError(f"{where}: external file {name!r}: size must be an int in [0, {MAX_ONNX_BYTES}]")
        checked[name] = {"sha256": digest, "size": size}
    return checked


def cached_entry(key: str) -> dict[str, Any] | None:
    """The checked manifest entry of ``key`` when its ONNX file is in the cache, else None."""
    entry = read_manifest().get(key)
    if entry is None or not onnx_path(key).is_file():
        return None
    return _check_entry(key, entry)


def verified_bytes(key: str, entry: Mapping[str, Any]) -> bytes:
    """The ONNX file of ``key``, read only once its size matches, returned only once its digest does."""
    path = onnx_path(key)
    try:
        size = os.stat(path).st_size
    except OSError as error:
        raise ValueError(f"ONNX file {str(path)!r} cannot be read: {error.strerror or error}") from error
    if size != entry["size"]:
        raise ValueError(
            f"ONNX file {str(path)!r} holds {size} bytes, but the cache manifest records {entry['size']}: "
            "it was damaged or replaced; delete it and it is exported again"
        )
    data = read_regular_file(path, "ONNX file", entry["size"])
    actual = hashlib.sha256(data).hexdigest()
    if len(data) != entry["size"] or actual != entry["sha256"]:
        raise ValueError(
            f"ONNX file {str(path)!r} has sha256 {actual[:12]}…, but the cache manifest records "
            f"{entry['sha256'][:12]}…: it was damaged or replaced; delete it and it is exported again"
        )
    return data


def _verified_external(name: str, record: Mapping[str, Any]) -> bytes:
    """The bytes of the cache folder's external data file ``name``, once its size and digest match."""
    folder = cache_dir()
    path = folder / name
    data = read_regular_file(path, "ONNX external data file", record["size"], inside=folder)
    if len(data) != record["size"] or hashlib.sha256(data).hexdigest() != record["sha256"]:
        raise ValueError(
            f"ONNX external data file {str(path)!r} does not match the size and sha256 the cache manifest "
            "records: it was damaged or replaced; delete it and the model is exported again"
        )
    return data


def self_contained(key: str, entry: Mapping[str, Any], data: bytes) -> bytes:
    """The verified model ``data`` of ``key``, naming no file: refused (ValueError) when it names any
    file but the cache folder's external data files its manifest entry lists, whose verified bytes
    are put inside it. Runs before ONNX Runtime sees the model."""
    from galleria.embedders._onnx_files import external_tensors, inline_external_data

    path = str(onnx_path(key))
    try:
        named = external_tensors(data)
    except ValueError as error:
        raise ValueError(f"ONNX file {path!r}: {error}; delete it and it is exported again") from None
    if not named:
        return data
    allowed: Mapping[str, Mapping[str, Any]] = entry.get("external") or {}
    locations = sorted({record.get("location", "") for record in named})
    outside = [location for location in locations if location not in allowed]
    if outside or any(record.get("data_location") not in (None, "1") for record in named):
        raise ValueError(
            f"ONNX file {path!r}: {len(named)} tensor(s) keep their data in files it names "
            f"({', '.join(short(location, 60) for location in (outside or locations)[:3])}); a cached model "
            "may name only its own data files in the cache folder, listed with their sha256 in the "
            "manifest: delete it and it is exported again"
        )
    import_extra("a cached ONNX model with external data", "onnx", "onnx")
    sizes = {name: int(record["size"]) for name, record in allowed.items()}
    try:
        return inline_external_data(data, lambda name: _verified_external(name, allowed[name]), sizes)
    except ValueError as error:
        raise ValueError(f"ONNX file {path!r}: {error}") from None


def export_network(torch: Any, model: Any, key: str, preprocess: Preprocess, dim: int) -> dict[str, Any]:
    """Export ``model`` (images → features) to the cache under ``key``; return its checked entry."""
    import_extra("exporting a network to ONNX", "onnx", "onnx")

    buffer = io.BytesIO()
    dummy = torch.zeros((1, 3, preprocess.crop, preprocess.crop), dtype=torch.float32)
    # Not under inference_mode: it would make attention layers take their fused fast path, which
    # has no ONNX form; the exporter traces without recording gradients anyway.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter, chosen on purpose
        torch.onnx.export(
            model,
            (dummy,),
            buffer,
            input_names=["images"],
            output_names=["features"],
            dynamic_axes={"images": {0: "batch"}, "features": {0: "batch"}},
            opset_version=_OPSET,
            dynamo=False,
        )
    return save_network(key, buffer.getvalue(), preprocess, dim)


def save_network(key: str, data: bytes, preprocess: Preprocess, dim: int) -> dict[str, Any]:
    """Put the ONNX file ``data`` (made without torch: :mod:`._lite0`) into the cache under ``key``, with
    the manifest entry an export writes; return its checked entry."""
    from galleria._files import atomic_write_bytes

    path = onnx_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)
    entry = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "dim": int(dim),
        "preprocess": preprocess.to_dict(),
    }
    write_manifest_entry(key, entry)
    return _check_entry(key, entry)


class OnnxNetwork:
    """An ONNX Runtime session over verified bytes: (n, 3, h, w) float32 → (n, dim) float32."""

    def __init__(self, key: str, entry: Mapping[str, Any], *, num_threads: int | None = None) -> None:
        (ort,) = import_extra("the ONNX Runtime path", "onnx", "onnxruntime")
        data = self_contained(key, entry, verified_bytes(key, entry))  # before onnxruntime sees anything
        options = ort.SessionOptions()
        options.intra_op_num_threads = usable_threads(num_threads)
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        # Idle ONNX Runtime threads sleep instead of spinning: the CPU they would burn is what the
        # store's decoding threads and the preprocessing helper need on a machine with few cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.threads = options.intra_op_num_threads
        self.dim = int(entry["dim"])
        self.preprocess: Preprocess = entry["preprocess"]
        self._session = ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0].name

    def run(self, batch: np.ndarray) -> np.ndarray:
        """The features of one preprocessed batch."""
        (features,) = self._session.run(None, {self._input: np.ascontiguousarray(batch, dtype=np.float32)})
        output = np.asarray(features, dtype=np.float32)
        if output.ndim != 2 or output.shape != (batch.shape[0], self.dim):
            raise ValueError(
                f"the ONNX network returned shape {output.shape}, expected ({batch.shape[0]}, {self.dim})"
            )
        return output


def embed_onnx(
    network: OnnxNetwork, spec: Preprocess, images: list[Any], batch_size: int, normalize: bool
) -> np.ndarray:
    """The (n, dim) features of RGB PIL ``images``, in batches of at most ``batch_size``.

    While ONNX Runtime runs one part, a helper thread prepares the next (resize, crop, normalise),
    so the two overlap where the CPU has room; parts of at most 8 images keep that overlap tight.
    """
    from concurrent.futures import ThreadPoolExecutor

    from galleria.embedders._preprocess import prepare_batch

    step = max(1, min(batch_size, 8))
    parts = [images[start : start + step] for start in range(0, len(images), step)]
    outputs: list[np.ndarray] = []
    if len(parts) == 1:
        outputs.append(network.run(prepare_batch(parts[0], spec)))
    else:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="galleria-prepare") as pool:
            pending = pool.submit(prepare_batch, parts[0], spec)
            for position in range(len(parts)):
                batch = pending.result()
                if position + 1 < len(parts):
                    pending = pool.submit(prepare_batch, parts[position + 1], spec)
                outputs.append(network.run(batch))
    features = np.concatenate(outputs, axis=0)
    if normalize:
        norms = np.linalg.norm(features, axis=1, keepdims=True)
        features = features / np.maximum(norms, np.float32(1e-12))
    return np.ascontiguousarray(features, dtype=np.float32)
