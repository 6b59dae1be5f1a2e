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
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageEnhance

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # benchmarks/: the shared helpers

_corpus: Any
try:  # the corpus of labelled galleries with planted copies (benchmarks/_corpus.py), when it is there
    import _corpus  # type: ignore[import-not-found, no-redef]
except ImportError:  # a checkout without it: the builtin galleries only
    _corpus = None

#: The planted copies: kind → (what it is, held to by the pixel embedder).
KINDS: dict[str, tuple[str, bool]] = {
    "exact": ("the same pixels, another file (BMP)", True),
    "half": ("half size (bicubic)", True),
    "double": ("double size (bicubic)", True),
    "jpeg30": ("JPEG quality 30", True),
    "bright": ("brightness +20 %", True),
    "dark": ("brightness -20 %", True),
    "crop2": ("2 % cut off every side", True),
    "crop3": ("3 % cut off every side (the corpus' copies)", True),
    "crop4": ("4 % cut off every side (the corpus' copies)", True),
    "crop5": ("5 % cut off every side", True),
    "crop7": ("7 % cut off every side (the corpus' copies)", False),
    "crop10": ("10 % cut off every side", False),
    "exif": ("stored rotated 90°, EXIF orientation 6 turning it back", True),
}
BUILTIN = ("digits", "fashion", "stamps")


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
    else:
        raise SystemExit(f"unknown gallery {name!r}: {BUILTIN} or, with benchmarks/_corpus.py, its galleries")
    from galleria.images.reading import read_rgb

    rows = sorted(rng.choice(len(folder.paths), size=min(count, len(folder.paths)), replace=False))
    return [(Image.fromarray(read_rgb(folder.paths[row])), folder.labels[row]) for row in rows]


def make_folder(
    name: str, folder: Path, originals: int, planted: int, seed: int
) -> dict[str, tuple[int, str, str]]:
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
    pairs: set[tuple[str, str]],
    groups: list[list[str]],
    family: dict[str, tuple[int, str, str]],
    held: set[str],
) -> dict[str, Any]:
    """Recall (over the held kinds), pair precision, recall per kind, groups/pairs of two labels."""
    original = {number: path for path, (number, _, kind) in family.items() if kind == "original"}
    wanted = {
        kind: {
            tuple(sorted((path, original[number]))) for path, (number, _, k) in family.items() if k == kind
        }
        for kind in KINDS
    }
    true_wanted = set().union(*(wanted[kind] for kind in held))
    right = {pair for pair in pairs if family[pair[0]][0] == family[pair[1]][0]}
    mixed_pairs = sum(1 for a, b in pairs if family[a][1] != family[b][1])
    return {
        "recall": len(true_wanted & pairs) / max(1, len(true_wanted)),
        "precision": len(right) / len(pairs) if pairs else 1.0,
        "per_kind": {
            kind: len(wanted[kind] & pairs) / len(wanted[kind]) if wanted[kind] else float("nan")
            for kind in KINDS
        },
        "pairs": len(pairs),
        "false_pairs": len(pairs) - len(right),
        "groups": len(groups),
        "mixed_groups": sum(1 for group in groups if len({family[p][1] for p in group}) > 1),
        "mixed_pairs": mixed_pairs,
        # false pairs of two images of the source gallery (no planted copy among them): look-alikes
        # the source holds, e.g. one icon theme's sibling icons, a deck and its bitmap twin
        "source_false_pairs": sorted(
            (a, b) for a, b in pairs - right if family[a][2] == "original" and family[b][2] == "original"
        ),
    }


def _embedder(name: str, gallery: str) -> Any:
    from galleria.embedders import PixelEmbedder

    if name == "pixel":
        return PixelEmbedder()  # galleria build's default: 32 × 32 colour, whatever the gallery
    if _corpus is not None and gallery in _corpus.GALLERIES:
        return _corpus.make_embedder("lite0", gallery)
    from _real_data import make_embedder

    return make_embedder("lite0", Path(tempfile.gettempdir()) / "galleria-bench-real")


def _stores(gallery: str, embedders: list[str], paths: list[str]) -> dict[str, Any]:
    """A store per embedder over ``paths``; the pixel digests (the exact tier) recorded by a pixel build.

    Lite0 vectors of a corpus gallery come from the corpus' cache (the same weights), others are
    embedded here.
    """
    from galleria import InMemoryImageEmbeddingStore

    pixel = InMemoryImageEmbeddingStore(paths, _embedder("pixel", gallery), "exact", num_workers=2)
    pixel.build_store(progress=False)
    stores = {"pixel": pixel}
    if "lite0" in embedders:
        if _corpus is not None and gallery in _corpus.GALLERIES:
            vectors, _, order = _corpus.vectors(gallery, "lite0", planted_seed=0)
            row = {path: number for number, path in enumerate(order)}
            vectors = vectors[[row[path] for path in paths]]
        else:
            lite = InMemoryImageEmbeddingStore(paths, _embedder("lite0", gallery), "exact", num_workers=2)
            lite.build_store(progress=False)
            vectors = lite.embeddings_of(paths)
        store = InMemoryImageEmbeddingStore.from_embeddings(paths, vectors, _embedder("lite0", gallery))
        store._pixel_digests = pixel.pixel_digests  # the same files: the same decoded pixels
        stores["lite0"] = store
    return {name: stores[name] for name in embedders}


Found = tuple[set[tuple[str, str]], list[list[str]], dict[str, Any]]


