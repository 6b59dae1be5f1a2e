"""Issue 25 §3: ``galleria serve`` under load, a real uvicorn server on 127.0.0.1 in a child process.

Run ``.venv/bin/python benchmarks/experiments/bench_serve_load.py`` (a few minutes on 2 cores). With
``--before SRC`` (e.g. the ``src`` folder of a checkout of an earlier commit) each measurement is
also taken with that source, side by side. It prints markdown tables:

(a) ``/api/info`` latency while one 60-Mpx upload is searched (the largest and the median of the
    info requests sent every 20 ms meanwhile);
(b) peak RSS of the server (``VmHWM``) for 1 and for 16 concurrent ``/image`` and ``/thumb``
    requests for one 64-Mpx PNG, each in a fresh server process;
(d) the time of three consecutive searches with a prepared gallery (``--settings`` of decoupled
    diffusion on power-normalised, centred, DBA-augmented vectors; 1,797 random 64-d vectors);
(c) RSS of the server after a warm-up of 200 requests and after 2,000 more of a mixed load (info,
    thumbnails, images, pages, searches by path and by upload, bad parameters, searches with an
    installed plugin's re-ranker that always raises), and the answers' status counts: a 5xx that
    names the failing plugin (a JSON ``"plugin"``) is counted as ``500 plugin``, apart from
    ``500 unexpected`` (anything else: a traceback's "Internal Server Error").
    ``--only-mixed`` runs (c) alone.

Loopback only. Absolute times depend on the machine's load; compare the columns of one run.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import io
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_child(store_file: str, root: str, port: int) -> None:
    """The child: load the store and serve it (uploads up to 40 MB)."""
    import uvicorn

    from galleria import InMemoryImageEmbeddingStore
    from galleria.web import create_app

    store = InMemoryImageEmbeddingStore.load_from_disk(store_file)
    app = create_app(store, root=root, max_upload_bytes=40 * 1024 * 1024)
    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error")).run()


#: A plugin package whose re-ranker ``failing`` raises on every query (on the servers' path in (c)).
FAILING_PLUGIN = """
from galleria.components import Component


class Failing:
    def __init__(self, store):
        self.store = store

    def rerank(self, candidates, top_k):
        raise ZeroDivisionError("division by zero")


