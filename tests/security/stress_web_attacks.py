"""Issue 15: the attack corpus of uploads and ``galleria serve`` routes, and thumbnail memory under bombs.

Run ``.venv/bin/python tests/security/stress_web_attacks.py`` (a minute or two on 2 cores;
``--tries 4`` for a
smoke run). It prints two markdown tables for ``docs/benchmarks.md``:

(a) the attack corpus of ``tests/_support/web_attacks.py`` at ``--tries`` mutations per gallery file: per
    family,
    tries / clean / bad (target: 0 bad);
(b) peak memory of 4 concurrent thumbnail requests for a small PNG of many pixels, each in a fresh child
    process: the way thumbnails were made before issue 15 (``Image.open`` + ``convert("RGB")`` at full
    size, no limit) beside ``ThumbnailCache.get`` (galleria's reader: the pixel limit checked from the
    header, at most 2 decodes at once).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _thumbnail_child(way: str, path: str, threads: int, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    from PIL import Image

    from galleria.images.reading import ImageReadError
    from galleria.viewer.thumbnails import ThumbnailCache

    Image.MAX_IMAGE_PIXELS = None if way == "before, no bomb check" else Image.MAX_IMAGE_PIXELS
    cache = ThumbnailCache(size=160)
    before = _peak_mb()
    outcomes: list[str] = []

    def one() -> None:
        try:
            if way.startswith("before"):
                with Image.open(path) as image:
                    image.draft("RGB", (160, 160))
                    picture = image.convert("RGB")
                picture.thumbnail((160, 160))
                outcomes.append("200")
            else:
                cache.get(path)
                outcomes.append("200")
        except ImageReadError:
            outcomes.append("404")
        except Exception as error:  # the old way's DecompressionBombError became an HTTP 500
            outcomes.append(f"500 ({type(error).__name__})")

    started = time.perf_counter()
    workers = [threading.Thread(target=one) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    queue.put((before, _peak_mb(), time.perf_counter() - started, sorted(set(outcomes))))


def thumbnail_memory(folder: Path) -> str:
    from _support.image_kinds import png_bomb

    lines = [
        "| image | way | peak RSS before → after (MB) | time (s) | answers |",
        "|---|---|---:|---:|---|",
    ]
    context = multiprocessing.get_context("spawn")
    for width, height in ((7_000, 7_000), (12_000, 12_000), (15_000, 15_000)):
        path = png_bomb(folder / f"bomb{width}.png", width, height)
        label = (
            f"{width}×{height} 1-bit PNG ({width * height / 1e6:.0f} Mpx, {path.stat().st_size / 1e3:.0f} kB)"
        )
        for way in ("before (Image.open + convert)", "ThumbnailCache.get (galleria's reader)"):
            queue = context.Queue()
            child = context.Process(target=_thumbnail_child, args=(way, str(path), 4, queue))
            child.start()
            before, after, seconds, answers = queue.get()
            child.join()
            lines.append(
                f"| {label} | {way} | {before:.0f} → {after:.0f} | {seconds:.2f} | {', '.join(answers)} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=40, help="mutations per gallery file (default: 40)")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--skip-memory", action="store_true", help="only the attack corpus")
    args = parser.parse_args()
    from _support.web_attacks import markdown_table, run_corpus

    load = os.getloadavg()
    started = time.perf_counter()
    rows = run_corpus(
        tries=args.tries, seed=args.seed, progress=lambda name: print(f"  done: {name}", file=sys.stderr)
    )
    elapsed = time.perf_counter() - started
    print(f"### Attack corpus (tries={args.tries} per gallery file, seed {args.seed}; {elapsed:.0f} s)\n")
    print(markdown_table(rows))
    for row in rows:
        for example in row.examples:
            print(f"- bad: {row.name}: {example}")
    if not args.skip_memory:
        with tempfile.TemporaryDirectory() as scratch:
            print(
                "\n### Thumbnails of small PNGs of many pixels: 4 concurrent requests, "
                "one fresh process each\n"
            )
            print(thumbnail_memory(Path(scratch)))
    print(
        f"\nload average at start: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
        f"at end: {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
