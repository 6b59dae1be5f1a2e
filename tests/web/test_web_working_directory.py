"""``galleria serve`` resolves nothing against its working directory (issue 34): started in a folder
that is later removed (a cleaned build folder), it still answers every search by a gallery path, and a
path that is not one is a 404, never a 500."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
from fastapi.testclient import TestClient

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.web import create_app


def test_search_answers_after_the_working_directory_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "gallery"
    root.mkdir()
    rng = np.random.default_rng(3)
    paths = []
    for number in range(6):
        path = root / f"{number}.png"
        Image.fromarray(rng.integers(0, 255, (12, 12, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=4), num_workers=1)
    store.build_store(progress=False)
    build = tmp_path / "build"
    build.mkdir()
    monkeypatch.chdir(build)
    client = TestClient(create_app(store), raise_server_exceptions=False)
    build.rmdir()  # the server's working directory is gone
    with pytest.raises(FileNotFoundError):
        os.getcwd()
    for given in ("0.png", "gallery/0.png", "./0.png", "nothing.png", "../gallery/0.png", "build/x.png"):
        answer = client.post("/api/search", json={"path": given, "k": 3})
        if given == "0.png":  # relative to the gallery root, as the page sends it
            assert answer.status_code == 200, answer.text
            continue
        assert answer.status_code == 404, (given, answer.status_code, answer.text)
        assert "not an image of this gallery" in answer.json()["detail"]
    answer = client.post("/api/search", json={"path": paths[1], "k": 3})  # the stored path
    assert answer.status_code == 200, answer.text
    assert paths[1] not in [item["path"] for item in answer.json()["plain"]]
    assert len(answer.json()["plain"]) == 3
