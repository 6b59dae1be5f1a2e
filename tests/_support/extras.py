"""Tests of an optional extra skip where it is not installed, with a reason naming the extra.

``@needs("optuna")`` marks a test (or ``pytestmark = needs(...)`` a module); ``need("pyarrow")``
at a module's top imports the module or skips the whole file. The reason reads, for example,
``needs the tune extra (galleria[tune]), not installed: no module named 'optuna'``.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

__all__ = ["EXTRA_OF", "installed", "need", "needs", "reason"]

#: The extra (or extras) of ``pyproject.toml`` that installs each optional module the tests use.
EXTRA_OF = {
    "torch": "timm or clip",
    "torchvision": "timm or clip",
    "timm": "timm",
    "open_clip": "clip",
    "huggingface_hub": "clip",
    "onnxruntime": "onnx",
    "onnx": "onnx",
    "fastapi": "web",
    "jinja2": "web",
    "uvicorn": "web",
    "ray": "ray",
    "pyarrow": "ray or clip-retrieval",
    "pymilvus": "milvus",
    "milvus_lite": "milvus",
    "optuna": "tune",
    "openTSNE": "map",
    "sklearn": "demo",
    "matplotlib": "demo",
    "playwright": "dev",
    "skimage": "dev",
}


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def reason(module: str) -> str:
    """Why a test that needs ``module`` is skipped: the extra that installs it."""
    extra = EXTRA_OF.get(module)
    if extra is None:
        return f"no module named {module!r}"
    names = " or ".join(f"galleria[{name}]" for name in extra.split(" or "))
    return f"needs the {extra} extra ({names}), not installed: no module named {module!r}"


def needs(*modules: str) -> pytest.MarkDecorator:
    """A mark that skips the test unless every module of ``modules`` is installed."""
    missing = [module for module in modules if not installed(module)]
    return pytest.mark.skipif(bool(missing), reason=reason(missing[0]) if missing else "")


def need(module: str) -> ModuleType:
    """Import ``module``, or skip the calling test module with the extra's reason."""
    return pytest.importorskip(module, reason=reason(module))
