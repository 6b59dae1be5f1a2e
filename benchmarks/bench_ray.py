"""Benchmark the Ray engine against the threaded builder on the same cores: images/s and overhead per image.

Run ``.venv/bin/python benchmarks/bench_ray.py`` (a couple of minutes) or ``--quick``. Both build
the same seeded JPEG gallery with the same PixelEmbedder; the Ray build starts a local Ray with
2 CPUs first (its start-up time is reported apart) and includes writing the Parquet shards and
building the exact index from them. Figures go to ``docs/benchmarks/ray.md``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def write_jpegs(folder: Path, count: int, size: int = 128) -> list[str]:
    rng = np.random.default_rng(2024)
    paths = []
    for i in range(count):
        pixels = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
        path = folder / f"{i:05d}.jpg"
        Image.fromarray(pixels).save(path, quality=90)
        paths.append(str(path))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    count = 200 if options.quick else 2_000
    import ray

    from galleria import InMemoryImageEmbeddingStore, PixelEmbedder, build_with_ray

    embedder = PixelEmbedder(size=32, batch_size=64)
    with tempfile.TemporaryDirectory(prefix="galleria-ray-") as folder:
        paths = write_jpegs(Path(folder), count)
        start = time.perf_counter()
        threaded = InMemoryImageEmbeddingStore(paths, embedder, num_workers=2)
        threaded.build_store(progress=False)
        threaded_s = time.perf_counter() - start
        start = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        startup_s = time.perf_counter() - start
        start = time.perf_counter()
        on_ray = build_with_ray(paths, embedder, Path(folder) / "shards", num_actors=1)
        ray_s = time.perf_counter() - start
        ray.shutdown()
    assert np.array_equal(on_ray.embeddings, threaded.embeddings)
    load = os.getloadavg()[0]
    lines = [
        "## Ray engine vs threaded build (`benchmarks/bench_ray.py`)",
        "",
        f"{count:,} seeded 128×128 JPEGs, PixelEmbedder(size=32), same 2 shared cores (load average "
        f"{load:.1f} at the end). Ray: local `ray.init(num_cpus=2)`, decode tasks + 1 embedding actor, "
        "Parquet shards written and the exact index built from them. Embeddings equal bit for bit.",
        "",
        "| builder | seconds | images/s | overhead per image vs threaded |",
        "|---|---:|---:|---:|",
        f"| threaded (2 decode threads) | {threaded_s:.2f} | {count / threaded_s:.0f} | — |",
        f"| Ray Data (excluding {startup_s:.1f} s Ray start-up) | {ray_s:.2f} | {count / ray_s:.0f} "
        f"| {(ray_s - threaded_s) / count * 1e3:+.2f} ms |",
    ]
    if not options.quick:
        (ROOT / "docs" / "benchmarks" / "ray.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