COMPONENT = Component("reranker", "failing", (), build=Failing)
"""


def plugin_site(folder: Path) -> Path:
    """A folder holding the plugin package ``bench-failing`` (module and dist-info with its entry point)."""
    site = folder / "plugins"
    info = site / "bench_failing-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "bench_failing.py").write_text(FAILING_PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bench-failing\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[galleria.rerankers]\nfailing = bench_failing\n")
    return site


def answer_label(status: int, body: bytes) -> str:
    """How (c) counts an answer: its status, a 5xx told apart by whether it names a failing plugin."""
    if status < 500:
        return str(status)
    try:
        named = isinstance(json.loads(body), dict) and "plugin" in json.loads(body)
    except ValueError:
        named = False
    return f"{status} plugin" if named else f"{status} unexpected"


class Server:
    """A server child process running ``source`` (a ``src`` folder), ``plugins`` on its path."""

    def __init__(self, source: str, store_file: Path, root: Path, plugins: Path | None = None) -> None:
        self.port = _free_port()
        path = source if plugins is None else os.pathsep.join([source, str(plugins)])
        env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}
        command = [sys.executable, __file__, "--child", str(store_file), str(root), str(self.port)]
        self.process = subprocess.Popen(command, env=env)
        deadline = time.monotonic() + 120
        while True:
            try:
                if request(self.port, "GET", "/api/info")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("the server did not start")
            time.sleep(0.1)

    def memory_mb(self) -> dict[str, float]:
        fields = {}
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
        return fields

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def request(
    port: int, method: str, path: str, body: bytes | None = None, headers: Any = None
) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def multipart(data: bytes, fields: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    boundary = "galleriabench"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
        for key, value in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="q.png"\r\n'
        "Content-Type: image/png\r\n\r\n".encode()
        + data
        + b"\r\n"
    )
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, {"content-type": f"multipart/form-data; boundary={boundary}"}


def big_png(path: Path, width: int, height: int) -> Path:
    from PIL import Image

    x = np.arange(width, dtype=np.uint32)
    rows = [((x + y) % 256).astype(np.uint8) for y in range(0, height, 997)]
    pixels = np.empty((height, width, 3), np.uint8)
    for y in range(height):
        pixels[y, :, 0] = rows[(y // 997) % len(rows)]
        pixels[y, :, 1] = y % 256
        pixels[y, :, 2] = 128
    Image.fromarray(pixels).save(path, compress_level=6)
    return path


def make_gallery(folder: Path) -> tuple[Path, Path, list[str]]:
    from PIL import Image

    from galleria import InMemoryImageEmbeddingStore, PixelEmbedder

    root = folder / "gallery"
    rng = np.random.default_rng(25)
    names = []
    for i in range(200):
        name = f"c{i % 5}/{i}.png"
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(root / name)
        names.append(name)
    big_png(root / "big.png", 8000, 8000)
    paths = [str(root / name) for name in [*names, "big.png"]]
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    store_file = folder / "store.safetensors"
    store.save_to_disk(store_file)
    return root, store_file, names


def upload_latency(source: str, store_file: Path, root: Path, upload: bytes) -> str:
    server = Server(source, store_file, root)
    try:
        body, headers = multipart(upload, {"k": "5"})
        done = threading.Event()
        result: dict[str, Any] = {}

        def heavy() -> None:
            started = time.perf_counter()
            result["status"] = request(server.port, "POST", "/api/search", body, headers)[0]
            result["seconds"] = time.perf_counter() - started
            done.set()

        thread = threading.Thread(target=heavy)
        thread.start()
        latencies = []
        while not done.is_set():
            started = time.perf_counter()
            request(server.port, "GET", "/api/info")
            latencies.append(time.perf_counter() - started)
            time.sleep(0.02)
        thread.join()
        return (
            f"{result['status']} in {result['seconds']:.2f} s | {len(latencies)} | "
            f"{1000 * max(latencies):.0f} | {1000 * float(np.median(latencies)):.0f}"
        )
    finally:
        server.stop()


def image_memory(source: str, store_file: Path, root: Path, route: str, concurrent: int) -> str:
    server = Server(source, store_file, root)
    try:
        before = server.memory_mb()["VmHWM"]
        statuses: list[int] = []
        started = time.perf_counter()
        threads = [
            threading.Thread(
                target=lambda: statuses.append(request(server.port, "GET", f"/{route}/big.png")[0])
            )
            for _ in range(concurrent)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
        after = server.memory_mb()["VmHWM"]
        counts = dict(collections.Counter(statuses))
        return f"{before:.0f} → {after:.0f} | {seconds:.1f} | {counts}"
    finally:
        server.stop()


def mixed_load(
    source: str, store_file: Path, root: Path, names: list[str], total: int, plugins: Path | None = None
) -> str:
    from PIL import Image

    server = Server(source, store_file, root, plugins)
    rng = random.Random(25)
    small = io.BytesIO()
    Image.fromarray(np.random.default_rng(5).integers(0, 255, (48, 48, 3), np.uint8)).save(small, "PNG")
    upload_body, upload_headers = multipart(small.getvalue(), {"k": "5"})
    json_headers = {"content-type": "application/json"}

    def one() -> str:
        name = rng.choice(names)
        kind = rng.randrange(10 if plugins is not None else 9)
        if kind == 0:
            return answer_label(*request(server.port, "GET", "/api/info"))
        if kind == 1:
            return answer_label(*request(server.port, "GET", f"/thumb/{name}"))
        if kind == 2:
            return answer_label(*request(server.port, "GET", f"/image/{name}"))
        if kind == 3:
            return answer_label(*request(server.port, "GET", f"/?path={name}&k=10&rerank=1"))
        if kind == 4:
            body = json.dumps({"path": name, "k": 10, "rerank": True}).encode()
            return answer_label(*request(server.port, "POST", "/api/search", body, json_headers))
        if kind == 5:
            return answer_label(*request(server.port, "POST", "/api/search", upload_body, upload_headers))
        if kind == 6:
            page = rng.choice(["/eval?page=%C2%B2", "/eval/%C2%B2", "/?page=x"])
            return answer_label(*request(server.port, "GET", page))
        if kind == 7:
            body = json.dumps({"path": name, "k": rng.choice([0, -1, "x", 10**30])}).encode()
            return answer_label(*request(server.port, "POST", "/api/search", body, json_headers))
        if kind == 9:  # the installed plugin's re-ranker, which raises
            body = json.dumps({"path": name, "k": 10, "rerank": True, "method": "failing"}).encode()
            return answer_label(*request(server.port, "POST", "/api/search", body, json_headers))
        return answer_label(*request(server.port, "GET", f"/?folder=c{rng.randrange(5)}"))

    try:
        statuses: collections.Counter[str] = collections.Counter()
        for _ in range(200):
            statuses[one()] += 1
        warm = server.memory_mb()["VmRSS"]
        started = time.perf_counter()
        for _ in range(total):
            statuses[one()] += 1
        seconds = time.perf_counter() - started
        after = server.memory_mb()
        return (
            f"{warm:.0f} | {after['VmRSS']:.0f} | {after['VmRSS'] - warm:+.0f} | {total / seconds:.0f} | "
            f"{dict(sorted(statuses.items()))}"
        )
    finally:
        server.stop()


def prepared_child(rows: int) -> None:
    """The child of (d): three searches through the app, each one's milliseconds on one line."""
    from fastapi.testclient import TestClient

    from galleria import InMemoryImageEmbeddingStore
    from galleria.evaluation import RetrievalConfig
    from galleria.web import create_app

    vectors = np.random.default_rng(25).normal(size=(rows, 64)).astype(np.float32)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"/g/c{i % 10}/{i}.png" for i in range(rows)], vectors
    )
    params = {"k": 10, "truncation": 200, "vector_power": 0.5, "centre": True, "dba_neighbors": 5}
    tuned = RetrievalConfig("tuned", rerank=True, rerank_method="decoupled-diffusion", rerank_params=params)
    client = TestClient(create_app(store, defaults=tuned))
    times = []
    for i in range(3):
        started = time.perf_counter()
        answer = client.post("/api/search", json={"path": f"c{i}/{i}.png", "k": 10})
        assert answer.status_code == 200, answer.text
        times.append(1000 * (time.perf_counter() - started))
    print(" | ".join(f"{t:.0f}" for t in times))


