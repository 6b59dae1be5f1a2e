"""What the torch-backed embedders (CLIP, timm) share: lazy imports, device choice, checkpoint-like names."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

__all__ = [
    "CHECKPOINT_SUFFIXES",
    "InstallProblem",
    "forward_batches",
    "import_extra",
    "install_problem",
    "installed",
    "looks_like_path",
    "pick_device",
    "torch_fix",
]

#: File endings that mark a ``pretrained`` value as a local checkpoint rather than a weights tag.
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")


#: The distributions of the torch stack, by the module they install.
_DISTRIBUTIONS = {
    "torch": "torch",
    "torchvision": "torchvision",
    "timm": "timm",
    "open_clip": "open_clip_torch",
}
#: torchvision's minor version is torch 2's plus this (torch 2.14 ↔ torchvision 0.29).
_TORCHVISION_OFFSET = 15
_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


class InstallProblem(ImportError):
    """An extra is installed but cannot be imported (broken or mismatched packages): not the user's input.

    The message is one line: what failed, the versions involved, and the command that fixes it.
    """


def _version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None (looked up without importing it)."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except (metadata.PackageNotFoundError, ValueError):
        return None


def installed(module: str) -> bool:
    """Whether ``module`` can be found here (looked up without importing it; a broken finder: no)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def torch_fix() -> tuple[str, str]:
    """What is wrong with the installed torch and torchvision (``""``: they match), and the one-line fix."""
    torch_version, vision_version = _version("torch"), _version("torchvision")
    if torch_version is None:
        return "torch is not installed", "pip install torch torchvision"
    base, _, local = torch_version.partition("+")
    parts = base.split(".")
    known = len(parts) > 1 and parts[0] == "2" and parts[1].isdigit()
    wanted = f"0.{int(parts[1]) + _TORCHVISION_OFFSET}.*" if known else "*"
    if local == "cpu":
        fix = f"pip install --force-reinstall 'torchvision=={wanted}' --index-url {_CPU_INDEX}"
    else:
        fix = f"pip install --force-reinstall 'torch=={base}' 'torchvision=={wanted}'"
    if vision_version is None:
        return "torchvision is not installed", fix
    vision_base, _, vision_local = vision_version.partition("+")
    matches = wanted == "*" or vision_base.startswith(wanted[:-1])
    if matches and vision_local == local:
        return "", fix
    return (
        f"torch {torch_version} and torchvision {vision_version} do not match "
        f"({'a CPU' if local == 'cpu' else 'a CUDA' if local.startswith('cu') or not local else 'another'} "
        f"build of torch needs torchvision {wanted} of the same build)",
        fix,
    )


def install_problem(who: str, module: str, error: BaseException) -> InstallProblem:
    """The one-line :class:`InstallProblem` for ``module``, installed but failing to import with ``error``."""
    reason = (str(error).strip().splitlines() or [""])[0][:160]
    cause = f"{who} could not import {module} ({type(error).__name__}: {reason})"
    if module in _DISTRIBUTIONS:
        mismatch, fix = torch_fix()
        if mismatch:
            cause += f": {mismatch}"
        elif module not in ("torch", "torchvision"):
            pinned = " ".join(
                f"{name}=={_version(name)}" for name in ("torch", "torchvision") if _version(name)
            )
            fix = f"pip install --force-reinstall {_DISTRIBUTIONS[module]} {pinned}".rstrip()
        photo = "; or run without torch: pip install -e '.[photo]' (EfficientNet-Lite0 on ONNX Runtime)"
    else:
        fix, photo = f"pip install --force-reinstall {module}", ""
    return InstallProblem(f"install problem, not an error in your input: {cause}. Fix it with: {fix}{photo}")


def import_extra(who: str, extra: str, *modules: str) -> tuple[Any, ...]:
    """Import ``modules``, or raise an ImportError saying which galleria extra brings them.

    A module that is installed but fails to import — torch and torchvision of different builds
    (``operator torchvision::nms does not exist``), a missing shared library, a package too old for
    another — is an :class:`InstallProblem` (an ImportError) naming the command that fixes it.
    """
    imported = []
    for module in modules:
        try:
            imported.append(importlib.import_module(module))
        except Exception as error:  # RuntimeError, OSError, AttributeError, ImportError: all mean the same
            if isinstance(error, ImportError) and not installed(module):
                names = " and ".join(modules)
                raise ImportError(
                    f"{who} needs {names}; install them with: pip install -e '.[{extra}]' (in a galleria "
                    f"clone)"
                ) from error
            raise install_problem(who, module, error) from error
    return tuple(imported)


def pick_device(torch: Any, device: Any) -> Any:
    """``device`` as a ``torch.device``; None picks cuda, then mps, then cpu."""
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be None, a str or a torch.device, got {type(device).__name__}")
    try:
        return torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device {device!r} is not a valid torch device: {error}") from error


def looks_like_path(value: str) -> bool:
    """Whether a ``pretrained`` string names a file (a separator, or a checkpoint file ending)."""
    return os.sep in value or "/" in value or value.lower().endswith(CHECKPOINT_SUFFIXES)


def forward_batches(
    torch: Any,
    device: Any,
    batches: Iterable[Any],
    forward: Callable[[Any], Any],
    *,
    normalize: bool,
    dim: int,
) -> np.ndarray:
    """The (n, dim) float32 outputs of ``forward`` over torch ``batches`` (under inference mode, with
    autocast on cuda), each row L2-normalised when ``normalize``; the batches are consumed in that mode."""
    outputs: list[np.ndarray] = []
    autocast = torch.autocast(device_type="cuda") if device.type == "cuda" else contextlib.nullcontext()
    with torch.inference_mode(), autocast:
        for batch in batches:
            features = forward(batch.to(device)).float()
            if normalize:
                features = torch.nn.functional.normalize(features, dim=-1)
            outputs.append(features.cpu().numpy().astype(np.float32, copy=False))
    if not outputs:
        return np.zeros((0, dim), dtype=np.float32)
    return np.ascontiguousarray(np.concatenate(outputs, axis=0), dtype=np.float32)
