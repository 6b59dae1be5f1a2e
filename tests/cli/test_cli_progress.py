"""Saying what is happening: progress off a terminal, per-batch bars, serve's start and stop, the
moved-gallery hint of ``sync``, and the cache files ``demo --dataset fashion-mnist`` writes."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import galleria._progress as progress_module
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria._progress import BatchPacer, LineProgress, progress
from galleria.cli import main


def _photos(root: Path, count: int = 10) -> Path:
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for number in range(count // 2):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
                root / label / f"{number}.png"
            )
    return root


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_line_progress_prints_every_interval_and_a_last_line() -> None:
    out = io.StringIO()
    with LineProgress(10, "building gallery", "img", every=0.0, stream=out) as bar:
        for _ in range(10):
            bar.update(1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 11 and lines[0].startswith("building gallery: 1/10 img (10%)")
    assert "left" in lines[0] and lines[-1].startswith("building gallery: 10/10 img (100%)")
    assert lines[-1].endswith(" - done")
    quiet = io.StringIO()
    with LineProgress(10, "x", "img", every=3600.0, stream=quiet) as bar:
        bar.update(10)
    assert quiet.getvalue() == ""  # quick work prints nothing, so a one-line error stays one line


def test_progress_off_a_terminal_is_lines_and_tqdm_disable_silences(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    assert isinstance(progress(3, "x"), LineProgress)  # pytest's stderr is not a terminal
    assert not isinstance(progress(3, "x", enabled=False), LineProgress)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert not isinstance(progress(3, "x"), LineProgress)


def test_a_terminal_without_a_width_still_gets_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(sys, "stderr", Terminal())
    monkeypatch.setattr(progress_module, "_terminal_columns", lambda: 0)
    bar = progress(3, "building gallery")
    with bar:
        bar.update(3)
        assert bar.format_dict["ncols"] == 80 and bar.format_dict["nrows"] == 24
    assert "3/3" in sys.stderr.getvalue()
    monkeypatch.setattr(progress_module, "_terminal_columns", lambda: 120)
    with progress(3, "x") as sized:
        assert sized.format_dict["ncols"] != 80  # a sized terminal: tqdm follows its width


def test_the_store_counts_every_image_once_in_calls_of_one(tmp_path: Path) -> None:
    root = _photos(tmp_path / "g", count=20)
    (root / "a" / "broken.png").write_bytes(b"not an image")
    paths = sorted(str(path) for path in root.rglob("*.png"))
    calls: list[int] = []
    store = InMemoryImageEmbeddingStore(
        paths[:15], PixelEmbedder(size=4, batch_size=4), skip_errors=True, num_workers=3
    )
    with pytest.warns(RuntimeWarning):
        store.build_store(progress=False, on_progress=calls.append)
    assert calls == [1] * 15 and len(store) + len(store.skipped) == 15
    store.add_images(paths[15:], on_progress=calls.append)
    assert calls[15:] == [1] * 6
    with pytest.raises(TypeError, match="on_progress must be callable or None"):
        InMemoryImageEmbeddingStore(paths, PixelEmbedder()).build_store(on_progress=3)  # type: ignore[arg-type]


def test_the_count_moves_while_a_batch_is_embedded(tmp_path: Path) -> None:
    """Once a batch has been timed, the next batches' images count one by one while they embed."""
    paths = sorted(str(path) for path in _photos(tmp_path / "g", count=12).rglob("*.png"))
    calls: list[int] = []
    during: list[int] = []
    ticked = threading.Event()

    def on_progress(n: int) -> None:
        calls.append(n)
        ticked.set()

    class Slow(PixelEmbedder):
        def embed(self, images: list[np.ndarray]) -> np.ndarray:
            before = len(calls)
            ticked.clear()
            if during:  # a batch after the first: wait (bounded) for a count while embedding
                ticked.wait(30.0)
            else:
                time.sleep(0.05)  # the first batch sets the pace
            during.append(len(calls) - before)
            return super().embed(images)

    store = InMemoryImageEmbeddingStore(paths, Slow(size=4, batch_size=4), num_workers=1)
    store.build_store(progress=False, on_progress=on_progress)
    assert during[0] == 0 and all(count >= 1 for count in during[1:]), during
    assert all(count <= 3 for count in during)  # never the batch's last image before it is done
    assert calls == [1] * 12


