"""Issue 36 §1: a million-photo library, end to end — the map's quality, then the user's day.

Two parts, each stage in its own process (its peak RSS is its own); one JSON line per stage:

``quality --rows 100000 --sample 10000``
    The sampled map against the full t-SNE on one store: the store's graph (``galleria graph --k
    90``) is built once; ``galleria map --sample 0`` (t-SNE of every image) and ``galleria map
    --sample N`` (t-SNE of a seeded sample, the others placed along the graph) each run in their
    own process. For 1,000 seeded points: the share of their 10 nearest points on the map that carry
    their label ("same label") and the share of their 10 nearest vectors (cosine) that are among
    their 10 nearest points on the map ("10-NN kept"); both maps measured on the same points.

``day --rows 1000000``
    Builds the store (see :func:`library`), then runs ``galleria graph``, ``galleria map``, ``galleria
    info``, ``galleria duplicates`` and ``galleria serve`` as a user would, and visits the page in
    headless chromium (Debian's, through Playwright): browse (pages of the grid), filter by a label
    (pages), search by a gallery item and by an uploaded image, the duplicates view, the map (zoom,
    a rectangle selected). It records each step's time, the page's long tasks (a
    ``PerformanceObserver`` of ``longtask`` entries, the longest one), the server's peak RSS
    (``VmHWM``) and every answer's status (HTTP 500s counted); screenshots go to ``--work``.

The data: ``--labels`` Gaussian clusters on the unit sphere in a 64-dimensional subspace of 128
dimensions (each cluster a label, a folder of the gallery), 1 % of the rows replaced by near copies
of other rows (noise of norm ≈ 0.02). Every image is a real file: ``--thumbnails`` of them are small
PNGs coloured by their label, all others hard links to their label's pale placeholder PNG (so a million
paths cost no disk). The store is exact, embedder ``pixel`` 8 × 16 grayscale (128-D: uploads embed to the same
dimension; the vectors themselves are synthetic).

    python benchmarks/experiments/bench_million.py quality --rows 100000 --sample 10000
    python benchmarks/experiments/bench_million.py day --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
LATENT = 64
CHUNK = 100_000


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def clustered(count: int, labels: int, dim: int = 128, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``count`` unit vectors in ``labels`` clusters, and each one's cluster (its label); 1 % of the
    rows are near copies of another row (same label)."""
    basis_rng = np.random.default_rng(777 + dim)
    basis = np.linalg.qr(basis_rng.normal(size=(dim, LATENT)))[0].astype(np.float32)
    centres = basis_rng.normal(size=(labels, LATENT)).astype(np.float32) @ basis.T
    out = np.empty((count, dim), np.float32)
    label = np.empty(count, np.int32)
    for number, start in enumerate(range(0, count, CHUNK)):
        rng = np.random.default_rng([seed, number])
        size = min(CHUNK, count - start)
        chosen = rng.integers(0, labels, size=size)
        block = centres[chosen] + 0.45 * rng.normal(size=(size, LATENT)).astype(np.float32) @ basis.T
        block += 0.1 * rng.normal(size=(size, dim)).astype(np.float32)
        out[start : start + size] = block / np.linalg.norm(block, axis=1, keepdims=True)
        label[start : start + size] = chosen
    rng = np.random.default_rng([seed, 99])
    copies = rng.choice(count, size=count // 100, replace=False)
    originals = rng.choice(np.setdiff1d(np.arange(count), copies), size=copies.size, replace=False)
    noisy = out[originals] + rng.normal(scale=0.02 / np.sqrt(dim), size=(copies.size, dim)).astype(np.float32)
    out[copies] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    label[copies] = label[originals]
    return out, label


def library(work: Path, rows: int, labels: int, thumbnails: int) -> dict[str, Any]:
    """The gallery's files and its store ``work/store.safetensors`` (labels in ``work/labels.npy``)."""
    from PIL import Image

    from galleria import InMemoryImageEmbeddingStore, PixelEmbedder

    start = time.perf_counter()
    vectors, label = clustered(rows, labels)
    root = work / "gallery"
    if root.exists():
        shutil.rmtree(root)
    for number in range(labels):
        (root / f"label{number:04d}").mkdir(parents=True)
    rng = np.random.default_rng(5)
    real = set(rng.choice(rows, size=min(thumbnails, rows), replace=False).tolist())
    hues = rng.integers(30, 230, size=(labels, 3))
    shared = work / "placeholders"  # one per label (a file takes at most 65,000 links)
    shared.mkdir(exist_ok=True)
    for number in range(labels):
        pale = (hues[number] + 2 * 220) // 3
        Image.new("RGB", (32, 32), tuple(int(c) for c in pale)).save(shared / f"{number:04d}.png")
    paths = []
    for row in range(rows):
        path = root / f"label{label[row]:04d}" / f"img{row:07d}.png"
        if row in real:
            noise = rng.normal(0, 25, (48, 64, 3))
            Image.fromarray(np.clip(hues[label[row]] + noise, 0, 255).astype(np.uint8)).save(path)
        else:
            os.link(shared / f"{label[row]:04d}.png", path)
        paths.append(str(path))
    files_seconds = time.perf_counter() - start
    store = InMemoryImageEmbeddingStore.from_embeddings(
        paths, vectors, PixelEmbedder(size=(8, 16), grayscale=True), "exact", space="cosine"
    )
    from galleria.store._snapshot import store_statistics

    store_statistics(store)  # recorded in the file, as `galleria build` records them
    store.save_to_disk(str(work / "store.safetensors"))
    np.save(work / "labels.npy", label)
    return {
        "stage": "build",
        "rows": rows,
        "labels": labels,
        "thumbnails": len(real),
        "seconds": round(time.perf_counter() - start, 1),
        "files_seconds": round(files_seconds, 1),
        "peak_rss_mb": round(peak_rss_mb()),
    }


def cli(name: str, *arguments: str, timeout: float = 3600) -> dict[str, Any]:
    """Run ``galleria ARGUMENTS`` in a child process: its time, exit code and JSON answer (if any)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "galleria", *arguments]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    seconds = time.perf_counter() - start
    answer: Any = None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        pass
    for line in [] if answer is not None else reversed(done.stdout.strip().splitlines()):
        try:
            answer = json.loads(line)
            break
        except ValueError:
            continue
    usage = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0  # the largest child so far
    result = {
        "stage": name,
        "seconds": round(seconds, 1),
        "code": done.returncode,
        "children_peak_mb": round(usage),
    }
    if done.returncode != 0:
        result["stderr"] = done.stderr[-800:]
    if isinstance(answer, dict):
        result["answer"] = {key: value for key, value in answer.items() if not isinstance(value, list)}
    return result


# ---------------------------------------------------------------- the map's quality


def map_quality(
    vectors: np.ndarray, label: np.ndarray, points: np.ndarray, chosen: np.ndarray
) -> dict[str, float]:
    """Same-label share of the 10 map neighbours and 10-NN kept, over the rows ``chosen``."""
    same = kept = 0.0
    for row in chosen:
        near = np.argpartition(-(vectors @ vectors[row]), 11)[:11]
        near = near[near != row][:10]
        on_map = np.argpartition(((points - points[row]) ** 2).sum(axis=1), 11)[:11]
        on_map = on_map[on_map != row][:10]
        same += float(np.mean(label[on_map] == label[row]))
        kept += len(set(near.tolist()) & set(on_map.tolist())) / 10
    return {"same_label": round(same / len(chosen), 4), "knn10_kept": round(kept / len(chosen), 4)}


def quality(args: argparse.Namespace) -> None:
    from galleria import InMemoryImageEmbeddingStore
    from galleria.store.gallery_map import map_file_for, read_map_file

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    store_file = work / "store.safetensors"
    vectors, label = clustered(args.rows, args.labels)
    if not store_file.exists():
        paths = [f"/g/label{label[row]:04d}/img{row:07d}.png" for row in range(args.rows)]
        InMemoryImageEmbeddingStore.from_embeddings(paths, vectors, None, "exact").save_to_disk(
            str(store_file)
        )
    print(
        json.dumps(cli("graph", "graph", str(store_file), "--k", "90", "--sample", "0", "--json")), flush=True
    )
    maps = {}
    for name, sample in (("full", 0), ("sampled", args.sample)):
        kept = work / f"{name}.map"
        if not (kept.exists() and args.reuse):
            figures = cli(
                f"map {name}", "map", str(store_file), "--rebuild", "--sample", str(sample), "--json"
            )
            print(json.dumps(figures), flush=True)
            shutil.copyfile(map_file_for(str(store_file)), kept)
        maps[name] = read_map_file(kept, args.rows)[2]
    chosen = np.random.default_rng(0).choice(args.rows, size=1000, replace=False)
    figures = {name: map_quality(vectors, label, points, chosen) for name, points in maps.items()}
    ratio = {
        key: round(figures["sampled"][key] / max(figures["full"][key], 1e-12), 3)
        for key in ("same_label", "knn10_kept")
    }
    print(
        json.dumps({"stage": "quality", "rows": args.rows, "sample": args.sample, **figures, "ratio": ratio})
    )


# ---------------------------------------------------------------- the user's day


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _vm(pid: int, field: str) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def day(args: argparse.Namespace) -> None:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    store_file = work / "store.safetensors"
    if not (store_file.exists() and args.reuse):
        command = [sys.executable, __file__, "build", "--rows", str(args.rows), "--labels", str(args.labels),
                   "--thumbnails", str(args.thumbnails), "--work", str(work)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        print(
            subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout.strip(),
            flush=True,
        )
    store = str(store_file)
    steps = [
        ("graph", ["graph", store, "--k", "30", "--sample", "0", "--json"]),
        ("map", ["map", store, "--json", *(["--sample", str(args.map_sample)] if args.map_sample else [])]),
        ("info", ["info", store]),
        ("duplicates", ["duplicates", store, "--json"]),
    ]
    for name, arguments in steps:
        if name in args.skip:
            continue
        if name == "graph" and args.reuse and os.path.exists(store + ".graph"):
            continue
        if name == "map" and args.reuse and os.path.exists(store + ".map"):
            continue
        print(json.dumps(cli(name, *arguments)), flush=True)
    visit_server(args, store, work)


def visit_server(args: argparse.Namespace, store: str, work: Path) -> None:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    log = open(work / "serve.log", "w")
    command = [sys.executable, "-m", "galleria", "serve", store, "--port", str(port)]
    start = time.perf_counter()
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    import urllib.request

    ready = None
    while time.perf_counter() - start < 600 and server.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/info", timeout=5) as answer:
                if answer.status == 200:
                    ready = time.perf_counter() - start
                    break
        except OSError:
            time.sleep(0.2)
    figures: dict[str, Any] = {"stage": "serve", "ready_seconds": None if ready is None else round(ready, 1)}
    figures["rss_at_start_mb"] = round(_vm(server.pid, "VmRSS"))
    try:
        if ready is not None:
            figures.update(browse(f"http://127.0.0.1:{port}", work, args))
    finally:
        figures["server_peak_rss_mb"] = round(_vm(server.pid, "VmHWM"))
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    print(json.dumps(figures), flush=True)


_LONGTASKS = """
window.__longest = 0; window.__longtasks = 0;
new PerformanceObserver(function (list) {
  list.getEntries().forEach(function (entry) {
    window.__longtasks += 1; window.__longest = Math.max(window.__longest, entry.duration);
  });
}).observe({type: "longtask", buffered: true});
"""


def browse(address: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The visit: every step's time (s) and longest main-thread task (ms); statuses; screenshots."""
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT / "tests"))
    from _support.browser import CHROMIUM

    statuses: dict[int, int] = {}
    failures: list[str] = []
    steps: dict[str, Any] = {}
    longest: dict[str, float] = {}
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.add_init_script(_LONGTASKS)

        def answered(response: Any) -> None:
            statuses[response.status] = statuses.get(response.status, 0) + 1
            if response.status >= 500:
                failures.append(f"{response.status} {response.url}")

        page.on("response", answered)
        page.on("pageerror", lambda error: failures.append(f"page error: {error}"))

        def step(name: str, action: Any, shot: bool = False) -> None:
            try:
                page.evaluate("window.__longest = 0")  # this step's tasks only (a new page starts at 0)
            except Exception:
                pass
            start = time.perf_counter()
            action()
            steps[name] = round(time.perf_counter() - start, 3)
            longest[name] = round(float(page.evaluate("window.__longest || 0")), 1)
            if shot:
                page.screenshot(path=str(work / f"{name}.png"))

        step("browse", lambda: page.goto(address + "/", wait_until="load"), shot=True)
        step("browse page 2", lambda: page.goto(address + "/?page=2", wait_until="load"))
        step("browse page 5000", lambda: page.goto(address + "/?page=5000", wait_until="load"), shot=True)
        step("label filter", lambda: page.goto(address + "/?folder=label0007", wait_until="load"), shot=True)
        step(
            "label filter page 3", lambda: page.goto(address + "/?folder=label0007&page=3", wait_until="load")
        )
        first = page.locator("ol.grid a").first.get_attribute("href") or "/"
        step("search by gallery item", lambda: page.goto(address + first, wait_until="load"), shot=True)
        upload = work / "upload.png"
        if not upload.exists():
            from PIL import Image

            noise = np.random.default_rng(8).normal(
                0, 30, (48, 64, 3)
            )  # not flat: a flat image embeds to zero
            Image.fromarray(np.clip(np.array([120, 60, 30]) + noise, 0, 255).astype(np.uint8)).save(upload)

        def search_upload() -> None:
            page.goto(address + "/", wait_until="load")
            page.set_input_files("#image", str(upload))
            with page.expect_navigation(wait_until="load"):
                page.click("#search")

        step("search by upload", search_upload, shot=True)
        from urllib.parse import parse_qs, urlsplit

        relative = parse_qs(urlsplit(first).query).get("path", [""])[0]
        api: dict[str, Any] = {}
        for name, fields in (
            ("plain", {"path": relative}),
            ("reranked", {"path": relative, "rerank": "true"}),
        ):
            times = []
            for _ in range(5):
                answer = page.request.post(address + "/api/search", multipart=fields, timeout=600_000)
                statuses[answer.status] = statuses.get(answer.status, 0) + 1
                if answer.ok:
                    times.append(float(answer.json()["elapsed_ms"]))
                else:
                    api[name + " error"] = f"{answer.status} {answer.text()[:200]}"
            api[name + " ms (median, max of 5)"] = [float(np.median(times)), max(times)] if times else None
        picture = {"name": "upload.png", "mimeType": "image/png", "buffer": upload.read_bytes()}
        answer = page.request.post(address + "/api/search", multipart={"image": picture}, timeout=600_000)
        statuses[answer.status] = statuses.get(answer.status, 0) + 1
        api["upload ms"] = (
            float(answer.json()["elapsed_ms"]) if answer.ok else f"{answer.status} {answer.text()[:200]}"
        )
        steps["api (server-side elapsed_ms)"] = api

        def open_map() -> None:
            page.goto(address + "/map", wait_until="load")
            page.wait_for_selector("canvas#map[data-ready='1']", timeout=900_000)

        step("map", open_map, shot=True)
        box = page.locator("canvas#map").bounding_box() or {"x": 0, "y": 0, "width": 800, "height": 600}
        centre = (box["x"] + box["width"] * 0.45, box["y"] + box["height"] * 0.45)

        def zoom() -> None:
            page.mouse.move(*centre)
            for _ in range(4):
                page.mouse.wheel(0, -400)
                page.wait_for_timeout(150)
            page.wait_for_function(
                "(c => c.dataset.drawn === c.dataset.asked)(document.querySelector('canvas#map'))",
                timeout=60_000,
            )

        step("map zoom", zoom, shot=True)

        def select() -> None:
            page.mouse.move(centre[0] - 60, centre[1] - 60)
            page.mouse.down()
            page.mouse.move(centre[0] + 60, centre[1] + 60, steps=8)
            page.mouse.up()
            page.wait_for_selector("#map-region:not([hidden]) #region-grid li", timeout=60_000)

        step("map rectangle", select, shot=True)
        page.locator("#map-region").screenshot(path=str(work / "map region.png"))

        def duplicates() -> None:
            deadline = time.perf_counter() + args.duplicates_wait
            while time.perf_counter() < deadline:  # found in the background; the page reloads itself
                page.goto(address + "/duplicates", wait_until="load")
                if not page.locator("#computing").count():
                    return
                page.wait_for_timeout(1000)
            steps["duplicates still computing after (s)"] = args.duplicates_wait

        step("duplicates", duplicates, shot=True)
        step("duplicates page 2", lambda: page.goto(address + "/duplicates?page=2", wait_until="load"))
        browser.close()
    return {
        "steps_seconds": steps,
        "longest_task_ms": longest,
        "statuses": statuses,
        "http_500s": sum(count for status, count in statuses.items() if status >= 500),
        "failures": failures[:10],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["quality", "day", "build", "visit"])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--labels", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=10_000)
    parser.add_argument("--thumbnails", type=int, default=2_000)
    parser.add_argument(
        "--map-sample", type=int, default=None, help="the day's `galleria map --sample` (default: its own)"
    )
    parser.add_argument("--work", default="/tmp/galleria-million")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the store and side files already in --work"
    )
    parser.add_argument(
        "--duplicates-wait", type=float, default=600, help="seconds the visit waits for /duplicates"
    )
    parser.add_argument("--skip", nargs="*", default=[], help="steps of the day to leave out")
    args = parser.parse_args()
    if args.part == "build":
        print(json.dumps(library(Path(args.work), args.rows, args.labels, args.thumbnails)))
    elif args.part == "quality":
        quality(args)
    elif args.part == "visit":
        visit_server(args, str(Path(args.work) / "store.safetensors"), Path(args.work))
    else:
        day(args)


if __name__ == "__main__":
    main()
