"""``galleria serve --eval DIR``: the folder is checked before the store loads; a bad one is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "galleria", "serve", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("serve-eval")
    paths = []
    for i in range(4):
        path = folder / "g" / f"{i}.png"
        path.parent.mkdir(exist_ok=True)
        Image.fromarray(np.full((8, 8, 3), (60 * i + 10, 100, 30), np.uint8)).save(path)
        paths.append(str(path))
    built = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=4), num_workers=1)
    built.build_store(progress=False)
    target = folder / "g.safetensors"
    built.save_to_disk(target)
    return str(target)


def _one_line_error(process: subprocess.CompletedProcess[str], match: str) -> None:
    assert process.returncode == 2, (process.stdout, process.stderr)
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in process.stderr, process.stderr
    assert lines[0].startswith("galleria serve: error: ") and match in lines[0], lines[0]


def test_a_bad_eval_folder_is_one_line(store: str, tmp_path: Path) -> None:
    _one_line_error(_serve(store, "--eval", str(tmp_path / "missing")), "does not exist")
    _one_line_error(_serve(store, "--eval", str(tmp_path)), "has no queries.json")
    (tmp_path / "queries.json").write_text(json.dumps({"schema": "galleria.queries/1", "title": 3}))
    _one_line_error(_serve(store, "--eval", str(tmp_path)), "lacks the key(s)")
    (tmp_path / "queries.json").unlink()
    (tmp_path / "queries.json").symlink_to("/dev/zero")
    _one_line_error(_serve(store, "--eval", str(tmp_path)), "not a regular file")
