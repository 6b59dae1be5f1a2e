"""Benchmark decoding large JPEGs with a draft (reduced DCT scale) against decoding them at full size.

Run ``.venv/bin/python benchmarks/suites/bench_decoding.py`` (about a minute on 2 cores) or with ``--quick``
for a smoke run. Every figure is measured in this one run, side by side, and written as a markdown
section to ``docs/benchmarks/decoding.md``.

(a) ``read_rgb`` of one 6000×4000 JPEG (seeded smooth colours plus noise, quality 90): at full size,
    and with ``min_size`` twice the input of CLIP ViT-B-32 (448×448) and of the default PixelEmbedder
    (64×64): time, decoded size, array bytes.
(b) ``build_store`` with ``PixelEmbedder()`` over a folder of such photos: as galleria builds it (the
    store drafts to twice the embedder's ``input_size``) and with the same embedder hiding its
    ``input_size`` (so every photo is decoded at full size), with the cosine distance between the
    two embeddings of each photo.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.store import read_rgb

ROOT = Path(__file__).resolve().parents[2]
SEED = 8


def write_photo(path: Path, width: int, height: int, seed: int) -> None:
    """A seeded photo-like JPEG: smooth colour fields plus sensor-like noise, quality 90."""
    rng = np.random.default_rng(seed)
    small = rng.uniform(0, 255, size=(6, 9, 3)).astype(np.uint8)
    smooth = np.asarray(Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC), np.int16)
    noise = rng.integers(-12, 13, size=(height, width, 1), dtype=np.int16)
    Image.fromarray(np.clip(smooth + noise, 0, 255).astype(np.uint8)).save(path, quality=90)


def best_of(repeats: int, work: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    return best, result


class FullSizePixels(PixelEmbedder):
    """PixelEmbedder that declares no input size: the store decodes every photo at full size."""

    @property
    def input_size(self) -> None:  # type: ignore[override]
        return None


def run(quick: bool) -> str:
    load_before = os.getloadavg()[0]
    width, height = (1500, 1000) if quick else (6000, 4000)
    count, repeats = (2, 1) if quick else (6, 3)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        paths = []
        for index in range(count):
            path = root / f"photo{index}.jpg"
            write_photo(path, width, height, SEED + index)
            paths.append(str(path))
        megabytes = os.path.getsize(paths[0]) / 1e6

        rows = []
        for label, min_size in [
            ("full size (`read_rgb(path)`)", None),
            ("`min_size=(448, 448)` (CLIP ViT-B-32 input 224 × 2)", (448, 448)),
            ("`min_size=(64, 64)` (PixelEmbedder() input 32 × 2)", (64, 64)),
        ]:
            seconds, array = best_of(repeats, lambda size=min_size: read_rgb(paths[0], min_size=size))
            rows.append((label, seconds, array.shape, array.nbytes))
        full_seconds = rows[0][1]

        def build(embedder: PixelEmbedder) -> InMemoryImageEmbeddingStore:
            store = InMemoryImageEmbeddingStore(paths, embedder, num_workers=2)
            store.build_store()
            return store

        drafted_seconds, drafted = best_of(repeats, lambda: build(PixelEmbedder()))
        plain_seconds, plain = best_of(repeats, lambda: build(FullSizePixels()))
        a, b = drafted.embeddings_of(paths), plain.embeddings_of(paths)
        distances = 1.0 - np.sum(a * b, axis=1)

    lines = [
        "## Decoding large JPEGs",
        "",
        f"Machine: {os.cpu_count()} CPU cores, shared with other work (1-minute load average "
        f"{load_before:.1f} before the run, {os.getloadavg()[0]:.1f} after), so absolute times are noisy. "
        "Produced by `benchmarks/suites/bench_decoding.py" + (" --quick" if quick else "") + "`. "
        f"A {width}×{height} JPEG ({megabytes:.1f} MB, quality 90, seed {SEED}); best of {repeats}.",
        "",
        "| `read_rgb` | seconds | decoded (H, W) | array | vs full size |",
        "|---|---:|---|---:|---:|",
    ]
    for label, seconds, shape, nbytes in rows:
        lines.append(
            f"| {label} | {seconds:.3f} | {shape[0]}×{shape[1]} | {nbytes / 1e6:.1f} MB "
            f"| {full_seconds / seconds:.1f}× faster |"
            if seconds != full_seconds
            else f"| {label} | {seconds:.3f} | {shape[0]}×{shape[1]} | {nbytes / 1e6:.1f} MB | – |"
        )
    lines += [
        "",
        "A JPEG draft reduces by 1/2, 1/4 or 1/8 at most, keeping at least `min_size` on each side.",
        "",
        f"`build_store` with `PixelEmbedder()` over {count} such photos (2 decoding threads): "
        f"**{plain_seconds:.2f} s** decoding at full size, **{drafted_seconds:.2f} s** with the store's "
        f"draft (**{plain_seconds / drafted_seconds:.1f}×** faster). Largest cosine distance between "
        f"the two embeddings of a photo: {float(distances.max()):.2e}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat (smoke run)")
    parser.add_argument(
        "--output",
        default=None,
        help="markdown file to write (default: docs/benchmarks/decoding.md; none with --quick)",
    )
    args = parser.parse_args(argv)
    text = run(args.quick)
    print(text)
    output = args.output or (None if args.quick else str(ROOT / "docs" / "benchmarks" / "decoding.md"))
    if output:
        Path(output).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
