"""Every benchmark script still starts: its imports resolve from where it now lives (a moved helper
module breaks a script only when it runs, which ``make bench`` does rarely)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*/bench_*.py"))


def test_the_benchmark_scripts_are_found() -> None:
    assert {path.parent.name for path in SCRIPTS} == {"suites", "experiments"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_benchmark_script_imports_and_shows_its_help(script: Path) -> None:
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
