"""Numbers, writes and output at the command line: one line per error, never a traceback; hostile
stored paths printed escaped; an existing store never replaced silently; a full disk is one line."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _support.store_support import make_images
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.cli import main

HOSTILE = ["/g/\x1b]0;PWNED\x07a.png", "/g/b.png\n  1  0.000000  /etc/forged.png", "/g/\u202egnp.c"]


def fails(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith(f"galleria {args[0]}: error: "), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cli_edges") / "g"
    make_images(folder, 6)
    return folder


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    embedder = PixelEmbedder(size=4)
    rng = np.random.default_rng(0)
    paths = [*HOSTILE, "/g/plain.png"]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, rng.normal(size=(4, 48)), embedder)
    file = tmp_path_factory.mktemp("hostile") / "h.safetensors"
    store.save_to_disk(file)
    return file


def no_control_characters(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, text


def test_search_prints_stored_paths_escaped(
    capsys: pytest.CaptureFixture[str], hostile_store: Path, gallery: Path
) -> None:
    query = str(next(gallery.iterdir()))
    assert main(["search", str(hostile_store), "--image", query, "-k", "4"]) == 0
    out = capsys.readouterr().out
    no_control_characters(out)
    assert "\\x1b]0;PWNED\\x07a.png" in out and "\\u202e" in out
    lines = out.strip().splitlines()
    assert len(lines) == 6  # the query line, the header and four results: the newline forged none
    assert sum("/etc/forged.png" in line for line in lines) == 1 and "\\n" in out


def test_search_csv_is_escaped_too(
    capsys: pytest.CaptureFixture[str], hostile_store: Path, gallery: Path
) -> None:
    query = str(next(gallery.iterdir()))
    assert main(["search", str(hostile_store), "--image", query, "-k", "4", "--csv"]) == 0
    out = capsys.readouterr().out
    no_control_characters(out)
    rows = list(csv.reader(io.StringIO(out)))
    assert len(rows) == 5 and all(len(row) == 4 for row in rows)
    assert {row[2] for row in rows[1:]} >= {"/g/\\x1b]0;PWNED\\x07a.png", "/g/plain.png"}


def test_json_output_keeps_the_paths_exact(
    capsys: pytest.CaptureFixture[str], hostile_store: Path, gallery: Path
) -> None:
    import json

    query = str(next(gallery.iterdir()))
    assert main(["search", str(hostile_store), "--image", query, "-k", "4", "--json"]) == 0
    out = capsys.readouterr().out
    no_control_characters(out)  # JSON escapes them itself
    found = {result["path"] for result in json.loads(out)["queries"][0]["results"]}
    assert found == {*HOSTILE, "/g/plain.png"}


def test_info_prints_the_file_escaped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    embedder = PixelEmbedder(size=4)
    store = InMemoryImageEmbeddingStore.from_embeddings(["/g/a.png"], np.ones((1, 48)), embedder)
    store._skipped = [HOSTILE[0], HOSTILE[1]]
    name = tmp_path / "evil\x1b[2J.safetensors"
    store.save_to_disk(name)
    assert main(["info", str(name)]) == 0
    out = capsys.readouterr().out
    no_control_characters(out)
    assert "evil\\x1b[2J.safetensors" in out and "skipped files:  2" in out
    assert "/etc/forged.png" in out and out.count("\n") == 17  # 15 fields, 2 skipped paths


def test_error_lines_are_escaped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = fails(capsys, "info", str(tmp_path / "missing\x1b]0;X\x07.safetensors"))
    no_control_characters(line)
    assert "missing\\x1b]0;X\\x07" in line


def test_huge_numbers_are_one_line(
    capsys: pytest.CaptureFixture[str], hostile_store: Path, gallery: Path
) -> None:
    query = str(next(gallery.iterdir()))
    store = str(hostile_store)
    line = fails(capsys, "search", store, "--image", query, "--rerank", "--k1", "9223372036854775808")
    assert "--k1 must be at most 2**63 - 1" in line
    line = fails(capsys, "search", store, "--image", query, "--rerank", "--k1", "9" * 5000)
    assert "--k1 must be an integer" in line and len(line) < 300
    line = fails(capsys, "search", store, "--image", query, "--expand", "--alpha", "1e308")
    assert "--alpha must be at least 0 and at most 1000" in line
    line = fails(capsys, "search", store, "--image", query, "-k", "99999999999999999999")
    assert "at most 2**63 - 1" in line


@pytest.mark.parametrize("spec", ["pixel:200", "pixel:5000", "pixel:100000000"])
def test_pixel_embedders_too_large_to_store_are_refused(
    capsys: pytest.CaptureFixture[str], gallery: Path, tmp_path: Path, spec: str
) -> None:
    out = tmp_path / "s.safetensors"
    line = fails(capsys, "build", str(gallery), "--out", str(out), "--embedder", spec)
    assert "galleria stores at most 65536" in line
    assert not out.exists()


def test_every_store_save_to_disk_writes_loads(tmp_path: Path) -> None:
    embedder = PixelEmbedder(size=(256, 256), grayscale=True)  # the largest dimension allowed
    store = InMemoryImageEmbeddingStore.from_embeddings(["/a", "/b"], np.eye(2, 65536), embedder)
    store.save_to_disk(tmp_path / "big.safetensors")
    assert InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "big.safetensors").dim == 65536


def test_build_never_replaces_an_existing_store_silently(
    capsys: pytest.CaptureFixture[str], gallery: Path, tmp_path: Path
) -> None:
    out = tmp_path / "s.safetensors"
    assert main(["build", str(gallery), "--out", str(out), "--embedder", "pixel:4"]) == 0
    before = out.read_bytes()
    line = fails(capsys, "build", str(gallery), "--out", str(out), "--embedder", "pixel:6")
    assert "already exists; pass --overwrite to replace it" in line
    assert out.read_bytes() == before
    assert main(["build", str(gallery), "--out", str(out), "--embedder", "pixel:6", "--overwrite"]) == 0
    assert InMemoryImageEmbeddingStore.load_from_disk(out).dim == 108


def test_build_out_fifo_is_refused(capsys: pytest.CaptureFixture[str], gallery: Path, tmp_path: Path) -> None:
    pipe = tmp_path / "pipe.safetensors"
    os.mkfifo(pipe)
    for extra in ([], ["--overwrite"]):
        line = fails(capsys, "build", str(gallery), "--out", str(pipe), "--embedder", "pixel:4", *extra)
        assert "is a FIFO, not a regular file" in line
    assert pipe.is_fifo()
    (tmp_path / "dangling.safetensors").symlink_to(tmp_path / "nowhere")
    line = fails(capsys, "build", str(gallery), "--out", str(tmp_path / "dangling.safetensors"))
    assert "dangling symbolic link" in line


def test_disk_full_is_an_oserror_and_one_line(
    capsys: pytest.CaptureFixture[str], gallery: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from galleria.store import persistence

    def full(*args: object, **kwargs: object) -> None:  # what a write into a full disk raises
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    store = InMemoryImageEmbeddingStore.from_embeddings(["/a", "/b"], np.eye(2))
    store.save_to_disk(tmp_path / "kept.safetensors")
    before = (tmp_path / "kept.safetensors").read_bytes()
    monkeypatch.setattr(persistence, "write_tensors", full)
    with pytest.raises(OSError) as caught:
        store.save_to_disk(tmp_path / "kept.safetensors")
    assert caught.value.errno == errno.ENOSPC and "No space left on device" in str(caught.value)
    assert (tmp_path / "kept.safetensors").read_bytes() == before  # the data stays intact
    assert [p.name for p in tmp_path.iterdir()] == ["kept.safetensors"]  # no temporary left
    line = fails(
        capsys, "build", str(gallery), "--out", str(tmp_path / "new.safetensors"), "--embedder", "pixel:4"
    )
    assert "No space left on device" in line


@pytest.mark.skipif(
    os.geteuid() != 0 or sys.platform != "linux", reason="mounting a tmpfs needs root on Linux"
)
def test_disk_full_on_a_real_tiny_file_system(gallery: Path, tmp_path: Path) -> None:
    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mount)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "galleria",
                "build",
                str(gallery),
                "--out",
                str(mount / "s.safetensors"),
                "--embedder",
                "pixel:64",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "TQDM_DISABLE": "1"},
            timeout=300,
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("galleria build: error: [Errno 28]")
        assert not (mount / "s.safetensors").exists()
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_build_workers_are_capped_at_usable_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    from galleria.index import ivfpq

    seen: list[int] = []

    def record(self: object, array: np.ndarray, first: int, workers: int) -> None:
        seen.append(workers)
        raise RuntimeError("stop")

    monkeypatch.setattr(ivfpq.IvfPqIndex, "_add_parallel", record)
    monkeypatch.setattr(ivfpq, "MIN_ROWS_PER_WORKER", 1)
    index = ivfpq.IvfPqIndex("l2", lists=4, bits=4, subquantizers=2, build_workers=256)
    with pytest.raises(RuntimeError, match="stop"):
        index.add(np.random.default_rng(0).normal(size=(600, 4)).astype(np.float32))
    cpus = len(os.sched_getaffinity(0))
    assert seen == ([cpus] if cpus > 1 else [])  # not 256 processes: as many as this process may use
