"""Issue 27 §4: the page shows URL-only items (a clip-retrieval import) by their URL, never fetching them.

The store is built by the importer from a folder laid out as clip-retrieval writes it (two ``.npy``
parts, a parquet file per part, captions): one with URL-only rows, one mixing files and URLs.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from PIL import Image

from _support.extras import need

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
pa = need("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from fastapi.testclient import TestClient  # noqa: E402

from galleria.store.clip_retrieval import import_clip_retrieval  # noqa: E402
from galleria.web import create_app  # noqa: E402

HOSTILE = 'https://example.org/q.jpg?x="><script>alert(1)</script>'
SCRIPTED = "javascript://x/%0aalert(1)"
URLS = ["https://example.org/img/a.jpg", HOSTILE, SCRIPTED, "http://example.net/b/c.png"]


def _folder(root: Path, image_paths: list[str | None], urls: list[str]) -> Path:
    """clip-retrieval's layout: img_emb/img_emb_N.npy and metadata/metadata_N.parquet, two parts."""
    (root / "img_emb").mkdir(parents=True)
    (root / "metadata").mkdir()
    rows = len(urls)
    vectors = np.random.default_rng(27).normal(size=(rows, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    half = rows // 2
    for number, part in enumerate((slice(0, half), slice(half, rows))):
        np.save(root / "img_emb" / f"img_emb_{number}.npy", vectors[part].astype(np.float16))
        columns = {
            "image_path": image_paths[part],
            "url": urls[part],
            "caption": [f"item {i}" for i in range(rows)][part],
        }
        pq.write_table(pa.table(columns), root / "metadata" / f"metadata_{number}.parquet")
    return root


@pytest.fixture()
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a network connection fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a network connection was attempted: {args!r}")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_a_url_only_store_is_served_by_its_urls(tmp_path: Path, offline: None) -> None:
    folder = _folder(tmp_path / "cr", [None] * len(URLS), URLS)
    store = import_clip_retrieval(folder, tmp_path / "s.safetensors")
    assert store.paths == URLS
    client = TestClient(create_app(store))  # before: ValueError, "the store holds a relative path"
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-security-policy"].startswith("default-src 'self'; img-src 'self' data:;")
    html = page.text
    assert html.count('class="url-tile"') == len(URLS)
    assert 'src="http' not in html and "/thumb/" not in html  # nothing for the browser to load
    link = 'class="url-link" href="https://example.org/img/a.jpg" rel="noopener noreferrer nofollow"'
    assert link in html and 'href="http://example.net/b/c.png"' in html
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'href="javascript' not in html  # a URL of another scheme is text, never a link
    assert "example.org · a.jpg" in html
    for url in URLS:  # never opened, never fetched
        assert client.get("/thumb/" + quote(url)).status_code == 404
        assert client.get("/image/" + quote(url)).status_code == 404
    found = client.post("/api/search", json={"path": URLS[0], "k": 2})
    assert found.status_code == 200  # by its stored vector
    assert [item["path"] for item in found.json()["plain"]] != [] and URLS[0] not in str(
        found.json()["plain"]
    )
    results = client.get("/", params={"path": URLS[0], "k": "2"})
    assert results.status_code == 200 and results.text.count('class="url-tile"') == 3  # query + 2
    view = client.get("/view/" + quote(URLS[0]))
    assert view.status_code == 200 and 'id="url-view"' in view.text and 'id="full"' not in view.text


def test_a_store_mixing_files_and_urls(tmp_path: Path, offline: None) -> None:
    gallery = tmp_path / "gallery"
    files = []
    for i, label in enumerate(("cat", "cat", "dog", "dog")):
        path = gallery / label / f"{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (12, 12), (40 * i, 90, 200 - 40 * i)).save(path)
        files.append(str(path))
    image_paths: list[str | None] = [*files, None, None, None, None]
    folder = _folder(tmp_path / "cr", image_paths, [f"https://example.org/{i}.jpg" for i in range(4)] + URLS)
    store = import_clip_retrieval(folder, tmp_path / "s.safetensors")
    assert store.paths == files + URLS
    app = create_app(store)
    assert app.state.gallery_root == str(gallery.resolve())  # the files' folder; URLs take no part
    client = TestClient(app)
    html = client.get("/").text
    assert html.count('class="url-tile"') == len(URLS)
    assert all(
        f'src="/thumb/{label}/{i}.png"' in html for i, label in enumerate(("cat", "cat", "dog", "dog"))
    )
    assert (
        client.get("/thumb/cat/0.png").status_code == 200
        and client.get("/image/dog/3.png").status_code == 200
    )
    assert "<script>alert(1)</script>" not in html and 'href="javascript' not in html
    folders = client.get("/", params={"folder": "dog"}).text  # class folders are the files'
    assert folders.count('class="item"') == 2 and "url-tile" not in folders
    item = client.get(f"/api/map/item/{len(files)}").json()
    assert item["thumb"] is None and item["url"] == URLS[0] and item["path"] == URLS[0]