def test_batch_pacer_is_exact_and_stops_short() -> None:
    calls: list[int] = []
    pacer = BatchPacer(calls.append, seconds_per_item=0.0)
    with pacer.batch(5):
        time.sleep(0.05)
    assert calls == [1] * 5 and pacer.seconds_per_item is not None
    with pytest.raises(RuntimeError), pacer.batch(5):
        raise RuntimeError("embedding failed")
    assert len(calls) <= 9  # a failed batch never completes its count
    quiet = BatchPacer(calls.append)  # no pace yet: the count comes at the end
    count = len(calls)
    with quiet.batch(3):
        assert len(calls) == count
    assert len(calls) == count + 3


def test_the_line_progress_of_a_build_moves_per_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(progress_module, "LINE_EVERY", 0.0)
    paths = sorted(str(path) for path in _photos(tmp_path / "g", count=6).rglob("*.png"))
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=4, batch_size=3), num_workers=1)
    capsys.readouterr()
    store.build_store(progress=True)
    lines = capsys.readouterr().err.splitlines()
    counts = [line.split(": ", 1)[1].split("/", 1)[0] for line in lines]
    assert counts[:6] == ["1", "2", "3", "4", "5", "6"]  # batches of three, yet six steps


def test_build_off_a_terminal_prints_progress_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(progress_module, "LINE_EVERY", 0.0)
    folder = _photos(tmp_path / "g")
    code, _, err = _run(
        capsys, "build", str(folder), "--out", str(tmp_path / "s.safetensors"), "--batch-size", "2"
    )
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("building gallery: ")]
    # batches of two, but the count moves per image
    assert [line.split()[2] for line in lines[:10]] == [f"{n}/10" for n in range(1, 11)]
    assert lines[-1].endswith("- done")


def test_sync_after_moving_the_folder_points_to_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _photos(tmp_path / "photos")
    store = tmp_path / "photos.safetensors"
    assert main(["build", str(folder), "--out", str(store)]) == 0
    moved = tmp_path / "elsewhere" / "photos"
    moved.parent.mkdir()
    os.rename(folder, moved)
    code, _, err = _run(capsys, "sync", str(store), str(moved.parent))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"which is gone, and 10 of its 10 files are under '{moved}'" in lines[0]
    assert f"--root {moved}" in lines[0]
    assert InMemoryImageEmbeddingStore.load_from_disk(store).paths[0].startswith(str(folder))  # untouched
    code, out, err = _run(capsys, "sync", str(store), str(moved), "--root", str(moved), "--json")
    assert code == 0, err
    assert json.loads(out)["count"] == 10 and json.loads(out)["added"] == 0


def test_demo_fashion_mnist_says_what_it_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import galleria.cli.demo as demo
    from _support.fashion_files import fake as _fake

    root = tmp_path / "idx"
    root.mkdir()
    _fake(root)
    monkeypatch.setattr(demo, "FASHION_GALLERY", 30)
    args = ("demo", "--dataset", "fashion-mnist", "--fashion-root", str(root), "--cache-dir", str(tmp_path))
    code, _, err = _run(capsys, *args, "--n-queries", "10")
    assert code == 0, err
    assert "galleria demo: writing 40 Fashion-MNIST images as PNG files (about 0 MB) into " in err
    assert "(once; later runs reuse them)" in err
    assert "galleria demo: wrote 40 PNG files (" in err
    code, _, err = _run(capsys, *args, "--n-queries", "10")
    assert code == 0 and "writing" not in err  # the cached folder is reused silently


