"""galleria's per-user model cache: exported ONNX files, their manifest, and the checkpoints a user named.

Everything lives under ``<cache>/models`` (``$GALLERIA_CACHE_DIR`` or the platform's user cache folder,
as for the data sets), or in ``$GALLERIA_MODEL_CACHE_DIR`` when that is set. Two JSON files are kept
there, both written atomically and read as untrusted:

* ``onnx-manifest.json`` maps a model key (the SHA-256 of the architecture and its weights' identity:
  the checkpoint's SHA-256, a hub tag, or ``random``) to the exported ONNX file's SHA-256 and size, the
  feature length and the preprocessing. The ONNX file's name is derived from the key by galleria, never
  read from the manifest. A model that keeps tensor data in other files may name only files of this
  folder that its entry lists, each with its own SHA-256 and size (``"external"``); they are verified
  and put inside the model before ONNX Runtime sees it (:mod:`._onnx_files`).
* ``checkpoints.json`` maps a checkpoint's SHA-256 to the paths the user gave with ``--checkpoint`` or in
  an ``--embedder`` spec. A store records only name and digest; this per-user list is where galleria
  looks for the file again. A path found there is used only when its digest still matches, and is
  hashed only when it is a regular file of at most :data:`~._checkpoint.MAX_CHECKPOINT_BYTES`.

Both are changed read-modify-write under a writer lock (:func:`galleria._files.writer_lock` on the
file), so processes adding entries at once keep every entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from galleria._files import atomic_write_bytes, load_json, read_regular_file, writer_lock

__all__ = [
    "MAX_ONNX_BYTES",
    "cache_dir",
    "model_key",
    "onnx_path",
    "read_checkpoints",
    "read_manifest",
    "remember_checkpoint",
    "write_manifest_entry",
]

#: The largest ONNX file galleria loads (a manifest entry asking for more is refused).
MAX_ONNX_BYTES = 2 << 30
_MAX_JSON_BYTES = 4 << 20
_MAX_PATHS_PER_DIGEST = 8
_KEY = re.compile(r"[0-9a-f]{64}")
#: Seconds a writer of the manifest or the registry waits for another one.
_LOCK_WAIT = 60.0


def cache_dir() -> Path:
    """The folder of galleria's model cache: ``$GALLERIA_MODEL_CACHE_DIR``, else ``<cache>/models``."""
    models = os.environ.get("GALLERIA_MODEL_CACHE_DIR")
    if models:
        return Path(models).expanduser()
    override = os.environ.get("GALLERIA_CACHE_DIR")
    if override:
        base = Path(override).expanduser()
    elif sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "galleria"
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches" / "galleria"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "galleria"
    return base / "models"


def model_key(kind: str, model_name: str, weights: str) -> str:
    """The SHA-256 naming one exported network: its kind, architecture and weights' identity."""
    text = json.dumps({"kind": kind, "model": model_name, "weights": weights, "export": 1}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def onnx_path(key: str) -> Path:
    """Where the ONNX file of ``key`` lives (derived from the key, never from a file)."""
    if not _KEY.fullmatch(key):
        raise ValueError(f"model key must be 64 lower-case hex digits, got {key!r}")
    return cache_dir() / f"{key}.onnx"


def _read_json(name: str, what: str) -> dict[str, Any]:
    path = cache_dir() / name
    if not path.exists():
        return {}
    try:
        data = load_json(read_regular_file(path, what, _MAX_JSON_BYTES), f"{what} {str(path)!r}")
    except (OSError, ValueError) as error:
        import warnings

        warnings.warn(f"ignoring {what} {str(path)!r}: {error}", RuntimeWarning, stacklevel=3)
        return {}
    return data if isinstance(data, dict) else {}


def read_manifest() -> dict[str, Any]:
    """The ONNX manifest's entries by model key (unchecked values; :mod:`._onnx` checks the one it uses)."""
    entries = _read_json("onnx-manifest.json", "ONNX manifest").get("models")
    return entries if isinstance(entries, dict) else {}


def write_manifest_entry(key: str, entry: dict[str, Any]) -> None:
    """Add or replace one manifest entry, atomically, under the manifest's writer lock."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with writer_lock(folder / "onnx-manifest.json", wait=_LOCK_WAIT, what="ONNX manifest"):
        entries = {k: v for k, v in read_manifest().items() if isinstance(k, str) and _KEY.fullmatch(k)}
        entries[key] = entry
        data = json.dumps({"format": 1, "models": entries}, indent=1, sort_keys=True).encode("utf-8")
        atomic_write_bytes(folder / "onnx-manifest.json", data)


def read_checkpoints() -> dict[str, list[str]]:
    """The checkpoint paths the user gave, by SHA-256 (malformed entries left out)."""
    raw = _read_json("checkpoints.json", "checkpoint registry")
    result: dict[str, list[str]] = {}
    for digest, paths in raw.items():
        if isinstance(digest, str) and _KEY.fullmatch(digest) and isinstance(paths, list):
            kept = [path for path in paths if isinstance(path, str) and os.path.isabs(path)]
            if kept:
                result[digest] = kept[:_MAX_PATHS_PER_DIGEST]
    return result


def remember_checkpoint(path: str, digest: str) -> None:
    """Record that the checkpoint ``digest`` was found at ``path`` (absolute), newest first.

    A cache that cannot be written is not an error: the user passes ``--checkpoint`` again next time.
    """
    if not _KEY.fullmatch(digest):
        raise ValueError(f"checkpoint digest must be 64 lower-case hex digits, got {digest!r}")
    absolute = os.path.abspath(path)
    try:
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        with writer_lock(folder / "checkpoints.json", wait=_LOCK_WAIT, what="checkpoint registry"):
            registry = read_checkpoints()
            paths = [absolute] + [p for p in registry.get(digest, []) if p != absolute]
            registry[digest] = paths[:_MAX_PATHS_PER_DIGEST]
            data = json.dumps(registry, indent=1, sort_keys=True).encode("utf-8")
            atomic_write_bytes(folder / "checkpoints.json", data)
    except (OSError, ValueError):
        pass
