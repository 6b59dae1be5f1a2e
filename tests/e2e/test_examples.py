"""The README's example script runs and prints what the README shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _support.extras import needs

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"


@needs("sklearn")
def test_quickstart_example_runs(tmp_path: Path) -> None:
    env = {**os.environ, "GALLERIA_CACHE_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, env=env, check=False, timeout=300
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("re-ranking parameters read from the gallery: k1=")
    assert lines[1].startswith("query ")
    assert len([line for line in lines[2:7] if line.startswith("  0.")]) == 5
    plain = next(line for line in lines if "plain:" in line)
    reranked = next(line for line in lines if "re-ranking:" in line)

    def map_of(line: str) -> float:
        return float(line.rsplit("mAP@100", 1)[1])

    def recall_of(line: str) -> float:
        return float(line.split("Recall@1", 1)[1].split()[0])

    assert map_of(reranked) > map_of(plain)  # the default re-ranking lifts mAP@100
    assert recall_of(reranked) >= recall_of(plain) - 0.01  # and does not cost Recall@1
    assert lines[-1] == "[0.6667, 1.0, 1.0, 0.6667]"
    assert (tmp_path / "digits").is_dir()
