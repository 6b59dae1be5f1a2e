"""Issue 15 §2: ``galleria serve`` serves the pixels of the gallery's own images and nothing else."""

from __future__ import annotations

import io
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
from fastapi.testclient import TestClient

from _support.image_kinds import picture, png_bomb, write_image_kinds
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.web import create_app
from galleria.web._files import GalleryFiles, NotServedError, gallery_root
from galleria.web._guard import host_name, normalise_hosts

EVIL_HTML = b"<html><body><script>alert(document.cookie)</script></body></html>"
EVIL_SVG = b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>'


def _store(paths: list[str], dim: int = 192) -> InMemoryImageEmbeddingStore:
    """A store listing ``paths`` (vectors made up), as a valid-digest file naming them would load."""
    vectors = np.random.default_rng(0).normal(size=(len(paths), dim)).astype(np.float32)
    return InMemoryImageEmbeddingStore.from_embeddings(paths, vectors, PixelEmbedder(size=8))


def _reloaded(store: InMemoryImageEmbeddingStore, folder: Path) -> InMemoryImageEmbeddingStore:
    """The store saved and loaded again (its digest valid): what ``galleria serve STORE`` sees."""
    target = folder / "listed.safetensors"
    store.save_to_disk(target)
    return InMemoryImageEmbeddingStore.load_from_disk(target)


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture()
def planted(tmp_path: Path) -> dict[str, Any]:
    """A gallery with images, plus evil.html, evil.svg, a text file and a symlink, all listed by the store."""
    root = tmp_path / "gallery"
    kinds = write_image_kinds(root / "kinds")
    (root / "evil.html").write_bytes(EVIL_HTML)
    (root / "evil.svg").write_bytes(EVIL_SVG)
    (root / "notes.txt").write_text("root:x:0:0:root:/root:/bin/bash\n")
    outside = tmp_path / "outside.png"
    Image.fromarray(picture(40)).save(outside)
    (root / "link.png").symlink_to(kinds["plain.png"])
    listed = [str(p) for p in kinds.values()] + [
        str(root / "evil.html"),
        str(root / "evil.svg"),
        str(root / "notes.txt"),
        str(root / "link.png"),
    ]
    return {"root": root, "kinds": kinds, "outside": outside, "listed": listed, "tmp": tmp_path}


def test_listed_non_images_are_404_never_their_bytes(planted: dict[str, Any]) -> None:
    store = _reloaded(_store(planted["listed"]), planted["tmp"])
    client = TestClient(create_app(store))
    for name in ("evil.html", "evil.svg", "notes.txt"):
        for route in ("image", "thumb"):
            answer = client.get(f"/{route}/{name}")
            assert answer.status_code == 404, (route, name, answer.status_code)
            assert b"<script" not in answer.content and b"root:x" not in answer.content
            assert answer.headers["content-type"].startswith("application/json")
    for name in planted["kinds"]:
        for route in ("image", "thumb"):
            answer = client.get(f"/{route}/kinds/{name}")
            assert answer.status_code == 200, (route, name, answer.text)
            assert answer.headers["content-type"] in {"image/png", "image/jpeg"}
            with Image.open(io.BytesIO(answer.content)) as served:
                assert served.format in {"PNG", "JPEG"} and served.mode == "RGB"


def test_image_route_serves_the_decoded_pixels(planted: dict[str, Any]) -> None:
    from galleria.images.reading import decode_rgb, read_rgb

    client = TestClient(create_app(_store(planted["listed"])))
    for name, path in planted["kinds"].items():
        answer = client.get(f"/image/kinds/{name}")
        expected = read_rgb(path)
        served = decode_rgb(answer.content)
        if answer.headers["content-type"] == "image/png":
            np.testing.assert_array_equal(served, expected, err_msg=name)  # lossless
        else:
            assert name.endswith(".jpg") and np.abs(served.astype(int) - expected).mean() < 3, name
    rgba = decode_rgb(client.get("/image/kinds/rgba.png").content)
    assert (rgba[:, :20] == 255).all()  # the hidden colours under transparency are not sent


def test_etc_passwd_and_relative_paths_are_never_read(planted: dict[str, Any], monkeypatch: Any) -> None:
    listed = [*planted["listed"], "/etc/passwd"]
    with pytest.raises(ValueError, match=r"share no folder below '/'.*--root"):
        create_app(_store(listed))
    client = TestClient(create_app(_reloaded(_store(listed), planted["tmp"]), root=planted["root"]))
    info = client.get("/api/info").json()
    assert info["root"] == os.path.realpath(planted["root"])
    labels = client.get("/?path=etc/passwd")
    assert labels.status_code in {200, 404} and "root:x" not in labels.text  # the stored vector, no file read
    for route in ("image", "thumb"):
        for path in ("etc/passwd", "../../etc/passwd", "/etc/passwd", "%2Fetc%2Fpasswd"):
            answer = client.get(f"/{route}/{path}")
            assert answer.status_code == 404 and b"root:" not in answer.content, (route, path)
    # A relative stored path climbing out: refused without --root, and outside the root with it.
    relative = ["../../../../etc/passwd", "kinds/plain.png"]
    with pytest.raises(ValueError, match="relative path"):
        create_app(_store(relative))
    monkeypatch.chdir(planted["root"] / "kinds")  # the working directory is never used
    Image.fromarray(picture(41)).save(planted["root"] / "kinds" / "cwd_only.png")
    client = TestClient(create_app(_store([*relative, "cwd_only.png"]), root=planted["root"]))
    for path in ("../../../../etc/passwd", "cwd_only.png"):
        assert client.get(f"/image/{path}").status_code == 404, path
    assert client.get("/image/kinds/plain.png").status_code == 200  # relative to the root


