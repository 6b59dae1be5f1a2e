"""End-to-end tests of a gallery's whole life on the command line, each command in a subprocess.

build (with a broken file, a checkpoint and --resume) → info → search --queries (--skip-errors,
--exclude-self, --csv, --json) → add → remove → sync; evaluate --report's report.html; and the one-line
errors (exit code 2) of the new commands.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from _support.extras import needs

COLOURS = {"red": (210, 40, 40), "green": (40, 190, 60), "blue": (40, 60, 210)}


def galleria(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "galleria", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def ok(*args: str) -> subprocess.CompletedProcess[str]:
    process = galleria(*args)
    assert process.returncode == 0, process.stderr
    return process


def ok_json(*args: str) -> Any:
    return json.loads(ok(*args, "--json").stdout)


def fails(*args: str, match: str) -> str:
    process = galleria(*args)
    assert process.returncode == 2, (process.stdout, process.stderr)
    # Warnings (one line each, e.g. the symlink loop) may come before; the error is one line, last.
    lines = [line for line in process.stderr.strip().splitlines() if ": warning: " not in line]
    assert len(lines) == 1 and "Traceback" not in process.stderr, process.stderr
    assert lines[0].startswith(f"galleria {args[0]}: error: "), lines[0]
    assert match in lines[0], lines[0]
    return lines[0]


def _image(path: Path, colour: tuple[int, int, int], rng: np.random.Generator) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.clip(np.array(colour) + rng.normal(0, 30, (16, 20, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)


@pytest.fixture()
def photos(tmp_path: Path) -> Path:
    """A gallery as a user has one: class folders, a nested folder, a broken file, a symlink loop."""
    rng = np.random.default_rng(0)
    root = tmp_path / "photos"
    for label, colour in COLOURS.items():
        for i in range(6):
            sub = "2024" if i >= 4 else ""
            _image(root / label / sub / f"{label}{i}.png", colour, rng)
    (root / "red" / "broken.jpg").write_bytes(b"this is not a jpeg")
    (root / "blue" / "2024" / "again").symlink_to(root / "blue")
    return root


def test_build_resume_info_search_add_remove_sync(photos: Path, tmp_path: Path) -> None:
    store = str(tmp_path / "photos.safetensors")
    partial = store + ".partial"
    # An unreadable image stops the build; what was embedded before it is kept in the checkpoint.
    line = fails(
        "build",
        str(photos),
        "--out",
        store,
        "--batch-size",
        "1",
        "--checkpoint-every",
        "0",
        match="cannot read image",
    )
    assert "--skip-errors" in line and "--resume" in line
    assert os.path.exists(partial) and not os.path.exists(store)
    loop = galleria("build", str(photos), "--out", store, "--resume", "--batch-size", "1")
    assert "warning: not following" in loop.stderr and "again" in loop.stderr  # reported, not silent
    fails("build", str(photos), "--out", store, match="pass --resume")
    fails("build", str(photos), "--out", store, "--resume", "--embedder", "pixel:8", match="checkpoint")
    os.remove(photos / "red" / "broken.jpg")
    summary = ok_json("build", str(photos), "--out", store, "--resume", "--batch-size", "1")
    assert summary["indexed"] == 18 and 0 < summary["resumed"] < 18
    assert not os.path.exists(partial)
    (photos / "red" / "broken.jpg").write_bytes(b"this is not a jpeg")

    info = ok_json("info", store)
    assert info["count"] == 18 and info["embedder"]["type"] == "pixel" and info["format_version"] >= 1
    assert info["file_bytes"] == os.path.getsize(store) and info["dim"] == 32 * 32 * 3
    text = ok("info", store).stdout
    assert "images:         18" in text and "format version:" in text

    # --queries FOLDER with a broken file: skipped and reported; --exclude-self drops the query itself.
    process = ok(
        "search",
        store,
        "--queries",
        str(photos / "red"),
        "--skip-errors",
        "--exclude-self",
        "-k",
        "3",
        "--csv",
    )
    rows = list(csv.DictReader(io.StringIO(process.stdout)))
    assert len(rows) == 6 * 3 and "broken.jpg" in process.stderr
    assert all(row["query"] != row["path"] for row in rows)
    assert all("/red/" in row["path"] for row in rows)
    fails("search", store, "--queries", str(photos / "red"), match="--skip-errors")
    listing = tmp_path / "queries.txt"
    listing.write_text("# two queries\nphotos/green/green0.png\n\nphotos/blue/blue1.png\n")
    payload = ok_json(
        "search",
        store,
        "--queries",
        str(listing),
        "-k",
        "2",
        "--rerank",
        "--k1",
        "4",
        "--k2",
        "2",
        "--pool",
        "10",
    )
    assert [entry["query"] for entry in payload["queries"]] == [
        str(tmp_path / "photos/green/green0.png"),
        str(tmp_path / "photos/blue/blue1.png"),
    ]
    assert payload["rerank"]["k1"] == 4
    table = ok("search", store, "--image", str(photos / "green" / "green0.png"), "-k", "2").stdout
    lines = table.splitlines()
    assert lines[1].split() == ["rank", "distance", "path"]  # a header names the columns
    assert lines[2].split()[2].startswith(str(photos / "green"))  # the whole path, even past 80 columns

    # add: a new folder; remove: one file and a folder; both save in place.
    _image(tmp_path / "more" / "red9.png", COLOURS["red"], np.random.default_rng(5))
    assert ok_json("add", store, str(tmp_path / "more"))["added"] == 1
    assert ok_json("add", store, str(tmp_path / "more"))["already_present"] == 1
    assert ok_json("remove", store, str(tmp_path / "more" / "red9.png"))["count"] == 18
    assert ok_json("remove", store, str(photos / "green" / "2024"))["removed"] == 2
    fails("remove", store, str(photos / "green" / "2024"), match="not in the store")
    assert ok_json("info", store)["count"] == 16

    # sync: the two removed come back, a vanished file goes, a changed file is re-embedded.
    os.remove(photos / "blue" / "blue0.png")
    changed = photos / "red" / "red1.png"
    _image(changed, COLOURS["green"], np.random.default_rng(9))
    future = time.time() + 5
    os.utime(changed, (future, future))
    report = ok_json("sync", store, str(photos), "--skip-errors")
    assert report["added"] == 2 and report["removed"] == 1 and report["reembedded"] == 1
    assert [Path(p).name for p in report["skipped"]] == ["broken.jpg"]
    assert report["count"] == 17
    again = ok_json("sync", store, str(photos), "--skip-errors")
    assert (again["added"], again["removed"], again["reembedded"]) == (0, 0, 0)
    # The changed file now sits among the green ones.
    payload = ok_json("search", store, "--image", str(changed), "-k", "4", "--exclude-self")
    assert sum("/green/" in r["path"] for r in payload["queries"][0]["results"]) >= 3


class _StrictHTML(HTMLParser):
    """Fails on unbalanced or misnested tags and duplicate ids; collects image sources."""

    VOID = frozenset({"meta", "img", "br", "hr", "link", "input", "source"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.ids: set[str] = set()
        self.images: list[str] = []
        self.doctype = False

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl.lower() == "doctype html"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if "id" in values:
            assert values["id"] not in self.ids, f"duplicate id {values['id']}"
            self.ids.add(str(values["id"]))
        if tag == "img":
            assert values.get("alt"), "an image without alt text"
            self.images.append(str(values["src"]))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()


@needs("matplotlib")
def test_evaluate_writes_a_valid_self_contained_html_report(photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    process = ok(
        "evaluate",
        str(photos),
        "--n-queries",
        "6",
        "--skip-errors",
        "--expand",
        "--rerank",
        "--k1",
        "4",
        "--k2",
        "2",
        "--pool",
        "12",
        "--report",
        str(out),
    )
    assert "running plain retrieval on" in process.stderr  # progress while the queries run
    page = (out / "report.html").read_text(encoding="utf-8")
    checker = _StrictHTML()
    checker.feed(page)
    checker.close()
    assert checker.doctype and checker.stack == []
    assert "pr_curve.png" in checker.images
    for source in checker.images:
        assert not os.path.isabs(source) and (out / source).is_file(), source
    assert page.count("<tr><td>") == 3  # plain, αQE, αQE + re-ranking
    sheets = page.count('class="sheet"')
    assert 0 < sheets <= 20
    assert len(checker.images) == 1 + sheets * 21  # PR curve; per sheet the query and 10 + 10 results
    payload = json.loads((out / "metrics.json").read_text())
    # Nested 2024/ folders count; the broken file is left out before the split (and listed as skipped).
    assert payload["dataset"]["n_images"] == 18


def test_embedder_specs_and_errors(photos: Path, tmp_path: Path) -> None:
    store = str(tmp_path / "gray.safetensors")
    built = ok_json("build", str(photos), "--out", store, "--embedder", "pixel:16:gray", "--skip-errors")
    assert built["indexed"] == 18
    assert ok_json("info", store)["dim"] == 256
    fails("build", str(photos), "--out", store, "--embedder", "pixel:big", match="'big'")
    fails("build", str(photos), "--out", store, "--embedder", "pixel:16:gray:x", match="malformed")
    fails("build", str(photos), "--out", store, "--device", "cpu", match="--device applies to clip")
    fails("build", str(photos), "--out", store, "--batch-size", "0", match="--batch-size")
    fails("evaluate", str(photos), "--query-fraction", "1.5", match="strictly between 0 and 1, got '1.5'")
    fails("evaluate", str(photos), "--query-fraction", "0", match="strictly between 0 and 1, got '0'")
    fails("info", str(tmp_path / "missing.safetensors"), match="does not exist")
    fails("info", store, "--root", str(tmp_path / "nowhere"), match="--root")
    fails("add", store, str(tmp_path / "nothing.png"), match="does not exist")
    fails("sync", store, str(tmp_path / "nowhere"), match="does not exist")
    fails(
        "sync", str(photos), store, match=f"galleria sync STORE FOLDER (here: galleria sync {store} {photos})"
    )
    before = Path(store).read_bytes()  # built with --skip-errors: the broken file is still there
    fails("sync", store, str(photos), match="(pass --skip-errors to skip unreadable images)")
    assert Path(store).read_bytes() == before
    broken = str(photos / "red" / "broken.jpg")
    fails("add", store, broken, match="(pass --skip-errors to skip unreadable images)")
    assert Path(store).read_bytes() == before
    fails("search", store, "--queries", str(tmp_path / "none.txt"), match="does not exist")
    fails("serve", store, "--port", "70000", match="--port")
    fails("serve", store, "--max-upload-mb", "0", match="--max-upload-mb")


def test_clip_random_weights_build(photos: Path, tmp_path: Path) -> None:
    pytest.importorskip("open_clip", reason="the clip extra is not installed")
    store = str(tmp_path / "clip.safetensors")
    built = ok_json(
        "build",
        str(photos / "green"),
        "--out",
        store,
        "--embedder",
        "clip:ViT-B-32:random",
        "--device",
        "cpu",
        "--batch-size",
        "4",
    )
    assert built["indexed"] == 6
    info = ok_json("info", store)
    assert info["embedder"]["type"] == "clip" and info["embedder"]["pretrained"] is None
    assert info["text_queries"] is True
    payload = ok_json("search", store, "--text", "a green square", "-k", "2")
    assert len(payload["queries"][0]["results"]) == 2


def test_ctrl_c_keeps_a_checkpoint_that_resume_continues(
    photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from galleria.cli import main
    from galleria.embedders import PixelEmbedder

    (photos / "red" / "broken.jpg").unlink()
    calls = {"n": 0}
    original = PixelEmbedder.embed

    def interrupted(self: PixelEmbedder, images: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 6:  # Ctrl-C arrives during the second chunk (4 batches of 2 per chunk)
            raise KeyboardInterrupt
        return original(self, images)

    store = tmp_path / "g.safetensors"
    monkeypatch.setattr(PixelEmbedder, "embed", interrupted)
    args = ["build", str(photos), "--out", str(store), "--batch-size", "2", "--checkpoint-every", "0"]
    assert main(args) == 130
    assert "--resume" in capsys.readouterr().err
    partial = Path(str(store) + ".partial")
    assert partial.exists() and not store.exists()
    monkeypatch.setattr(PixelEmbedder, "embed", original)
    assert main([*args, "--resume", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["indexed"] == 18 and summary["resumed"] == 8  # the first chunk
    assert not partial.exists()


def test_serve_answers_in_a_real_process(photos: Path, tmp_path: Path) -> None:
    pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
    import socket
    import urllib.error
    import urllib.request

    store = str(tmp_path / "g.safetensors")
    ok("build", str(photos / "green"), "--out", store)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "galleria", "serve", store, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        info = None
        for _ in range(300):  # bounded wait for the server to listen
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/info", timeout=2) as answer:
                    info = json.loads(answer.read())
                break
            except (urllib.error.URLError, ConnectionError):
                if server.poll() is not None:
                    break
                time.sleep(0.1)
        assert info is not None, server.communicate(timeout=10)
        assert info["count"] == 6
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/search",
            data=json.dumps({"path": "green0.png", "k": 2}).encode(),
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert len(json.loads(answer.read())["plain"]) == 2
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/thumb/../g.safetensors", timeout=10)
        assert caught.value.code == 404
    finally:
        server.terminate()
        server.communicate(timeout=20)


def test_root_reanchors_a_moved_gallery(photos: Path, tmp_path: Path) -> None:
    store = str(tmp_path / "g.safetensors")
    ok("build", str(photos / "blue"), "--out", store)
    moved = tmp_path / "moved"
    os.rename(photos / "blue", moved)
    payload = ok_json("search", store, "--image", str(moved / "blue1.png"), "-k", "1", "--root", str(moved))
    assert payload["queries"][0]["results"][0]["path"] == str(moved / "blue1.png")
    assert ok_json("info", store, "--root", str(moved))["count"] == 6
    assert ok_json("sync", store, str(moved), "--root", str(moved))["count"] == 6


def test_serve_on_a_busy_port_is_one_line(photos: Path, tmp_path: Path) -> None:
    pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
    import socket

    store = str(tmp_path / "g.safetensors")
    ok("build", str(photos / "green"), "--out", store)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        fails("serve", store, "--port", str(busy.getsockname()[1]), match="cannot listen on 127.0.0.1")
