"""Benchmark the Ray engine against the threaded builder on the same cores: images/s, start-up, per image.

Run ``.venv/bin/python benchmarks/bench_ray.py`` (a few minutes on 2 shared cores) or ``--quick``.
Both builders embed the same gallery — Fashion-MNIST test images written as PNG files (Debian's
``dataset-fashion-mnist``; seeded random 28×28 PNGs when it is not installed) — with the same
PixelEmbedder, side by side in one run, at two gallery sizes so that the fixed cost of a Ray
pipeline and its cost per image can be told apart. The Ray build starts a local Ray with
``ray.init(num_cpus=2)`` first (its start-up is timed apart) and includes writing the Parquet
shards and building the exact index from them. The embeddings are checked bit for bit.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 and 1,000 images")
    parser.add_argument("--count", type=int, default=5_000, help="the larger gallery (default 5,000)")
    options = parser.parse_args()
    large = 1_000 if options.quick else options.count
    # The first pipeline of a session also starts Ray's worker processes: it runs at the large size
    # (cold), then the small and large sizes again (warm) give the cost per image.
    counts = (large, 500, large)
    import ray

    from galleria import InMemoryImageEmbeddingStore, PixelEmbedder, build_with_ray

    embedder = PixelEmbedder(size=28, batch_size=64)
    rows = []
    with tempfile.TemporaryDirectory(prefix="galleria-ray-") as folder:
        every, source = write_pngs(Path(folder), max(counts))
        start = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        startup_s = time.perf_counter() - start
        for count in counts:
            paths = every[:count]
            start = time.perf_counter()
            threaded = InMemoryImageEmbeddingStore(paths, embedder, num_workers=2)
            threaded.build_store(progress=False)
            threaded_s = time.perf_counter() - start
            start = time.perf_counter()
            on_ray = build_with_ray(paths, embedder, Path(folder) / f"shards-{count}", num_actors=2)
            ray_s = time.perf_counter() - start
            assert on_ray.paths == threaded.paths
            assert np.array_equal(on_ray.embeddings, threaded.embeddings), "Ray and threads differ"
            rows.append((count, threaded_s, ray_s))
        ray.shutdown()
    load = os.getloadavg()
    _, (small, small_t, small_r), (large, large_t, large_r) = rows
    per_image_ray = (large_r - small_r) / (large - small)
    per_image_threads = (large_t - small_t) / (large - small)
    fixed_ray = large_r - per_image_ray * large  # of a warm pipeline
    lines = [
        "| images | threaded s | threaded images/s | Ray s (build) | Ray images/s (build) "
        "| Ray s (start-up + build) | Ray ÷ threaded (start-up included) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (count, threaded_s, ray_s), run in zip(rows, ("cold", "warm", "warm"), strict=True):
        lines.append(
            f"| {count:,} ({run}) | {threaded_s:.2f} | {count / threaded_s:,.0f} | {ray_s:.2f} "
            f"| {count / ray_s:,.0f} | {startup_s + ray_s:.2f} | {(startup_s + ray_s) / threaded_s:.2f}× |"
        )
    print(
        f"{source}, PixelEmbedder(size=28, batch_size=64), local ray.init(num_cpus=2), 2 actors; "
        f"Ray start-up {startup_s:.2f} s; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )
    print("\n".join(lines))
    print(
        f"marginal cost per image: threaded {per_image_threads * 1e3:.2f} ms, "
        f"Ray {per_image_ray * 1e3:.2f} ms; "
        f"fixed cost of a warm Ray pipeline {fixed_ray:.2f} s"
    )
    print("embeddings equal bit for bit: yes")


if __name__ == "__main__":
    main()