def test_serve_says_when_it_starts_and_stops(tmp_path: Path) -> None:
    pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
    store = tmp_path / "g.safetensors"
    assert main(["build", str(_photos(tmp_path / "g")), "--out", str(store)]) == 0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "galleria", "serve", str(store), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        for _ in range(600):  # bounded wait for the server to listen
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/info", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, server.communicate(timeout=10)
                time.sleep(0.1)
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    assert f"serving 10 images of {store} on http://127.0.0.1:{port} (Ctrl-C stops)" in err
    assert "galleria serve: stopping (finishing open requests) ..." in err
    assert err.rstrip().endswith("galleria serve: stopped")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_loading_torch_and_the_model_is_announced_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("timm", reason="the timm extra is not installed")
    from galleria.cli._embedder_options import make_embedder

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    make_embedder("timm:resnet18:random", device="cpu")
    assert terminal.getvalue().startswith(
        "loading the network (ONNX Runtime, or torch and timm), then the timm model resnet18 ..."
    )
    quiet = io.StringIO()  # not a terminal: nothing, so that an error stays one line
    monkeypatch.setattr(sys, "stderr", quiet)
    make_embedder("timm:resnet18:random", device="cpu")
    assert quiet.getvalue() == ""


# ---------------------------------------------------------------------------------------------------------
# The last line says how the work ended: "done" only when it finished.


@pytest.mark.parametrize(("error", "end"), [(KeyboardInterrupt, "interrupted"), (RuntimeError, "stopped")])
def test_an_interrupted_line_progress_never_says_done(error: type[BaseException], end: str) -> None:
    out = io.StringIO()
    with pytest.raises(error), LineProgress(10, "building gallery", "img", every=0.0, stream=out) as bar:
        bar.update(4)
        raise error()
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("building gallery: 4/10 img (40%)") and last.endswith(f" - {end}")
    assert "done" not in out.getvalue()


def test_an_interrupted_build_does_not_say_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in the middle of ``build`` (simulated: the embedder's third batch raises it)."""
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(progress_module, "LINE_EVERY", 0.0)
    batches = [0]
    embed = PixelEmbedder.embed

    def interrupted(self: PixelEmbedder, images: list[np.ndarray]) -> np.ndarray:
        batches[0] += 1
        if batches[0] == 3:
            raise KeyboardInterrupt
        return embed(self, images)

    monkeypatch.setattr(PixelEmbedder, "embed", interrupted)
    folder = _photos(tmp_path / "g")
    args = ("build", str(folder), "--out", str(tmp_path / "s.safetensors"), "--batch-size", "2")
    code, _, err = _run(capsys, *args, "--workers", "1")
    assert code == 130, err
    lines = [line for line in err.splitlines() if line.startswith("building gallery: ")]
    assert lines and lines[-1].endswith(" - interrupted"), err
    assert not any(line.endswith("- done") for line in lines)
    assert "/10 img (100%)" not in err and err.rstrip().endswith("galleria: interrupted")


def _vector_store(tmp_path: Path, count: int = 60) -> Path:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 8))
    vectors = centres[np.arange(count) % 4] + 0.1 * rng.normal(size=(count, 8))
    store = InMemoryImageEmbeddingStore.from_embeddings([f"/g/{i:03d}.png" for i in range(count)], vectors)
    file = tmp_path / "v.safetensors"
    store.save_to_disk(file)
    return file


def _lines(err: str, prefix: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(prefix)]


