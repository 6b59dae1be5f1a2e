"""A torch stack that is installed but fails to import is an install problem, with the command that fixes it.

The failure is simulated (an import hook whose module raises torchvision's classic
``RuntimeError: operator torchvision::nms does not exist`` when imported, and the installed versions
replaced), so the real torch is never touched and the tests run where torch is absent too (an empty
module then stands in for torch itself).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from galleria.embedders import _torch
from galleria.embedders._torch import InstallProblem, import_extra, torch_fix

NMS = "operator torchvision::nms does not exist"


class _Failing(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``names`` (so they look installed) and raises ``error`` when one is executed."""

    def __init__(self, names: tuple[str, ...], error: BaseException) -> None:
        self.names, self.error = names, error

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name in self.names:
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        raise self.error


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """timm and open_clip fail as they do beside a torchvision of another build than torch (CPU torch 2.14.1
    from PyTorch's index, torchvision 0.29.1 from PyPI)."""
    for name in ("timm", "open_clip", "torchvision"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    if not _torch.installed("torch"):  # a photo install: torch itself stands in as an empty module
        monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setattr(
        sys, "meta_path", [_Failing(("timm", "open_clip"), RuntimeError(NMS)), *sys.meta_path]
    )
    versions = {"torch": "2.14.1+cpu", "torchvision": "0.29.1"}
    monkeypatch.setattr(_torch, "_version", versions.get)
    return monkeypatch


def test_a_torchvision_of_another_build_is_an_install_problem_with_its_fix(
    broken: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(InstallProblem) as caught:
        import_extra("TimmEmbedder", "timm", "timm")
    message = str(caught.value)
    assert isinstance(caught.value, ImportError) and "\n" not in message
    assert message.startswith(
        "install problem, not an error in your input: TimmEmbedder could not import timm"
    )
    assert NMS in message
    assert "torch 2.14.1+cpu and torchvision 0.29.1 do not match" in message
    assert (
        "Fix it with: pip install --force-reinstall 'torchvision==0.29.*' "
        "--index-url https://download.pytorch.org/whl/cpu" in message
    )
    assert "pip install -e '.[photo]'" in message  # the route without torch


def test_the_timm_and_clip_embedders_report_it(broken: pytest.MonkeyPatch) -> None:
    from galleria.embedders import ClipEmbedder, TimmEmbedder

    with pytest.raises(InstallProblem, match="TimmEmbedder could not import timm"):
        TimmEmbedder("resnet18", pretrained=None, runtime="torch")
    with pytest.raises(InstallProblem, match="ClipEmbedder could not import open_clip"):
        ClipEmbedder("ViT-B-32", pretrained=None)


def test_the_command_line_says_install_problem_in_one_line(
    broken: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from PIL import Image

    from galleria.cli import main

    folder = tmp_path / "photos"
    folder.mkdir()
    for index in range(2):
        Image.fromarray(np.full((16, 16, 3), 40 * index, np.uint8)).save(folder / f"{index}.png")
    out = tmp_path / "store.safetensors"
    code = main(
        ["build", str(folder), "--out", str(out), "--embedder", "timm:resnet18:random", "--runtime", "torch"]
    )
    error = capsys.readouterr().err.strip().splitlines()
    assert code == 2  # as a missing extra: an ImportError
    assert error[-1].startswith("galleria build: error: install problem, not an error in your input:")
    assert NMS in error[-1] and "pip install --force-reinstall" in error[-1]
    assert not out.exists()


@pytest.mark.parametrize(
    ("torch_version", "vision_version", "problem", "fix"),
    [
        (
            "2.14.1+cpu",
            "0.29.1+cpu",
            "",
            "'torchvision==0.29.*' --index-url https://download.pytorch.org/whl/cpu",
        ),
        ("2.14.1", "0.29.1", "", "pip install --force-reinstall 'torch==2.14.1' 'torchvision==0.29.*'"),
        ("2.14.1+cu130", "0.29.1+cu130", "", "'torch==2.14.1' 'torchvision==0.29.*'"),
        ("2.14.1+cpu", "0.29.1", "do not match", "--index-url https://download.pytorch.org/whl/cpu"),
        ("2.14.1", "0.28.0", "do not match", "'torch==2.14.1' 'torchvision==0.29.*'"),
        ("2.5.1+cpu", "0.21.0+cpu", "torchvision 0.20.* of the same build", "'torchvision==0.20.*'"),
        ("2.14.1", None, "torchvision is not installed", "'torchvision==0.29.*'"),
    ],
)
def test_torch_fix_reads_the_versions(
    monkeypatch: pytest.MonkeyPatch, torch_version: str, vision_version: str | None, problem: str, fix: str
) -> None:
    versions = {"torch": torch_version, "torchvision": vision_version}
    monkeypatch.setattr(_torch, "_version", versions.get)
    found, command = torch_fix()
    assert (problem in found) if problem else found == ""
    assert fix in command


def test_a_module_that_is_not_installed_still_names_the_extra() -> None:
    with pytest.raises(ImportError) as caught:
        import_extra("TimmEmbedder", "timm", "galleria_no_such_module")
    assert not isinstance(caught.value, InstallProblem)
    assert "pip install -e '.[timm]'" in str(caught.value)


def test_another_extra_that_fails_to_load_is_an_install_problem_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "onnxruntime", raising=False)
    error = OSError("libonnxruntime.so.1: cannot open shared object file")
    monkeypatch.setattr(sys, "meta_path", [_Failing(("onnxruntime",), error), *sys.meta_path])
    with pytest.raises(InstallProblem, match=r"Fix it with: pip install --force-reinstall onnxruntime$"):
        import_extra("the ONNX Runtime path", "onnx", "onnxruntime")