def test_symlinks_are_checked_at_request_time(planted: dict[str, Any]) -> None:
    root, link = planted["root"], planted["root"] / "link.png"
    client = TestClient(create_app(_store(planted["listed"])))
    assert client.get("/image/link.png").status_code == 200  # inside the root: served
    for target in ("/etc/passwd", str(planted["outside"]), str(root / "evil.svg")):
        link.unlink()
        link.symlink_to(target)
        for route in ("image", "thumb"):
            answer = client.get(f"/{route}/link.png")
            assert answer.status_code == 404, (target, route)
    link.unlink()
    link.symlink_to(root / "kinds" / "cmyk.jpg")
    assert client.get("/image/link.png").headers["content-type"] == "image/jpeg"
    # A folder of the gallery turned into a link to the outside is refused too.
    moved = planted["tmp"] / "moved"
    shutil.move(str(root / "kinds"), moved)
    (root / "kinds").symlink_to(moved)
    assert client.get("/image/kinds/plain.png").status_code == 404


def test_files_that_change_after_the_build_are_4xx(planted: dict[str, Any]) -> None:
    kinds = planted["kinds"]
    paths = [str(p) for p in kinds.values()]
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    client = TestClient(create_app(store), raise_server_exceptions=False)
    for name in ("plain.png", "rgba.png", "la.png"):
        assert client.get(f"/image/{name}").status_code == 200
    os.remove(kinds["plain.png"])
    kinds["rgba.png"].write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    os.remove(kinds["la.png"])
    os.mkfifo(kinds["la.png"])  # a FIFO where an image was: refused without blocking
    for name in ("plain.png", "rgba.png", "la.png"):
        for route in ("image", "thumb"):
            assert client.get(f"/{route}/{name}").status_code == 404, (route, name)
        # A search by that gallery path uses its stored embedding: it still answers.
        found = client.post("/api/search", json={"path": name, "k": 3, "rerank": True, "pool": 5})
        assert found.status_code == 200, found.text
        assert str(kinds[name]) not in [item["path"] for item in found.json()["plain"]]
        page = client.get(f"/?path={name}&k=2")
        assert page.status_code == 200


def test_bombs_are_4xx_never_500(tmp_path: Path) -> None:
    root = tmp_path / "g"
    root.mkdir()
    Image.fromarray(picture(1)).save(root / "ok.png")
    wide = png_bomb(root / "wide.png", 12_000, 12_000)  # 144 Mpx, a few kB
    huge = png_bomb(root / "huge.png", 15_000, 15_000)  # over Pillow's own bomb limit
    client = TestClient(
        create_app(_store([str(root / "ok.png"), str(wide), str(huge)])), raise_server_exceptions=False
    )
    for name in ("wide.png", "huge.png"):
        for route in ("thumb", "image"):
            answer = client.get(f"/{route}/{name}")
            assert answer.status_code == 404 and "too large" in answer.json()["detail"], (route, name)
        upload = client.post("/api/search", files={"image": (name, (root / name).read_bytes(), "image/png")})
        assert upload.status_code == 413 and "pixels" in upload.json()["detail"], upload.text
    small_limit = TestClient(create_app(_store([str(root / "ok.png"), str(wide)]), max_pixels=1000))
    assert small_limit.get("/thumb/ok.png").status_code == 404  # 1,536 pixels > 1,000
    assert (
        small_limit.post(
            "/api/search", files={"image": ("q.png", (root / "ok.png").read_bytes())}
        ).status_code
        == 413
    )


def test_request_bodies_that_used_to_be_500(planted: dict[str, Any]) -> None:
    client = TestClient(create_app(_store(planted["listed"])), raise_server_exceptions=False)
    deep = b"[" * 3000 + b"]" * 3000
    answer = client.post("/api/search", content=deep, headers={"content-type": "application/json"})
    assert answer.status_code == 400 and "nested too deeply" in answer.json()["detail"]
    deep_object = b'{"path": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    answer = client.post("/api/search", content=deep_object, headers={"content-type": "application/json"})
    assert answer.status_code == 400
    png = _png(picture(3))
    two = client.post(
        "/api/search", files=[("image", ("a.png", png, "image/png")), ("image", ("b.png", png))]
    )
    assert two.status_code == 400 and "one 'image' field" in two.json()["detail"]
    page = client.post("/", files=[("image", ("a.png", png, "image/png")), ("image", ("b.png", png))])
    assert page.status_code == 400 and "Traceback" not in page.text
    huge_number = b'{"path": "kinds/plain.png", "k": ' + b"9" * 5000 + b"}"
    answer = client.post("/api/search", content=huge_number, headers={"content-type": "application/json"})
    assert answer.status_code == 400


