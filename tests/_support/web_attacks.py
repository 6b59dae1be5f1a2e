"""An attack corpus for uploads and the routes of ``galleria serve`` (issue 15), scaled by ``tries``.

:func:`run_corpus` builds a gallery of every image kind (plus planted non-images and a symlink), serves it
through FastAPI's TestClient and sends each family of attacks; it returns, per family, how many tries
were sent, how many were answered as they should be (clean) and how many were not (bad), with the first
bad examples. ``tests/security/test_web_attack_corpus.py`` runs it small and asserts 0 bad;
``tests/security/stress_web_attacks.py`` runs it larger and prints the table of ``docs/benchmarks.md``.

What "clean" means, per answer: never a 500 or an exception; the security headers present; a 200 from
an image route only for a gallery image, with PNG/JPEG pixels equal to what the reader decodes (never the
bytes of a planted file); an upload answered 200 (a search), 400 (not an image) or 413 (too large), with
an uploaded gallery image its own rank 1 at distance ≤ 1e-5.
"""

from __future__ import annotations

import io
import json
import os
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
from PIL import Image

from _support.image_kinds import picture, png_bomb, write_image_kinds

SECRET = b"root:x:0:0:TOP-SECRET-MARKER:/root:/bin/bash\n"
EVIL_HTML = b"<html><script>alert('TOP-SECRET-MARKER')</script></html>"
EVIL_SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert("TOP-SECRET-MARKER")</script></svg>'
MARKER = b"TOP-SECRET-MARKER"


@dataclass
class Row:
    """Tries, clean and bad answers of one family of attacks."""

    name: str
    tries: int = 0
    clean: int = 0
    bad: int = 0
    examples: list[str] = field(default_factory=list)

    def record(self, ok: bool, what: str) -> None:
        self.tries += 1
        if ok:
            self.clean += 1
        else:
            self.bad += 1
            if len(self.examples) < 5:
                self.examples.append(what)


def _headers_ok(answer: Any) -> bool:
    headers = answer.headers
    return (
        headers.get("x-content-type-options") == "nosniff"
        and "frame-ancestors 'none'" in headers.get("content-security-policy", "")
        and "referrer-policy" in headers
    )


def _flips(data: bytes, rng: np.random.Generator, count: int) -> Iterator[bytes]:
    for _ in range(count):
        mutated = bytearray(data)
        for _ in range(int(rng.integers(1, 9))):
            position = int(rng.integers(0, len(mutated)))
            mutated[position] = int(rng.integers(0, 256))
        yield bytes(mutated)


def _truncations(data: bytes, rng: np.random.Generator, count: int) -> Iterator[bytes]:
    for _ in range(count):
        yield data[: int(rng.integers(1, len(data)))]


def _chunk(kind: bytes, body: bytes) -> bytes:
    return (
        struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    )


