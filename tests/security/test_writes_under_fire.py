"""Writes that never half-land (issue 25 §2): interrupts, one writer per store, output paths, `check`.

Every test here fails on aad5666: a Ctrl-C between faiss's ``add`` and the row bookkeeping left an
inconsistent index (and checkpoint); an interrupted ``add_images`` then ``save_to_disk`` wrote a file
that did not load; two writers ran at once; outputs replaced FIFOs, links and device nodes; there
was no ``check``; ``remove STORE /`` emptied the store; ``tune`` printed a traceback on Ctrl-C; a
manifest that could not be written failed a build whose store was already saved.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import faiss
import numpy as np
import pytest
from PIL import Image

from _support.extras import need
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria._files import atomic_write_bytes
from galleria.cli import main
from galleria.index.exact import ExactIndex
from galleria.index.hnsw import HnswIndex

PIXEL = "pixel:8:gray"


def _gallery(folder: Path, count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number in range(count):
        path = folder / f"{number:03d}.png"
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    return paths


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "galleria", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, calls: int = 1) -> list[int]:
    """Make ``owner.name`` deliver a real SIGINT right after its ``calls``-th call has done its work."""
    original = getattr(owner, name)
    seen = [0]

    def wrapped(self: object, *args: object, **kwargs: object) -> object:
        result = original(self, *args, **kwargs)
        seen[0] += 1
        if seen[0] == calls:
            signal.raise_signal(signal.SIGINT)  # Python raises KeyboardInterrupt at its next check
        return result

    monkeypatch.setattr(owner, name, wrapped)
    return seen


# ------------------------------------------------------------------------------ interrupts


def test_ctrl_c_between_the_hnsw_graph_and_its_rows_leaves_a_loadable_index(monkeypatch):
    index = HnswIndex("l2")
    index.add(np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32))
    _interrupt_after(monkeypatch, faiss.IndexHNSWFlat, "add")
    with pytest.raises(KeyboardInterrupt):
        index.add(np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32))
    monkeypatch.undo()
    # The interrupt came after both halves changed: 25 rows, and the serialised index loads.
    assert len(index) == 25
    loaded = HnswIndex.from_bytes(index.to_bytes())
    assert len(loaded) == 25


def test_interrupted_add_images_then_save_writes_a_file_that_loads(tmp_path, monkeypatch):
    paths = _gallery(tmp_path / "g", 12)
    store = InMemoryImageEmbeddingStore(paths[:8], PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    _interrupt_after(monkeypatch, ExactIndex, "add")
    with pytest.raises(KeyboardInterrupt):
        store.add_images(paths[8:])
    monkeypatch.undo()
    target = tmp_path / "s.safetensors"
    store.save_to_disk(target)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(target)
    assert len(loaded) == len(store) == len(store.search_index)
    assert sorted(loaded.paths) == sorted(store.paths)


def test_deferred_interrupts_deliver_after_the_block():
    from galleria._interrupts import deferred_interrupts

    order = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupts():
            signal.raise_signal(signal.SIGINT)
            order.append("finished the block")
    assert order == ["finished the block"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_build_hnsw_interrupted_between_graph_and_rows_resumes(tmp_path, monkeypatch, capsys):
    _gallery(tmp_path / "g", 24)
    out = str(tmp_path / "s.safetensors")
    base = ["build", str(tmp_path / "g"), "--out", out, "--embedder", PIXEL, "--index", "hnsw"]
    base += ["--batch-size", "2", "--checkpoint-every", "0", "--workers", "1"]
    _interrupt_after(monkeypatch, faiss.IndexHNSWFlat, "add", calls=2)  # the second chunk
    assert main(base) == 130
    monkeypatch.undo()
    assert os.path.exists(out + ".partial") and not os.path.exists(out)
    assert main([*base, "--resume", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["indexed"] == 24 and summary["resumed"] > 0
    assert len(InMemoryImageEmbeddingStore.load_from_disk(out)) == 24
    assert not os.path.exists(out + ".partial")


def test_a_saved_build_whose_manifest_cannot_be_written_succeeds(tmp_path, monkeypatch, capsys):
    _gallery(tmp_path / "g", 10)
    out = str(tmp_path / "s.safetensors")

    def disk_full(target: object, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("galleria.cli._edits.atomic_write_bytes", disk_full)
    code = main(["build", str(tmp_path / "g"), "--out", out, "--embedder", PIXEL])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "manifest" in err and "No space left" in err
    assert len(InMemoryImageEmbeddingStore.load_from_disk(out)) == 10
    assert not os.path.exists(out + ".partial") and not os.path.exists(out + ".files.json")


# ------------------------------------------------------------------------------ one writer per store


@pytest.fixture
def built(tmp_path):
    _gallery(tmp_path / "a", 6, seed=1)
    _gallery(tmp_path / "b", 6, seed=2)
    _gallery(tmp_path / "base", 4, seed=3)
    out = str(tmp_path / "s.safetensors")
    assert main(["build", str(tmp_path / "base"), "--out", out, "--embedder", PIXEL]) == 0
    return tmp_path, out


def test_a_locked_store_is_refused_with_one_line(built, capsys):
    from galleria._files import writer_lock

    root, out = built
    capsys.readouterr()
    with writer_lock(out):
        assert main(["add", out, str(root / "a")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "another galleria process" in err[0] and "--wait" in err[0]
        started = time.monotonic()
        assert main(["remove", out, str(root / "base" / "000.png"), "--wait", "0.3"]) == 2
        assert time.monotonic() - started >= 0.3
        assert "after waiting" in capsys.readouterr().err
        assert main(["sync", out, str(root / "base")]) == 2
        assert main(["build", str(root / "a"), "--out", out, "--overwrite"]) == 2
    assert len(InMemoryImageEmbeddingStore.load_from_disk(out)) == 4
    assert main(["add", out, str(root / "a")]) == 0
    assert not os.path.exists(out + ".lock")


def test_a_lock_held_by_a_killed_process_is_free(built):
    root, out = built
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from galleria._files import writer_lock\n"
            "with writer_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)",
            out,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    assert main(["add", out, str(root / "a")]) == 2
    holder.kill()
    holder.wait()
    assert main(["add", out, str(root / "a")]) == 0  # the kernel released the dead holder's lock


@pytest.mark.parametrize("wait", [None, "120"])
def test_two_concurrent_adds_never_lose_a_set(built, wait):
    root, out = built
    extra = [] if wait is None else ["--wait", wait]
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    commands = [[sys.executable, "-m", "galleria", "add", out, str(root / part), *extra] for part in "ab"]
    processes = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for c in commands
    ]
    results = [(p.wait(timeout=180), p.stderr.read() if p.stderr else "") for p in processes]
    stored = set(InMemoryImageEmbeddingStore.load_from_disk(out).paths)
    for part, (code, err) in zip("ab", results, strict=True):
        wanted = {str(path) for path in (root / part).iterdir()}
        if code == 0:
            assert wanted <= stored, f"{part}'s images were lost though its add reported success"
        else:
            assert code == 2 and "another galleria process" in err, err
            assert wait is None
    if wait is not None:
        assert [code for code, _ in results] == [0, 0] and len(stored) == 16


# ------------------------------------------------------------------------------ output paths


def test_check_output_path_refuses_what_is_not_a_regular_file(tmp_path):
    from galleria._files import check_output_path

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    regular = tmp_path / "plain.json"
    regular.write_text("{}")
    cases = [(fifo, "FIFO"), (link, "dangling symbolic link")]
    # /dev/null only ever goes to this pure check (an lstat), never to a command that writes: a
    # regression there must not replace the machine's device node.
    if stat.S_ISCHR(os.lstat("/dev/null").st_mode):
        cases.append((Path("/dev/null"), "character device"))
    for path, kind in cases:
        with pytest.raises(ValueError, match=f"--out '{path}' is a {kind}"):
            check_output_path(path, "--out")
    assert check_output_path(regular, "--out") == str(regular)
    assert check_output_path(tmp_path / "new.json", "--out") == str(tmp_path / "new.json")


def test_atomic_writes_never_replace_a_link_or_a_fifo(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("kept")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    with pytest.raises(ValueError, match="symbolic link"):
        atomic_write_bytes(link, b"new")
    assert link.is_symlink() and target.read_text() == "kept"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="FIFO"):
        atomic_write_bytes(fifo, b"new")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_tune_out_and_per_query_refuse_special_files(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "sock"))
    _gallery(tmp_path / "g" / "x", 4)
    # Only files of this test's own folder: never /dev/null, which a regression would replace.
    for out, kind in ((fifo, "FIFO"), (link, "dangling symbolic"), (tmp_path / "sock", "socket")):
        assert main(["tune", str(tmp_path / "g"), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"--out {str(out)!r} is a {kind}" in err, err
    assert stat.S_ISSOCK(os.lstat(tmp_path / "sock").st_mode)
    listening.close()
    scores = tmp_path / "e.npy"
    np.save(scores, np.eye(3, dtype=np.float32))
    labels = tmp_path / "l.npy"
    np.save(labels, np.arange(3))
    code = main(
        ["evaluate-scores", "--protocol", "metric-learning", "--embeddings", str(scores), "--labels",
         str(labels), "--per-query", str(fifo)]
    )  # fmt: skip
    assert code == 2 and "--per-query" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink()


# ------------------------------------------------------------------------------ check, remove --all


def test_check_reports_a_sound_store_and_its_side_files(built, capsys):
    _, out = built
    capsys.readouterr()
    assert main(["check", out, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    parts = {part["part"]: part for part in report["parts"]}
    assert report["ok"] and parts["store"]["ok"] and "4 rows read back" in parts["store"]["detail"]
    assert parts["manifest"]["detail"].startswith("4 file stat")
    assert parts["lock"]["detail"] == "free"


def test_check_fails_on_a_damaged_store_manifest_or_checkpoint(built, capsys):
    _, out = built
    Path(out + ".partial").write_bytes(b"not a store")
    assert main(["check", out]) == 2
    text = capsys.readouterr().out
    assert "FAIL checkpoint" in text and "ok   store" in text
    os.remove(out + ".partial")
    Path(out + ".files.json").write_text('{"format": "other"}')
    assert main(["check", out]) == 2
    assert "FAIL manifest" in capsys.readouterr().out
    os.remove(out + ".files.json")
    data = bytearray(Path(out).read_bytes())
    data[-5] ^= 0xFF  # a byte of the last tensor
    Path(out).write_bytes(bytes(data))
    assert main(["check", out]) == 2
    assert "FAIL store" in capsys.readouterr().out


def test_remove_that_would_empty_the_store_needs_all(built, capsys):
    root, out = built
    assert main(["remove", out, "/"]) == 2
    assert "--all" in capsys.readouterr().err
    assert main(["remove", out, str(root / "base")]) == 2
    assert len(InMemoryImageEmbeddingStore.load_from_disk(out)) == 4
    assert main(["remove", out]) == 2
    assert main(["remove", out, "--all", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 0
    assert len(InMemoryImageEmbeddingStore.load_from_disk(out)) == 0


# ------------------------------------------------------------------------------ tune on Ctrl-C


def test_ctrl_c_in_tune_is_one_line_and_exit_130(tmp_path):
    need("optuna")
    for label in range(3):
        _gallery(tmp_path / "g" / str(label), 20, seed=label)
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        "-m",
        "galleria",
        "tune",
        str(tmp_path / "g"),
        "--out",
        str(tmp_path / "t.json"),
    ]
    command += ["--embedder", PIXEL, "--trials", "100000", "--methods", "diffusion", "k-reciprocal"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert process.stderr is not None
    lines = []
    for line in process.stderr:  # wait until the study runs (a few trials reported)
        lines.append(line)
        if line.lstrip().startswith("trial") and "  3:" in line:
            break
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=120)
    err = "".join(lines) + rest
    assert process.returncode == 130, err
    assert "Traceback" not in err and "failed" not in err, err
    assert err.strip().splitlines()[-1] == "galleria: interrupted"
    assert not (tmp_path / "t.json").exists()
