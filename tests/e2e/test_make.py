"""The two make targets install what the README says: the demo the core + demo extra, the tests everything."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _dry_run(tmp_path: Path, target: str) -> str:
    """``make -n TARGET`` in a copy of the Makefile and pyproject.toml, with no virtualenv yet."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    process = subprocess.run(
        ["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True
    )
    return process.stdout


def test_make_demo_installs_the_demo_extra_only(tmp_path: Path) -> None:
    commands = _dry_run(tmp_path, "demo")
    assert "-e '.[demo]'" in commands and "galleria demo" in commands
    assert (
        "clip" not in commands and "timm" not in commands and "torch" not in commands.replace("no torch", "")
    )
    assert "installing galleria with the demo extra only" in commands  # says what it is doing


def test_make_test_installs_every_extra_and_the_system_packages(tmp_path: Path) -> None:
    commands = _dry_run(tmp_path, "test")
    assert "-e '.[dev,clip,demo,web,milvus,ray,timm,tune,onnx,clip-retrieval,map,photo]'" in commands
    assert ".ci/system-deps" in commands and "pytest" in commands
    script = (ROOT / ".ci" / "system-deps").read_text()
    assert "apt-get install" in script and "chromium" in script and "dataset-fashion-mnist" in script
    assert "sudo apt-get install" in script  # not root: says how, never a silent skip
