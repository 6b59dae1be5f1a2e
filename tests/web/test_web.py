"""``galleria serve``'s app through FastAPI's TestClient: every route and every error answer."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
from fastapi.testclient import TestClient

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.viewer import ThumbnailCache, UploadError, decode_upload
from galleria.web import create_app

COLOURS = {"red": (210, 40, 40), "green": (40, 190, 60), "blue": (40, 60, 210)}


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, InMemoryImageEmbeddingStore]:
    root = tmp_path_factory.mktemp("web") / "gallery"
    rng = np.random.default_rng(0)
    paths = []
    for label, colour in COLOURS.items():
        (root / label).mkdir(parents=True)
        for i in range(6):
            pixels = np.clip(np.array(colour) + rng.normal(0, 30, (20, 24, 3)), 0, 255).astype(np.uint8)
            path = root / label / f"{i}.png"
            Image.fromarray(pixels).save(path)
            paths.append(str(path))
    (tmp_path_factory.getbasetemp() / "secret.txt").write_text("not for the web")
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    return root, store


@pytest.fixture(scope="module")
def client(gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> TestClient:
    return TestClient(create_app(gallery[1], store_name="colours.safetensors", max_upload_bytes=50_000))


def _png(colour: tuple[int, int, int], size: tuple[int, int] = (16, 16)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, "PNG")
    return buffer.getvalue()


def test_info(client: TestClient, gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> None:
    info = client.get("/api/info").json()
    assert info["count"] == 18
    assert info["embedder"]["type"] == "pixel"
    assert info["text_queries"] is False
    assert info["has_classes"] is True
    assert info["root"] == str(gallery[0])


def test_search_by_upload_plain_and_reranked(client: TestClient) -> None:
    answer = client.post(
        "/api/search",
        files={"image": ("q.png", _png((200, 50, 50)), "image/png")},
        data={"k": "4", "rerank": "true", "k1": "5", "k2": "2", "pool": "12"},
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [item["rank"] for item in body["plain"]] == [1, 2, 3, 4]
    assert all("/red/" in item["path"] for item in body["plain"][:3])
    assert len(body["reranked"]) == 4
    plain_order = client.post(
        "/api/search", files={"image": ("q.png", _png((200, 50, 50)), "image/png")}, data={"k": "12"}
    ).json()["plain"]
    previous = {item["path"]: item["rank"] for item in plain_order}
    for item in body["reranked"]:
        assert item["previous_rank"] == previous[item["path"]]
    assert body["elapsed_ms"] > 0
    scores = [item["score"] for item in body["plain"]]
    assert scores == sorted(scores)


def test_search_by_gallery_path_marks_the_class_and_leaves_the_query_out(
    client: TestClient, gallery: tuple[Path, InMemoryImageEmbeddingStore]
) -> None:
    query = str(gallery[0] / "green" / "0.png")
    for given in (query, "green/0.png"):  # the store's path, or relative to the gallery root
        body = client.post("/api/search", json={"path": given, "k": 5, "expand": True, "neighbors": 3}).json()
        assert query not in [item["path"] for item in body["plain"]]
        assert body["query_label"] == "green"
        assert [item["same_label"] for item in body["plain"]] == [True] * 5
        assert body["reranked"] is None


def test_search_errors_are_4xx_with_a_message(client: TestClient) -> None:
    cases = [
        ({"files": {"image": ("q.png", b"", "image/png")}}, 400, "empty"),
        ({"files": {"image": ("q.txt", b"hello there", "text/plain")}}, 400, "not an image"),
        ({"files": {"image": ("big.png", b"\x89PNG" + b"0" * 60_000, "image/png")}}, 413, "over the limit"),
        ({"json": {"text": "a red square"}}, 400, "clip"),
        ({"json": {"path": "../secret.txt"}}, 404, "not an image of this gallery"),
        ({"json": {"path": "/etc/passwd"}}, 404, "not an image of this gallery"),
        ({"json": {"path": "red/0.png", "k": 0}}, 400, "k must be between 1 and 1000"),
        ({"json": {"path": "red/0.png", "k": "many"}}, 400, "k must be an integer"),
        ({"json": {"path": "red/0.png", "rerank": True, "k2": 9, "k1": 3}}, 400, "k2"),
        ({"json": {"path": "red/0.png", "rerank": True, "lambda": 2}}, 400, "lambda"),
        (
            {"json": {"path": "red/0.png", "rerank": True, "k": 20, "pool": 10}},
            400,
            "pool must be at least k",
        ),
        ({"json": {"path": "red/0.png", "expand": "maybe"}}, 400, "expand must be true or false"),
        ({"json": {}}, 400, "exactly one query"),
        ({"json": {"path": "red/0.png", "text": "x"}}, 400, "exactly one query"),
        ({"json": ["red/0.png"]}, 400, "must be an object"),
        ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 400, "not valid JSON"),
        ({"content": b"path=x", "headers": {"content-type": "text/plain"}}, 400, "multipart"),
    ]
    for request, status, message in cases:
        answer = client.post("/api/search", **request)  # type: ignore[arg-type]
        assert answer.status_code == status, (request, answer.text)
        assert message in answer.json()["detail"], (request, answer.text)


def test_oversized_bodies_are_refused_before_they_are_stored(client: TestClient) -> None:
    big = b"\x89PNG" + b"0" * 2_000_000  # over the 50 kB limit plus 1 MB for the other form fields
    declared = client.post("/api/search", files={"image": ("big.png", big, "image/png")})
    assert declared.status_code == 413 and "upload limit" in declared.json()["detail"]

    def chunks() -> Any:  # no content-length: the body is counted while it is read
        yield b"--x\r\nContent-Disposition: form-data; name=image; filename=a.png\r\n\r\n"
        for _ in range(40):
            yield b"0" * 65_536

    streamed = client.post(
        "/api/search", content=chunks(), headers={"content-type": "multipart/form-data; boundary=x"}
    )
    assert streamed.status_code == 413 and "upload limit" in streamed.json()["detail"]
    page = client.post("/", files={"image": ("big.png", big, "image/png")})
    assert page.status_code == 413


class _TextEmbedder:
    """Images and texts into one space: the mean colour, and a colour named by the text."""

    batch_size = 8

    def embed(self, images: Any) -> np.ndarray:
        rows = [np.asarray(image, dtype=np.float32).reshape(-1, 3).mean(axis=0) for image in images]
        return np.asarray(rows, dtype=np.float32)

    def embed_text(self, texts: Any) -> np.ndarray:
        return np.asarray([COLOURS[text.split()[-1]] for text in texts], dtype=np.float32)


def test_text_queries_on_a_store_with_a_text_side(gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> None:
    store = InMemoryImageEmbeddingStore(gallery[1].paths, _TextEmbedder(), num_workers=1)
    store.build_store(progress=False)
    client = TestClient(create_app(store))
    assert client.get("/api/info").json()["text_queries"] is True
    assert 'name="text"' in client.get("/").text
    body = client.post("/api/search", json={"text": "something blue", "k": 4}).json()
    assert all("/blue/" in item["path"] for item in body["plain"])
    page = client.get("/?text=a%20green&k=3&rerank=true&k1=4&k2=2&pool=8")
    assert page.status_code == 200 and page.text.count("/thumb/green/") >= 6
    form = client.post("/", data={"text": "a red", "k": "2"})
    assert form.status_code == 200 and "/thumb/red/" in form.text


def test_only_gallery_files_are_served(client: TestClient) -> None:
    thumb = client.get("/thumb/red/0.png")
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    assert Image.open(io.BytesIO(thumb.content)).format == "JPEG"
    original = client.get("/image/red/0.png")
    assert original.status_code == 200 and original.content.startswith(b"\x89PNG")
    for route in ("thumb", "image"):
        for path in (
            "../secret.txt",
            "%2e%2e/secret.txt",
            "red/../../secret.txt",
            "/etc/passwd",
            "%2Fetc%2Fpasswd",
            "red/missing.png",
            "red",
            "",
        ):
            answer = client.get(f"/{route}/{path}")
            assert answer.status_code == 404, (route, path, answer.status_code)


def test_page_routes(client: TestClient) -> None:
    home = client.get("/")
    assert home.status_code == 200 and 'name="text"' not in home.text
    assert "18 images" in home.text and home.text.count('class="item"') == 18  # the gallery to browse
    page = client.get("/?path=red/1.png&k=3&rerank=true&k1=4&k2=2&pool=9")
    assert page.status_code == 200
    assert 'id="plain"' in page.text and 'id="reranked"' in page.text
    assert page.text.count('class="item hit"') == 6  # 3 plain + 3 re-ranked, all red
    assert "/thumb/red/" in page.text and "/?path=red/" in page.text  # clickable results
    upload = client.post("/", files={"image": ("q.png", _png((40, 60, 210)), "image/png")}, data={"k": "2"})
    assert upload.status_code == 200 and 'id="plain"' in upload.text and 'id="reranked"' not in upload.text
    assert 'src="/upload/' in upload.text  # the uploaded query is shown (no data: URL, the CSP forbids it)
    assert client.get("/?path=../secret.txt").status_code == 404
    bad = client.get("/?k=abc")
    assert bad.status_code == 400 and "k must be an integer" in bad.text
    bad_upload = client.post("/", files={"image": ("q.png", b"nope", "image/png")})
    assert bad_upload.status_code == 400 and "not an image" in bad_upload.text
    assert "Traceback" not in bad_upload.text
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/../app.py").status_code == 404
    assert client.get("/openapi.json").json()["paths"]["/api/search"]["post"]
    assert client.get("/docs").status_code == 404  # Swagger's page needs a CDN: not offered
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert 'rel="icon"' in home.text and 'href="/docs"' not in home.text


def test_concurrent_requests(client: TestClient) -> None:
    answers: list[int] = []
    lock = threading.Lock()

    def ask(i: int) -> None:
        colour = list(COLOURS.values())[i % 3]
        status = client.post(
            "/api/search",
            files={"image": ("q.png", _png(colour), "image/png")},
            data={"k": "3", "rerank": "true", "k1": "4", "k2": "2", "pool": "10"},
        ).status_code
        with lock:
            answers.append(status)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [200] * 12


def test_thumbnail_cache_is_bounded(gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> None:
    paths = gallery[1].paths
    one = len(ThumbnailCache(size=32).get(paths[0]))
    cache = ThumbnailCache(max_bytes=3 * one + one // 2, size=32)
    for path in paths:
        cache.get(path)
        assert cache.nbytes <= 3 * one + one // 2
    assert 1 <= len(cache) < len(paths)
    with pytest.raises(OSError):
        cache.get(str(gallery[0] / "missing.png"))


def test_decode_upload_limits() -> None:
    with pytest.raises(UploadError, match="pixels") as caught:
        decode_upload(_png((0, 0, 0), (300, 300)), max_bytes=1 << 20, max_pixels=10_000)
    assert caught.value.too_large
    assert decode_upload(_png((1, 2, 3)), max_bytes=1 << 20)[0, 0].tolist() == [1, 2, 3]


def test_settings_file_sets_the_method_and_the_first_page(tmp_path: Path) -> None:
    """``serve --settings``: a tuned file's method (here diffusion) re-ranks, and the page starts from it."""
    from fastapi.testclient import TestClient

    from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
    from galleria.evaluation import RetrievalConfig
    from galleria.rerank import make_reranker
    from galleria.web import create_app

    rng = np.random.default_rng(3)
    folder = tmp_path / "g"
    paths = []
    for label in ("a", "b"):
        (folder / label).mkdir(parents=True)
        for i in range(12):
            pixels = np.clip(rng.normal(60 if label == "a" else 190, 40, (16, 16, 3)), 0, 255)
            path = folder / label / f"{i}.png"
            Image.fromarray(pixels.astype(np.uint8)).save(path)
            paths.append(str(path))
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8))
    store.build_store(progress=False)
    tuned = RetrievalConfig(
        "tuned",
        rerank=True,
        pool=20,
        rerank_method="diffusion",
        rerank_params={"k": 5, "query_k": 3},
        rerank_preset="paper",  # the rest at the paper's values (the default reads them from the gallery)
    )
    client = TestClient(create_app(store, defaults=tuned))
    answer = client.post("/api/search", json={"path": paths[0], "k": 5, "rerank": True}).json()
    plain = store.retrieve_top_k_similar(paths[0], 21)[0]
    pool = [c for c in plain if c.path != paths[0]][:20]
    expected = make_reranker("diffusion", store, k=5, query_k=3).rerank(pool, top_k=5)
    assert [item["path"] for item in answer["reranked"]] == [c.path for c in expected]
    first_page = client.get("/").text
    assert "checked" in first_page.split('id="rerank"')[1][:40]
    # The API's defaults are the file's too: a request that does not say re-ranks with it.
    implicit = client.post("/api/search", json={"path": paths[0], "k": 5}).json()
    assert [item["path"] for item in implicit["reranked"]] == [c.path for c in expected]
    assert client.post("/api/search", json={"path": paths[0], "rerank": False}).json()["reranked"] is None