def prepared_times(source: str, rows: int) -> str:
    env = {**os.environ, "PYTHONPATH": source, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, __file__, "--prepared-child", str(rows)]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=None, metavar="SRC", help="also measure this source folder")
    parser.add_argument("--requests", type=int, default=2000, help="mixed requests after warm-up")
    parser.add_argument("--child", nargs=3, metavar=("STORE", "ROOT", "PORT"), help=argparse.SUPPRESS)
    parser.add_argument("--prepared-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--only-prepared", action="store_true", help="only (d)")
    parser.add_argument("--only-mixed", action="store_true", help="only (c)")
    args = parser.parse_args()
    if args.prepared_child:
        prepared_child(args.prepared_child)
        return
    if args.child:
        serve_child(args.child[0], args.child[1], int(args.child[2]))
        return
    sources = [("this branch", str(ROOT / "src"))]
    if args.before:
        sources.insert(0, ("before", os.path.abspath(args.before)))
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2 cores shared; times are noisy)\n")
    if args.only_mixed:
        with tempfile.TemporaryDirectory() as scratch:
            root, store_file, names = make_gallery(Path(scratch))
            plugins = plugin_site(Path(scratch))
            print(f"### (c) Mixed load: 200 warm-up requests, then {args.requests}\n")
            print("| source | RSS after warm-up (MB) | RSS after (MB) | growth (MB) | requests/s | answers |")
            print("|---|---:|---:|---:|---:|---|")
            for label, source in sources:
                row = mixed_load(source, store_file, root, names, args.requests, plugins)
                print(f"| {label} | {row} |", flush=True)
        return
    print("### (d) Three searches with a prepared gallery (1,797 rows), milliseconds each\n")
    print("| source | 1st | 2nd | 3rd |\n|---|---:|---:|---:|")
    for label, source in sources:
        print(f"| {label} | {prepared_times(source, 1797)} |", flush=True)
    print()
    if args.only_prepared:
        return
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        root, store_file, names = make_gallery(folder)
        upload = big_png(folder / "upload.png", 7746, 7746).read_bytes()  # 60 Mpx
        print(f"### (a) /api/info while a 60-Mpx upload ({len(upload) / 1e6:.1f} MB) is searched\n")
        print(
            "| source | upload answered | info requests | max (ms) | median (ms) |\n|---|---|---:|---:|---:|"
        )
        for label, source in sources:
            print(f"| {label} | {upload_latency(source, store_file, root, upload)} |", flush=True)
        print("\n### (b) Peak RSS of the server for one 64-Mpx PNG (8000×8000), fresh server each\n")
        print("| source | route | concurrent | peak RSS (MB) start → end | seconds | answers |")
        print("|---|---|---:|---:|---:|---|")
        for label, source in sources:
            for route in ("image", "thumb"):
                for concurrent in (1, 16):
                    row = image_memory(source, store_file, root, route, concurrent)
                    print(f"| {label} | /{route} | {concurrent} | {row} |", flush=True)
        print(f"\n### (c) Mixed load: 200 warm-up requests, then {args.requests}\n")
        print("| source | RSS after warm-up (MB) | RSS after (MB) | growth (MB) | requests/s | answers |")
        print("|---|---:|---:|---:|---:|---|")
        plugins = plugin_site(folder)
        for label, source in sources:
            row = mixed_load(source, store_file, root, names, args.requests, plugins)
            print(f"| {label} | {row} |", flush=True)


if __name__ == "__main__":
    main()