def test_security_headers_on_every_answer(planted: dict[str, Any]) -> None:
    client = TestClient(create_app(_store(planted["listed"])))
    for url in (
        "/",
        "/api/info",
        "/thumb/kinds/plain.png",
        "/image/evil.html",
        "/static/app.js",
        "/nowhere",
        "/favicon.ico",
    ):
        headers = client.get(url).headers
        assert headers["x-content-type-options"] == "nosniff", url
        csp = headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, url
        assert headers["referrer-policy"] == "no-referrer", url
    posted = client.post("/api/search", json={"path": "kinds/plain.png", "k": 2})
    assert posted.headers["x-content-type-options"] == "nosniff"


def test_host_header_check(planted: dict[str, Any]) -> None:
    app = create_app(_store(planted["listed"]), allowed_hosts=["127.0.0.1", "Gallery.LAN"])
    client = TestClient(app, base_url="http://localhost:8000")
    for host in (
        "localhost:8000",
        "127.0.0.1:8000",
        "gallery.lan",
        "GALLERY.lan.:80",
        "[::1]:8000",
        "192.168.1.7",
    ):
        answer = client.get("/api/info", headers={"host": host})
        assert answer.status_code == 200, host
    for host in ("evil.example", "evil.example:8000", "localhost.evil.example", "gallery.lan.evil", ""):
        answer = client.get("/api/info", headers={"host": host})
        assert answer.status_code == 400 and "--allow-host" in answer.json()["detail"], host
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert TestClient(app).get("/").status_code == 400  # TestClient's default host, 'testserver'
    assert TestClient(create_app(_store(planted["listed"]))).get("/").status_code == 200  # no check asked
    assert host_name("[::1]:8000") == "::1" and host_name("Example.org.:80") == "example.org"
    assert normalise_hosts([]) == frozenset({"localhost"})
    with pytest.raises(ValueError, match="allowed host must be a host name"):
        normalise_hosts(["evil/path"])


def test_gallery_root_rules(tmp_path: Path) -> None:
    assert gallery_root(["/a/b/c.png"]) == os.path.realpath("/a/b")
    assert gallery_root(["/a/b/c.png", "/a/d/e.png"]) == os.path.realpath("/a")
    with pytest.raises(ValueError, match="share no folder below '/'"):
        gallery_root(["/a/c.png", "/b/e.png"])
    with pytest.raises(ValueError, match="share no folder"):
        gallery_root(["/c.png"])
    with pytest.raises(ValueError, match="no image"):
        gallery_root([])
    with pytest.raises(ValueError, match="root must be an existing folder"):
        gallery_root(["/a/c.png"], tmp_path / "missing")
    assert gallery_root(["/a/c.png", "/b/e.png"], tmp_path) == os.path.realpath(tmp_path)


def test_refusals_are_logged_once(planted: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    files = GalleryFiles(planted["listed"])
    with caplog.at_level(logging.WARNING, logger="galleria.web"):
        for _ in range(3):
            with pytest.raises(NotServedError):
                files.open(str(planted["root"] / "missing.png"))
            with pytest.raises(NotServedError):
                files.open("/etc/passwd")
    messages = [record.getMessage() for record in caplog.records if record.name == "galleria.web"]
    assert len(messages) == 2 and "missing.png" in messages[0] and "/etc/passwd" in messages[1]


def test_serve_cli_root_and_allow_host(planted: dict[str, Any], monkeypatch: Any, capsys: Any) -> None:
    from galleria.cli import main
    from galleria.cli import serve as serve_cli

    seen: dict[str, Any] = {}

    def fake_serve(app: Any, *, host: str, port: int, **options: Any) -> None:  # on_stop too
        seen["app"], seen["host"] = app, host

    monkeypatch.setattr("galleria.web.serve", fake_serve)
    monkeypatch.setattr(serve_cli, "_check_bind", lambda host, port: None)
    listed = [*planted["listed"], "/etc/passwd"]
    store_file = planted["tmp"] / "listed.safetensors"
    _store(listed).save_to_disk(store_file)
    assert main(["serve", str(store_file)]) == 2
    assert "--root" in capsys.readouterr().err
    root = planted["tmp"] / "served"
    shutil.copytree(planted["root"], root, symlinks=True)
    code = main(["serve", str(store_file), "--root", str(root), "--allow-host", "photos.lan", "--port", "0"])
    assert code == 0
    assert f"gallery root {os.path.realpath(root)}" in capsys.readouterr().err
    client = TestClient(seen["app"], base_url="http://photos.lan")
    assert client.get("/api/info").json()["root"] == os.path.realpath(root)
    assert client.get("/api/info", headers={"host": "evil.example"}).status_code == 400
    assert main(["serve", str(store_file), "--root", str(root), "--allow-host", "a b"]) == 2
