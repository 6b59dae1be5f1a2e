"""Planted copies in real labelled galleries: ``galleria.duplicates`` beside imagededup's hashes.

For each gallery a seeded share of its images is written as RGB files (the originals, in their label's
folder) and, for ``--planted`` of them, one copy each, the kinds in turn (:data:`KINDS`): the same pixels
in another file, half and double size, JPEG quality 30, brightness ±20 %, crops of 2 and 5 % a side,
a 10 % crop, and a copy whose pixels are stored rotated with an EXIF orientation tag that turns them
back (the reader applies it: the same picture). A true pair is two files of one planted family.

Scored per gallery × method, on the store's default threshold (``threshold=None``):

* recall — of the pairs (original, copy) of the kinds the method is held to (the pixel embedder:
  every kind but the 10 % crop; Lite0 and the hashes: every kind);
* pair precision — of the pairs inside the groups found (all pairs of a group, so a chain would
  cost), the share that are one family (a 10 % crop found with its original counts as right);
* mixed — groups holding images of two labels (the hard rule: none).

imagededup's PHash and DHash (``pip install imagededup``; at their default Hamming distance 10) run
on the same folder; their pairs are their own (a file and each file it lists).

``--dump`` also writes the calibration data (per image: its 10 nearest neighbours' distances and
families) to a ``.npz`` per gallery × embedder, for choosing :data:`galleria.curation.dedup`'s
constants::

    python benchmarks/experiments/bench_duplicates.py --galleries digits fashion stamps \\
        --embedders pixel lite0 --hashes
"""

from __future__ import annotations

import argparse
import hashlib
import io
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageEnhance

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # benchmarks/: the shared helpers

#: The planted copies: kind → (what it is, held to by the pixel embedder).
KINDS: dict[str, tuple[str, bool]] = {
    "exact": ("the same pixels, another file (BMP)", True),
    "half": ("half size (bicubic)", True),
    "double": ("double size (bicubic)", True),
    "jpeg30": ("JPEG quality 30", True),
    "bright": ("brightness +20 %", True),
    "dark": ("brightness -20 %", True),
    "crop2": ("2 % cut off every side", True),
    "crop5": ("5 % cut off every side", True),
    "crop10": ("10 % cut off every side", False),
    "exif": ("stored rotated 90°, EXIF orientation 6 turning it back", True),
}
BUILTIN = ("digits", "fashion", "stamps")
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "galleria-bench-duplicates"


def _crop(image: Image.Image, share: float) -> Image.Image:
    width, height = image.size
    dx, dy = max(1, round(width * share)), max(1, round(height * share))
    return image.crop((dx, dy, width - dx, height - dy))