def _crafted_uploads() -> list[tuple[str, bytes]]:
    """Headers that lie about sizes, polyglots and files that are not images."""
    tiny_idat = _chunk(b"IDAT", zlib.compress(b"\x00\x00"))
    crafted = [
        (
            f"png {w}x{h}",
            b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + tiny_idat,
        )
        for w, h in [
            (1, 1),
            (0, 0),
            (2**31 - 1, 1),
            (65535, 65535),
            (100_000, 100_000),
            (1, 2**31 - 1),
            (2**32 - 1, 2**32 - 1),
        ]
    ]
    sof = (
        b"\xff\xd8\xff\xc0\x00\x11\x08"
        + struct.pack(">HH", 65500, 65500)
        + b"\x03\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    )
    crafted += [
        ("jpeg sof 65500²", sof + b"\xff\xd9"),
        ("gif 65535²", b"GIF89a" + struct.pack("<HH", 65535, 65535) + b"\x00\x00\x00;"),
        (
            "bmp huge",
            b"BM"
            + struct.pack("<IHHI", 0, 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, 60000, 60000, 1, 24, 0, 0, 0, 0, 0, 0),
        ),
        ("html", EVIL_HTML),
        ("svg", EVIL_SVG),
        ("passwd", SECRET),
        ("gif+html polyglot", b"GIF89a/*" + EVIL_HTML),
        ("empty", b""),
        ("one byte", b"\x89"),
        ("zip", b"PK\x03\x04" + bytes(26)),
        ("pdf", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF"),
        (
            "tiff loop",
            b"II*\x00\x08\x00\x00\x00\x01\x00\x00\x01\x03\x00\x01\x00\x00\x00\x10\x00\x00\x00\x08\x00\x00\x00",
        ),
        (
            "ico",
            b"\x00\x00\x01\x00\x01\x00\xff\xff\x00\x00\x01\x00\x20\x00" + struct.pack("<II", 1 << 30, 22),
        ),
    ]
    return crafted


def _route_paths(kinds: dict[str, Path]) -> list[tuple[str, bool]]:
    """(URL path after the route, whether it names a gallery image) — traversal in many spellings."""
    secret_targets = [
        "secret.txt",
        "../secret.txt",
        "..%2fsecret.txt",
        "%2e%2e/secret.txt",
        "%2e%2e%2fsecret.txt",
        "%252e%252e%252fsecret.txt",
        "..%5csecret.txt",
        "..\\secret.txt",
        "kinds/../../secret.txt",
        "kinds/%2e%2e/%2e%2e/secret.txt",
        "/etc/passwd",
        "%2Fetc%2Fpasswd",
        "//etc/passwd",
        "etc/passwd",
        "../../../../../../etc/passwd",
        "%c0%ae%c0%ae/secret.txt",
        "kinds/plain.png%00.txt",
        "kinds/plain.png/",
        "kinds//plain.png",
        "kinds/./plain.png",
        "KINDS/PLAIN.PNG",
        "kinds/plain.png?x=1",
        "evil.html",
        "evil.svg",
        "notes.txt",
        "link.png",
        "fifo.png",
        "folder.png",
        "kinds",
        "",
        ".",
        "..",
        "a" * 5000,
        "kinds/" + "../" * 200 + "etc/passwd",
        "%00",
        "~root/.ssh/id_rsa",
        "kinds/plain.png#x",
        "\u2024\u2024/secret.txt",
        "kinds/plain.png;.html",
        "file:///etc/passwd",
        "http://evil.example/x.png",
    ]
    served = {"kinds/plain.png?x=1", "kinds/plain.png#x", "kinds/./plain.png"}  # the same URL path
    paths = [(target, target in served) for target in secret_targets]
    paths += [(f"kinds/{name}", True) for name in kinds]
    return paths


def _gallery(folder: Path) -> tuple[Path, dict[str, Path], list[str]]:
    root = folder / "gallery"
    kinds = write_image_kinds(root / "kinds")
    (root / "evil.html").write_bytes(EVIL_HTML)
    (root / "evil.svg").write_bytes(EVIL_SVG)
    (root / "notes.txt").write_bytes(SECRET)
    (folder / "secret.txt").write_bytes(SECRET)
    (root / "link.png").symlink_to(folder / "secret.txt")
    os.mkfifo(root / "fifo.png")
    (root / "folder.png").mkdir()
    listed = [str(p) for p in kinds.values()]
    listed += [
        str(root / name)
        for name in ("evil.html", "evil.svg", "notes.txt", "link.png", "fifo.png", "folder.png")
    ]
    listed += ["/etc/passwd", str(folder / "secret.txt")]
    return root, kinds, listed


def run_corpus(tries: int = 20, seed: int = 15, progress: Callable[[str], None] | None = None) -> list[Row]:
    """Run every family of attacks, ``tries`` mutations per gallery file where a family mutates files."""
    from fastapi.testclient import TestClient

    from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
    from galleria.images.reading import read_rgb
    from galleria.web import create_app

    rng = np.random.default_rng(seed)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        root, kinds, listed = _gallery(folder)
        images = [str(p) for p in kinds.values()]
        built = InMemoryImageEmbeddingStore(images, PixelEmbedder(size=8), num_workers=1)
        built.build_store(progress=False)
        store_file = folder / "store.safetensors"
        # The served store lists the images and every planted file (a valid digest: saved by galleria).
        vectors = np.concatenate(
            [built.embeddings, np.random.default_rng(0).normal(size=(len(listed) - len(images), built.dim))]
        )
        InMemoryImageEmbeddingStore.from_embeddings(
            listed, vectors.astype(np.float32), PixelEmbedder(size=8)
        ).save_to_disk(store_file)
        store = InMemoryImageEmbeddingStore.load_from_disk(store_file)
        app = create_app(store, root=root, max_upload_bytes=2_000_000, allowed_hosts=["127.0.0.1"])
        client = TestClient(app, base_url="http://localhost", raise_server_exceptions=False)
        pixels_of = {f"kinds/{name}": read_rgb(path) for name, path in kinds.items()}

        def say(text: str) -> None:
            if progress is not None:
                progress(text)

        def upload(data: bytes, name: str = "q.png") -> Any:
            return client.post(
                "/api/search", files={"image": (name, data, "application/octet-stream")}, data={"k": "3"}
            )

        def upload_ok(answer: Any) -> bool:
            if not _headers_ok(answer) or MARKER in answer.content:
                return False
            if answer.status_code == 200:
                return len(answer.json()["plain"]) == 3
            return answer.status_code in {400, 413} and isinstance(answer.json().get("detail"), str)

        # 1. Every gallery image uploaded back: its own rank 1 at distance ≤ 1e-5.
        row = Row("upload: gallery images uploaded back (rank 1, ≤ 1e-5)")
        for name, path in kinds.items():
            answer = upload(path.read_bytes(), name)
            best = answer.json()["plain"][0] if answer.status_code == 200 else {}
            row.record(
                best.get("path") == str(path) and best.get("score", 1.0) <= 1e-5,
                f"{name}: {answer.text[:120]}",
            )
        rows.append(row)
        say(row.name)

        # 2. Mutated gallery files uploaded: byte flips and truncations of every kind.
        row = Row("upload: byte flips and truncations of every kind")
        for name, path in kinds.items():
            data = path.read_bytes()
            for index, mutated in enumerate(
                [*_flips(data, rng, tries), *_truncations(data, rng, max(1, tries // 2))]
            ):
                answer = upload(mutated, name)
                row.record(upload_ok(answer), f"{name} #{index}: {answer.status_code} {answer.text[:100]}")
        rows.append(row)
        say(row.name)

        # 3. Crafted headers, bombs, polyglots, non-images.
        row = Row("upload: lying headers, bombs, polyglots, non-images")
        crafted = _crafted_uploads()
        crafted.append(("png 144 Mpx", png_bomb(folder / "b1.png", 12_000, 12_000).read_bytes()))
        crafted.append(("png 225 Mpx", png_bomb(folder / "b2.png", 15_000, 15_000).read_bytes()))
        for label, data in crafted:
            answer = upload(data)
            ok = upload_ok(answer) and (
                label.startswith("png 1x1") or answer.status_code != 200 or label == "ico"
            )
            row.record(ok, f"{label}: {answer.status_code} {answer.text[:100]}")
        rows.append(row)
        say(row.name)

        # 4. Odd request bodies: JSON and multipart.
        row = Row("api: odd JSON and multipart bodies")
        png = io.BytesIO()
        Image.fromarray(picture(3)).save(png, "PNG")
        bodies: list[dict[str, Any]] = [
            {"content": b"[" * depth + b"]" * depth, "headers": {"content-type": "application/json"}}
            for depth in (10, 999, 1001, 3000, 100_000)
        ]
        bodies += [
            {
                "content": b'{"path": "kinds/plain.png", "k": ' + b"9" * 5000 + b"}",
                "headers": {"content-type": "application/json"},
            },
            {"files": [("image", ("a.png", png.getvalue())), ("image", ("b.png", png.getvalue()))]},
            {"files": {"image": ("a.png", b"")}, "data": {"path": "kinds/plain.png"}},
            {"data": {"image": "not a file"}},
            {"content": b"--x\r\n\r\n--x--", "headers": {"content-type": "multipart/form-data; boundary=x"}},
            {"content": b"", "headers": {"content-type": "multipart/form-data"}},
            {"content": b"\xff\xfe{", "headers": {"content-type": "application/json"}},
        ]
        for key in (
            "k",
            "pool",
            "k1",
            "k2",
            "lambda",
            "alpha",
            "neighbors",
            "expand",
            "rerank",
            "path",
            "text",
        ):
            for value in (
                None,
                [],
                {},
                [1],
                "",
                "NaN",
                "Infinity",
                -1,
                0,
                1e308,
                10**400 if key != "path" else "x" * 100_000,
                True,
                "\x00",
                "../secret.txt",
            ):
                body = {"path": "kinds/plain.png", key: value}
                try:
                    content = json.dumps(body).encode()
                except (OverflowError, ValueError):
                    content = ("{" + f'"path": "kinds/plain.png", "{key}": ' + str(value) + "}").encode()
                bodies.append({"content": content, "headers": {"content-type": "application/json"}})
        for body in bodies:
            answer = client.post("/api/search", **body)
            ok = (
                answer.status_code in {200, 400, 404, 413}
                and _headers_ok(answer)
                and MARKER not in answer.content
            )
            row.record(ok, f"{str(body)[:80]}: {answer.status_code} {answer.text[:100]}")
        rows.append(row)
        say(row.name)

        # 5. Route paths: traversal, encodings, planted files, the images themselves.
        row = Row("serve: /image, /thumb, /?path= with traversal and planted files")
        for target, is_image in _route_paths(kinds):
            for route in ("image", "thumb"):
                answer = client.get(f"/{route}/{target}")
                ok = _headers_ok(answer) and MARKER not in answer.content and answer.status_code in {200, 404}
                if answer.status_code == 200 and not answer.url.path.startswith(f"/{route}/"):
                    ok = ok and not answer.headers["content-type"].startswith(
                        "image/"
                    )  # the client resolved '..'
                elif is_image and answer.status_code != 200:
                    ok = False  # a gallery image must be served
                elif answer.status_code == 200:
                    ok = ok and is_image and answer.headers["content-type"] in {"image/png", "image/jpeg"}
                    if ok and route == "image" and answer.headers["content-type"] == "image/png":
                        from galleria.images.reading import decode_rgb

                        served_path = unquote(answer.url.path[len("/image/") :])
                        ok = np.array_equal(decode_rgb(answer.content), pixels_of[served_path])
                row.record(ok, f"/{route}/{target[:60]}: {answer.status_code}")
            answer = client.get("/", params={"path": target})
            row.record(
                answer.status_code in {200, 404} and MARKER not in answer.content and _headers_ok(answer),
                f"/?path={target[:60]}",
            )
            answer = client.post("/api/search", json={"path": target, "k": 2})
            row.record(
                answer.status_code in {200, 400, 404} and MARKER not in answer.content,
                f"search {target[:60]}: {answer.status_code}",
            )
        rows.append(row)
        say(row.name)

        # 6. Gallery files damaged after the build (byte flips, truncation), then re-asked.
        row = Row("serve: gallery files damaged after the build")
        for name, path in kinds.items():
            original = path.read_bytes()
            mutations = [
                *_flips(original, rng, max(1, tries // 2)),
                *_truncations(original, rng, max(1, tries // 4)),
            ]
            for index, mutated in enumerate(mutations):
                path.write_bytes(mutated)
                for route in ("image", "thumb"):
                    answer = client.get(f"/{route}/kinds/{name}")
                    ok = answer.status_code in {200, 404} and _headers_ok(answer)
                    if answer.status_code == 200:
                        ok = ok and answer.headers["content-type"] in {"image/png", "image/jpeg"}
                    row.record(ok, f"{name} #{index} /{route}: {answer.status_code}")
            path.write_bytes(original)
        rows.append(row)
        say(row.name)

        # 7. Host headers (DNS rebinding).
        row = Row("serve: Host header (DNS rebinding)")
        allowed = ["localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000", "10.0.0.7", "LOCALHOST."]
        refused = [
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "evil.example:8000",
            "",
            "a b",
            "localhost:80:80",
            "[::1",
            "x" * 3000,
        ]
        for host in allowed + refused:
            answer = client.get("/api/info", headers={"host": host})
            expected = 200 if host in allowed else 400
            row.record(
                answer.status_code == expected and _headers_ok(answer), f"{host[:40]}: {answer.status_code}"
            )
        rows.append(row)
        say(row.name)

        # 8. Bad parameters on every page and route: never a 500, always the headers (issue 25).
        row = Row("pages: bad page numbers and parameters on every route")
        _bad_parameters(row, create_app(store, root=root, evaluation=_evaluation(images)))
        rows.append(row)
        say(row.name)
    return rows


#: Values no number parameter accepts: other digits, signs, huge, empty, control characters.
BAD_NUMBERS = ["²", "١٢", "1" * 5000, "9" * 4301, "0", "-1", "+1", " 1", "1e3", "0x10", "", "\x00", "NaN"]
#: Those no setting accepts (the others may be good values of some: ``lambda`` 0, ``k`` ١٢ = 12).
NEVER_A_SETTING = {"²", "1" * 5000, "9" * 4301, "\x00", "NaN"}


def _evaluation(images: list[str]) -> Any:
    """A small made-up evaluation of ``images`` (for the ``/eval`` pages)."""
    from galleria.evaluation._query_types import QueryOutcome, QueryResults, RankedPaths

    ranked = tuple(images[:3])
    queries = [
        QueryOutcome(
            query=path,
            label="x",
            ap={"plain": 0.5, "rerank": 0.5 + 0.1 * i},
            before=RankedPaths(ranked, (True, False, True)),
            after=RankedPaths(ranked, (True, False, True), (1, 2, None)),
        )
        for i, path in enumerate(images[:4])
    ]
    settings = {"query_expansion": False, "rerank": False}
    configurations = [
        {"name": "plain", "title": "plain", "settings": settings, "map@100": 0.5},
        {"name": "rerank", "title": "rerank", "settings": {**settings, "rerank": True}, "map@100": 0.5},
    ]
    return QueryResults("made up", ("plain", "rerank"), 3, configurations, queries)


def _bad_parameters(row: Row, app: Any) -> None:
    """Send bad values of every parameter of every page and route; record 4xx (or a 200 page) as clean."""
    from urllib.parse import quote

    from fastapi.testclient import TestClient

    client = TestClient(app, base_url="http://localhost", raise_server_exceptions=False)

    def check(answer: Any, what: str, *, refused: bool) -> None:
        status = answer.status_code
        ok = _headers_ok(answer) and status < 500 and (not refused or 400 <= status < 500)
        row.record(ok, f"{what[:80]}: {status}")

    for value in BAD_NUMBERS:
        check(client.get("/eval", params={"page": value}), f"/eval?page={value}", refused=True)
        refused = value not in ("0", "")  # query 0 exists; /eval/ is the list
        check(client.get("/eval/" + quote(value, safe="")), f"/eval/{value}", refused=refused)
        check(client.get("/upload/" + quote(value, safe="") + ".jpg"), f"/upload/{value}", refused=True)
        for key in ("k", "pool", "k1", "k2", "lambda", "alpha", "neighbors", "expand", "rerank"):
            query = {"path": "kinds/plain.png", key: value}
            refused = value in NEVER_A_SETTING
            check(client.get("/", params=query), f"/?{key}={value}", refused=refused)
            check(client.post("/", data={**query, "text": ""}), f"POST / {key}={value}", refused=False)
            check(client.post("/api/search", data=query), f"form {key}={value}", refused=refused)
        for key in ("page", "folder", "name"):
            refused = key == "page" and value in NEVER_A_SETTING
            check(client.get("/", params={key: value}), f"/?{key}={value}", refused=refused)
    for value in ("99999", "1", "4"):  # past the end: the last page; good numbers: 200
        check(client.get("/eval", params={"page": value}), f"/eval?page={value}", refused=False)


def markdown_table(rows: list[Row]) -> str:
    """The rows as a markdown table: family, tries, clean, bad."""
    lines = ["| family | tries | clean | bad |", "|---|---:|---:|---:|"]
    lines += [f"| {row.name} | {row.tries} | {row.clean} | {row.bad} |" for row in rows]
    total = Row("all", sum(r.tries for r in rows), sum(r.clean for r in rows), sum(r.bad for r in rows))
    lines.append(f"| **all** | {total.tries} | {total.clean} | {total.bad} |")
    return "\n".join(lines)