def test_map_shows_the_progress_of_the_graph_and_of_tsne(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("openTSNE", reason="the map extra (galleria[map]) is not installed")
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(progress_module, "LINE_EVERY", 0.0)
    store = _vector_store(tmp_path)
    code, out, err = _run(capsys, "map", str(store))
    assert code == 0, err
    graph = _lines(err, "map: neighbour graph: ")
    assert graph and graph[-1].startswith("map: neighbour graph: 60/60 img (100%)"), err
    assert graph[-1].endswith(" - done")
    tsne = _lines(err, "map: t-SNE: ")
    assert [line.split()[2] for line in tsne[:3]] == ["50/750", "100/750", "150/750"], err
    assert tsne[-1].startswith("map: t-SNE: 750/750 iteration (100%)") and tsne[-1].endswith(" - done")
    assert err.index("map: neighbour graph: ") < err.index("map: t-SNE: ")  # the graph comes first
    assert out.startswith("map of 60 images (tsne)")
    # Progress never changes the map: the same coordinates as a map drawn without it.
    from galleria.store.gallery_map import gallery_map, read_map_file

    _, _, kept, _ = read_map_file(str(store) + ".map", 60)
    again = gallery_map(InMemoryImageEmbeddingStore.load_from_disk(store), method="tsne")
    assert np.array_equal(kept, again.coordinates)
    # A kept map is reused: no phase to show.
    code, _, err = _run(capsys, "map", str(store))
    assert code == 0 and "map: " not in err, err


def test_an_interrupted_map_does_not_say_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during t-SNE (simulated at its 300th iteration): the graph is done, t-SNE is not."""
    pytest.importorskip("openTSNE", reason="the map extra (galleria[map]) is not installed")
    import galleria.store._projection as projection

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(progress_module, "LINE_EVERY", 0.0)
    counting = projection._Iterations.__call__

    def interrupted(self: Any, iteration: int, error: float, embedding: Any) -> bool:
        result = counting(self, iteration, error, embedding)
        if self._done >= 300:
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(projection._Iterations, "__call__", interrupted)
    store = _vector_store(tmp_path)
    code, out, err = _run(capsys, "map", str(store))
    assert code == 130 and out == "", err
    assert _lines(err, "map: neighbour graph: ")[-1].endswith(" - done")
    tsne = _lines(err, "map: t-SNE: ")
    assert tsne[-1].startswith("map: t-SNE: 300/750 iteration (40%)") and tsne[-1].endswith(" - interrupted")
    assert not any(line.endswith("- done") for line in tsne)
    assert not Path(str(store) + ".map").exists()


def test_graph_shows_progress_and_an_interrupted_graph_does_not_say_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import galleria.index.neighbor_graph as neighbor_graph

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(progress_module, "LINE_EVERY", 0.0)
    store = _vector_store(tmp_path)
    code, _, err = _run(capsys, "graph", str(store), "--k", "5", "--sample", "20")
    assert code == 0, err
    build = _lines(err, "graph: neighbour graph: ")
    assert build[-1].startswith("graph: neighbour graph: 60/60 img (100%)"), err
    assert build[-1].endswith(" - done")
    recall = _lines(err, "graph: recall against exact: ")
    assert recall[-1].startswith("graph: recall against exact: 20/20 img (100%)"), err
    assert recall[-1].endswith(" - done")
    code, _, err = _run(capsys, "graph", str(store), "--k", "5", "--method", "hnsw", "--rebuild")
    assert code == 0, err  # HNSW: its build, then its search, each over the images
    assert _lines(err, "graph: HNSW build: ")[-1].startswith("graph: HNSW build: 60/60 img (100%)"), err
    assert _lines(err, "graph: HNSW search: ")[-1].startswith("graph: HNSW search: 60/60 img (100%)")
    assert err.index("graph: HNSW build: ") < err.index("graph: HNSW search: ")

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        tick = kwargs.get("tick", args[6] if len(args) > 6 else None)
        tick(25)  # a part of the rows, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(neighbor_graph, "neighbours_among", interrupted)
    code, _, err = _run(capsys, "graph", str(store), "--k", "5", "--rebuild")
    assert code == 130, err
    build = _lines(err, "graph: neighbour graph: ")
    assert build[-1].startswith("graph: neighbour graph: 25/60 img (42%)")
    assert build[-1].endswith(" - interrupted")
    assert "done" not in err and not _lines(err, "graph: recall")


def test_a_progress_callback_that_is_not_callable_is_a_type_error_naming_it(tmp_path: Path) -> None:
    from galleria.store.gallery_map import gallery_map
    from galleria.store.graph import neighbor_graph

    store = InMemoryImageEmbeddingStore.load_from_disk(_vector_store(tmp_path))
    with pytest.raises(TypeError, match="on_progress must be callable or None, got 3"):
        gallery_map(store, method="pca", on_progress=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_progress must be callable or None, got 'x'"):
        neighbor_graph(store, 5, on_progress="x")  # type: ignore[arg-type]