def _galleria(store: Any, check: bool = True) -> Found:
    from galleria.curation.dedup import duplicate_report

    started = time.perf_counter()
    report = duplicate_report(store, check=check)
    seconds = time.perf_counter() - started
    groups = [list(group.paths) for group in report.groups]
    extra = {"threshold": report.threshold, "rule": report.basis["rule"], "seconds": seconds}
    return _pairs(groups), groups, extra


def _imagededup(method: str, root: Path, paths: list[str]) -> Found:
    from imagededup import methods

    hasher: Any = getattr(methods, method)(verbose=False)
    started = time.perf_counter()
    found = hasher.find_duplicates(image_dir=str(root), recursive=True)
    seconds = time.perf_counter() - started
    known = set(paths)
    pairs = {
        (min(a, b), max(a, b))
        for first, others in found.items()
        for second in others
        for a, b in [(str(root / first), str(root / second))]
        if a in known and b in known
    }
    return pairs, [list(pair) for pair in pairs], {"threshold": 10.0, "rule": "hamming", "seconds": seconds}


def dump(store: Any, family: dict[str, tuple[int, str, str]], target: Path) -> None:
    """Each image's 10 nearest neighbours (distances, families, kinds) for calibration."""
    from galleria.store.graph import neighbor_graph

    paths = list(store.paths)
    ids, distances = neighbor_graph(store, 10)
    families = np.array([family[p][0] for p in paths])
    kinds = np.array([family[p][2] for p in paths])
    labels = np.array([family[p][1] for p in paths])
    np.savez(target, ids=ids, distances=distances, families=families, kinds=kinds, labels=labels)


def corpus_folder(name: str) -> tuple[Path, dict[str, tuple[int, str, str]]]:
    """A corpus gallery with its planted copies (``_corpus.planted``, seed 0): root, path → family."""
    assert _corpus is not None
    gallery, rows = _corpus.planted(name, 0)
    family: dict[str, tuple[int, str, str]] = {
        path: (number, label, "original")
        for number, (path, label) in enumerate(zip(gallery.paths, gallery.labels, strict=True))
    }
    renamed = {"brighter20": "bright", "darker20": "dark"}
    for original, copy, kind in rows:
        number, label, _ = family[original]
        family[copy] = (number, label, renamed.get(kind, kind))
    return Path(gallery.root), family


def run_gallery(
    name: str, root: Path, family: dict[str, tuple[int, str, str]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Every method on one gallery: a row each (printed as it comes)."""
    paths = sorted(family)
    copies = sum(1 for value in family.values() if value[2] != "original")
    print(f"# {name}: {len(paths)} files, {len(paths) - copies} originals, {copies} planted", flush=True)
    outcomes: list[tuple[str, Found]] = []
    for embedder, store in _stores(name, args.embedders, paths).items():
        if args.dump:
            Path(args.dump).mkdir(parents=True, exist_ok=True)
            dump(store, family, Path(args.dump) / f"{name}-{embedder}.npz")
        outcomes.append((embedder, _galleria(store)))
        if args.unchecked:  # the vectors alone, every pair within the threshold (check=False)
            outcomes.append((embedder + "/v", _galleria(store, check=False)))
    if args.hashes:
        outcomes += [(method.lower(), _imagededup(method, root, paths)) for method in ("PHash", "DHash")]
    rows = []
    for method, (pairs, groups, extra) in outcomes:
        held = {kind for kind, (_, pixel) in KINDS.items() if pixel or not method.startswith("pixel")}
        result = {"gallery": name, "method": method, **extra, **score(pairs, groups, family, held)}
        rows.append(result)
        kinds = " ".join(
            f"{kind} {value:.2f}" for kind, value in result["per_kind"].items() if value == value
        )
        print(
            f"{name:8} {method:6} {result['threshold']:7.4f} {result['rule']:8} {result['recall']:6.3f} "
            f"{result['precision']:6.3f} {result['mixed_groups']:5d} {result['groups']:6d}  {kinds}",
            flush=True,
        )
        source = result["source_false_pairs"]
        if source and not method.startswith(("phash", "dhash")):
            shown = "; ".join(
                f"{Path(a).parent.name}/{Path(a).name} ~ {Path(b).parent.name}/{Path(b).name}"
                for a, b in source[:6]
            )
            print(
                f"{'':17} {len(source)} of {result['false_pairs']} false pairs are two source images: {shown}"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--galleries", nargs="+", default=list(BUILTIN), help="builtin or corpus galleries")
    parser.add_argument("--embedders", nargs="+", default=["pixel"], choices=("pixel", "lite0"))
    parser.add_argument("--hashes", action="store_true", help="imagededup's PHash and DHash beside")
    parser.add_argument("--unchecked", action="store_true", help="galleria with check=False beside")
    parser.add_argument("--originals", type=int, default=600, help="originals of a builtin gallery")
    parser.add_argument("--planted", type=int, default=200, help="copies planted in a builtin gallery")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dump", default=None, help="folder for the calibration .npz files")
    parser.add_argument("--json", default=None, help="write every row here too")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    print(
        f"{'gallery':8} {'method':6} {'T':>7} {'rule':8} {'recall':>6} {'prec':>6} {'mixed':>5} {'groups':>6}"
    )
    for name in args.galleries:
        if _corpus is not None and name in _corpus.GALLERIES:
            root, family = corpus_folder(name)
            rows += run_gallery(name, root, family, args)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / name
            family = make_folder(name, root, args.originals, args.planted, args.seed)
            rows += run_gallery(name, root, family, args)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
