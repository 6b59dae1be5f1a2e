"""Planted duplicates on a real folder: recall and precision of ``galleria.duplicates`` per threshold.

Tux Paint's stamps (Debian's ``tuxpaint-stamps-default``: real clip art, transparent PNGs) are
written as RGB files; for a share of them the script plants copies a collector meets:

* ``exact``  — the same pixels in another file (PNG re-saved as BMP);
* ``resized`` — scaled to 60 % (bicubic);
* ``jpeg``   — recompressed as JPEG at quality 70;
* ``crop``   — 3 % cut off every side;
* ``colour`` — brightness × 1.08 and saturation × 1.1.

A true pair is two files of one planted family (the original and its copies). Found pairs are the
pairs inside each group. Recall = true pairs found / true pairs; precision = found pairs that are
true / found pairs (a pair of two distinct stamps that look alike counts against it). The default
threshold of each embedder is printed beside the sweep::

    python benchmarks/experiments/bench_duplicates.py --embedders pixel lite0 --originals 400 --planted 120
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageEnhance

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # benchmarks/: the shared helpers

from _real_data import make_embedder  # noqa: E402

KINDS = ("exact", "resized", "jpeg", "crop", "colour")


def _plant(original: Image.Image, kind: str, target: Path) -> Path:
    if kind == "exact":
        path = target.with_suffix(".bmp")
        original.save(path)
    elif kind == "resized":
        path = target.with_suffix(".png")
        width, height = original.size
        original.resize((max(8, width * 6 // 10), max(8, height * 6 // 10)), Image.BICUBIC).save(path)
    elif kind == "jpeg":
        path = target.with_suffix(".jpg")
        original.save(path, quality=70)
    elif kind == "crop":
        path = target.with_suffix(".png")
        width, height = original.size
        dx, dy = max(1, width * 3 // 100), max(1, height * 3 // 100)
        original.crop((dx, dy, width - dx, height - dy)).save(path)
    else:
        path = target.with_suffix(".png")
        brighter = ImageEnhance.Brightness(original).enhance(1.08)
        ImageEnhance.Color(brighter).enhance(1.1).save(path)
    return path


def make_folder(folder: Path, originals: int, planted: int, seed: int) -> dict[str, int]:
    """Write ``originals`` stamps (RGB on white) and copies of ``planted`` of them; path → family."""
    from galleria.datasets.tuxpaint import load_tuxpaint_stamps
    from galleria.store.reading import read_rgb

    stamps = load_tuxpaint_stamps(min_images=1)
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(len(stamps.paths), size=min(originals, len(stamps.paths)), replace=False))
    family: dict[str, int] = {}
    folder.mkdir(parents=True, exist_ok=True)
    for number, row in enumerate(chosen):
        image = Image.fromarray(read_rgb(stamps.paths[row]))
        path = folder / f"s{number:04d}.png"
        image.save(path)
        family[str(path)] = number
        if number < planted:
            for kind in KINDS:
                family[str(_plant(image, kind, folder / f"s{number:04d}_{kind}"))] = number
    return family


def _pairs(groups: list[list[str]]) -> set[tuple[str, str]]:
    return {pair for group in groups for pair in itertools.combinations(sorted(group), 2)}


def score(groups: list[list[str]], family: dict[str, int]) -> tuple[float, float, dict[str, float]]:
    """(recall, precision, recall per kind of copy) of ``groups`` against the planted families."""
    members: dict[int, list[str]] = {}
    for path, number in family.items():
        members.setdefault(number, []).append(path)
    true = _pairs([paths for paths in members.values() if len(paths) > 1])
    found = _pairs(groups)
    recall = len(true & found) / len(true) if true else 1.0
    precision = len(true & found) / len(found) if found else 1.0
    per_kind = {}
    for kind in KINDS:  # the pairs (original, its copy of this kind)
        wanted = {
            tuple(sorted((path, original)))
            for path in family
            if Path(path).stem.endswith("_" + kind)
            for original in [str(Path(path).with_name(Path(path).stem.rsplit("_", 1)[0] + ".png"))]
        }
        per_kind[kind] = len(wanted & found) / len(wanted) if wanted else 1.0
    return recall, precision, per_kind


def run(embedder_name: str, folder: Path, family: dict[str, int], cache: Path) -> list[dict[str, Any]]:
    from galleria import InMemoryImageEmbeddingStore
    from galleria.curation.dedup import default_threshold, duplicate_groups
    from galleria.embedders import embedder_config

    embedder = make_embedder(embedder_name, cache, "stamps")
    started = time.perf_counter()
    store = InMemoryImageEmbeddingStore(sorted(family), embedder, "exact")
    store.build_store(progress=False)
    built = time.perf_counter() - started
    default = default_threshold(embedder_config(embedder))
    rows = []
    for threshold in sorted({0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.1, 0.15, 0.2, default}):
        started = time.perf_counter()
        groups = [list(group.paths) for group in duplicate_groups(store, threshold=threshold)]
        seconds = time.perf_counter() - started
        recall, precision, per_kind = score(groups, family)
        rows.append(
            {
                "embedder": embedder_name,
                "threshold": threshold,
                "default": threshold == default,
                "recall": recall,
                "precision": precision,
                "per_kind": per_kind,
                "groups": len(groups),
                "seconds": seconds,
                "build_seconds": built,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--embedders", nargs="+", default=["pixel"], choices=("pixel", "lite0"))
    parser.add_argument("--originals", type=int, default=400)
    parser.add_argument("--planted", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "galleria-bench-real"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "collection"
        family = make_folder(folder, args.originals, args.planted, args.seed)
        print(
            f"{len(family)} files: {args.originals} stamps, {args.planted} of them with {len(KINDS)} copies"
        )
        print("embedder  threshold  recall  precision  " + "  ".join(f"{k:>7}" for k in KINDS) + "  groups")
        for name in args.embedders:
            for row in run(name, folder, family, Path(args.cache)):
                mark = " (default)" if row["default"] else ""
                kinds = "  ".join(f"{row['per_kind'][k]:7.3f}" for k in KINDS)
                print(
                    f"{name:8}  {row['threshold']:9.3f}  {row['recall']:6.3f}  {row['precision']:9.3f}  "
                    f"{kinds}  {row['groups']:6d}{mark}"
                )


if __name__ == "__main__":
    main()