def plant(original: Image.Image, kind: str, stem: Path) -> Path:
    """Write the copy ``kind`` of ``original`` beside ``stem`` (suffix chosen here); its path."""
    width, height = original.size
    if kind == "exact":
        path = stem.with_suffix(".bmp")
        original.save(path)
        return path
    if kind == "jpeg30":
        path = stem.with_suffix(".jpg")
        original.save(path, quality=30)
        return path
    path = stem.with_suffix(".png")
    if kind == "half":
        original.resize((max(1, width // 2), max(1, height // 2)), Image.BICUBIC).save(path)
    elif kind == "double":
        original.resize((2 * width, 2 * height), Image.BICUBIC).save(path)
    elif kind in ("bright", "dark"):
        ImageEnhance.Brightness(original).enhance(1.2 if kind == "bright" else 0.8).save(path)
    elif kind.startswith("crop"):
        _crop(original, int(kind[4:]) / 100).save(path)
    elif kind == "exif":
        path = stem.with_suffix(".jpg")
        exif = Image.Exif()
        exif[0x0112] = 6  # "rotate 90° clockwise to display": the pixels are stored turned left
        original.transpose(Image.Transpose.ROTATE_90).save(path, quality=95, exif=exif.tobytes())
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return path


def _originals(name: str, count: int, seed: int) -> list[tuple[Image.Image, str]]:
    """``count`` images of gallery ``name`` (seeded choice), as RGB images with their labels."""
    rng = np.random.default_rng(seed)
    if name == "fashion":
        from galleria.datasets.fashion_mnist import benchmark_split

        _, gallery = benchmark_split(n_queries=10, n_gallery=count, seed=seed)
        return [
            (Image.fromarray(pixels), str(label))
            for pixels, label in zip(gallery.rgb(), gallery.labels.tolist(), strict=True)
        ]
    if name == "digits":
        from galleria.datasets import digits_folder, load_image_folder

        folder = load_image_folder(digits_folder())
    elif name == "stamps":
        from galleria.datasets.tuxpaint import load_tuxpaint_stamps

        folder = load_tuxpaint_stamps(min_images=1)
    else:  # a gallery of the corpus (benchmarks/_corpus.py), when it is there
        import _corpus  # type: ignore[import-not-found]

        folder = _corpus.load(name)
    from galleria.images.reading import read_rgb

    rows = sorted(rng.choice(len(folder.paths), size=min(count, len(folder.paths)), replace=False))
    return [(Image.fromarray(read_rgb(folder.paths[row])), folder.labels[row]) for row in rows]


def make_folder(name: str, folder: Path, originals: int, planted: int, seed: int) -> dict[str, tuple[int, str, str]]:
    """Write the gallery's originals and copies under ``folder``: path → (family, label, kind)."""
    images = _originals(name, originals, seed)
    rng = np.random.default_rng(seed + 1)
    picked = rng.choice(len(images), size=min(planted, len(images)), replace=False).tolist()
    chosen = {int(row): list(KINDS)[position % len(KINDS)] for position, row in enumerate(picked)}
    family: dict[str, tuple[int, str, str]] = {}
    for number, (image, label) in enumerate(images):
        place = folder / "".join(c if c.isalnum() else "_" for c in label)
        place.mkdir(parents=True, exist_ok=True)
        path = place / f"i{number:05d}.png"
        image.save(path)
        family[str(path)] = (number, label, "original")
        if number in chosen:  # one copy per planted original: every pair found or missed counts
            kind = chosen[number]
            family[str(plant(image, kind, place / f"i{number:05d}_{kind}"))] = (number, label, kind)
    return family


def _pairs(groups: list[list[str]]) -> set[tuple[str, str]]:
    return {pair for group in groups for pair in itertools.combinations(sorted(group), 2)}


def score(
    pairs: set[tuple[str, str]], groups: list[list[str]], family: dict[str, tuple[int, str, str]], held: set[str]
) -> dict[str, Any]:
    """Recall (over the held kinds), pair precision, recall per kind, groups/pairs of two labels."""
    original = {number: path for path, (number, _, kind) in family.items() if kind == "original"}
    wanted = {
        kind: {tuple(sorted((path, original[number]))) for path, (number, _, k) in family.items() if k == kind}
        for kind in KINDS
    }
    true_wanted = set().union(*(wanted[kind] for kind in held))
    right = {pair for pair in pairs if family[pair[0]][0] == family[pair[1]][0]}
    mixed_pairs = sum(1 for a, b in pairs if family[a][1] != family[b][1])
    return {
        "recall": len(true_wanted & pairs) / max(1, len(true_wanted)),
        "precision": len(right) / len(pairs) if pairs else 1.0,
        "per_kind": {kind: len(wanted[kind] & pairs) / max(1, len(wanted[kind])) for kind in KINDS},
        "pairs": len(pairs),
        "false_pairs": len(pairs) - len(right),
        "groups": len(groups),
        "mixed_groups": sum(1 for group in groups if len({family[p][1] for p in group}) > 1),
        "mixed_pairs": mixed_pairs,
    }


def _embedder(name: str) -> Any:
    from galleria.embedders import PixelEmbedder

    if name == "pixel":
        return PixelEmbedder()  # galleria build's default
    from _real_data import make_embedder

    return make_embedder("lite0", DEFAULT_CACHE)


def _store(name: str, paths: list[str], cache: Path, key: str) -> Any:
    """The store of ``paths`` (vectors cached under ``cache`` by ``key``, the folder's digest)."""
    from galleria import InMemoryImageEmbeddingStore

    cached = cache / f"{key}-{name}.npz"
    if cached.is_file():
        data = np.load(cached, allow_pickle=False)
        if list(data["paths"]) == paths:
            store = InMemoryImageEmbeddingStore.from_embeddings(paths, data["vectors"], _embedder(name))
            store._pixel_digests = data["digests"]  # recorded at build: the exact tier
            return store
    store = InMemoryImageEmbeddingStore(paths, _embedder(name), "exact", num_workers=2)
    store.build_store(progress=False)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(cached, paths=np.array(paths), vectors=store.embeddings_of(paths), digests=store.pixel_digests)
    return store


def _folder_key(family: dict[str, tuple[int, str, str]], root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(family):
        digest.update(os.path.relpath(path, root).encode())
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:16]


def _galleria(store: Any, embedder: str) -> tuple[list[list[str]], dict[str, Any]]:
    from galleria.curation.dedup import duplicate_report

    started = time.perf_counter()
    report = duplicate_report(store)
    seconds = time.perf_counter() - started
    groups = [list(group.paths) for group in report.groups]
    return groups, {"threshold": report.threshold, "basis": report.basis, "seconds": seconds}


def _imagededup(method: str, root: Path) -> tuple[set[tuple[str, str]], float]:
    from imagededup import methods

    hasher: Any = getattr(methods, method)(verbose=False)
    started = time.perf_counter()
    found = hasher.find_duplicates(image_dir=str(root), recursive=True)
    seconds = time.perf_counter() - started
    pairs = {
        tuple(sorted((str(root / a), str(root / b)))) for a, others in found.items() for b in others
    }
    return pairs, seconds  # type: ignore[return-value]


def dump(store: Any, family: dict[str, tuple[int, str, str]], target: Path) -> None:
    """Each image's 10 nearest neighbours (distances, families, kinds) for calibration."""
    from galleria.store.graph import neighbor_graph

    paths = list(store.paths)
    ids, distances = neighbor_graph(store, 10)
    families = np.array([family[p][0] for p in paths])
    kinds = np.array([family[p][2] for p in paths])
    labels = np.array([family[p][1] for p in paths])
    np.savez(target, ids=ids, distances=distances, families=families, kinds=kinds, labels=labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--galleries", nargs="+", default=list(BUILTIN))
    parser.add_argument("--embedders", nargs="+", default=["pixel"], choices=("pixel", "lite0"))
    parser.add_argument("--hashes", action="store_true", help="imagededup's PHash and DHash beside")
    parser.add_argument("--originals", type=int, default=600)
    parser.add_argument("--planted", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default=str(DEFAULT_CACHE))
    parser.add_argument("--dump", default=None, help="folder for the calibration .npz files")
    parser.add_argument("--json", default=None, help="write every row here too")
    parser.add_argument("--dump-only", action="store_true", help="only write the calibration files")
    args = parser.parse_args()
    cache = Path(args.cache)
    rows: list[dict[str, Any]] = []
    header = f"{'gallery':10} {'method':8} {'T':>7} {'recall':>6} {'prec':>6} {'mixed':>5} {'groups':>6}  per kind"
    print(header, flush=True)
    for name in args.galleries:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / name
            family = make_folder(name, root, args.originals, args.planted, args.seed)
            key = _folder_key(family, root)
            paths = sorted(family)
            copies = sum(1 for value in family.values() if value[2] != "original")
            print(f"# {name}: {len(paths)} files, {len(paths) - copies} originals, {copies} planted copies", flush=True)
            methods: list[tuple[str, Callable[[], tuple[set[tuple[str, str]], list[list[str]], dict[str, Any]]]]] = []
            for embedder in args.embedders:

                def galleria_run(embedder: str = embedder) -> Any:
                    store = _store(embedder, paths, cache, key)
                    if args.dump:
                        Path(args.dump).mkdir(parents=True, exist_ok=True)
                        dump(store, family, Path(args.dump) / f"{name}-{embedder}.npz")
                    if args.dump_only:
                        return None
                    groups, extra = _galleria(store, embedder)
                    return _pairs(groups), groups, extra

                methods.append((embedder, galleria_run))
            if args.hashes:
                for method in ("PHash", "DHash"):

                    def hash_run(method: str = method) -> Any:
                        pairs, seconds = _imagededup(method, root)
                        return pairs, [list(pair) for pair in pairs], {"threshold": 10, "seconds": seconds}

                    methods.append((method.lower(), hash_run))
            for method, work in methods:
                outcome = work()
                if outcome is None:
                    continue
                pairs, groups, extra = outcome
                held = {kind for kind, (_, pixel) in KINDS.items() if pixel or method != "pixel"}
                result = {"gallery": name, "method": method, **extra, **score(pairs, groups, family, held)}
                rows.append(result)
                kinds = " ".join(f"{kind} {value:.2f}" for kind, value in result["per_kind"].items())
                threshold = result["threshold"]
                print(
                    f"{name:10} {method:8} {threshold:7.4f} {result['recall']:6.3f} {result['precision']:6.3f} "
                    f"{result['mixed_groups']:5d} {result['groups']:6d}  {kinds}",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
