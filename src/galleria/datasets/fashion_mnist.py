"""Fashion-MNIST (Zalando, MIT licence): the standard idx files read into arrays, and a benchmark split.

The data set is 70,000 grey 28×28 images of clothing in ten classes: 60,000 in the training files
and 10,000 in the test files. :func:`fashion_mnist` reads one part from the four standard files
(``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
``t10k-labels-idx1-ubyte``, each plain or ``.gz``); Debian's ``dataset-fashion-mnist`` package
installs them under :data:`DEBIAN_ROOT`.

An idx file is untrusted input: its header is checked (magic number, 28×28 images, a count no larger
than the data set's own) before anything is allocated, and a file that holds fewer or more bytes
than its header promises is refused.

:func:`benchmark_split` draws the fixed query/gallery split of ``benchmarks/suites/bench_real.py`` and
``galleria demo --dataset fashion-mnist``: queries from the test part, gallery from the training
part (so no query is in the gallery), both stratified by class and seeded.
:func:`fashion_mnist_folder` writes such a split once as PNG files in the labelled layout, so the
demo runs the real path (files → decoding → embedder → index).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from PIL import Image

from galleria._files import default_mode
from galleria._validation import check_choice, check_positive_int, is_int
from galleria.datasets.digits import default_cache_dir
from galleria.datasets.folder import QueryGallerySplit, load_image_folder

__all__ = [
    "DEBIAN_ROOT",
    "FASHION_MNIST_CLASSES",
    "FashionMNIST",
    "benchmark_split",
    "fashion_mnist",
    "fashion_mnist_folder",
]

#: Where Debian's ``dataset-fashion-mnist`` package puts the idx files.
DEBIAN_ROOT = "/usr/share/datasets/fashion-mnist"
#: The ten class names, in label order (label 0 is "T-shirt/top").
FASHION_MNIST_CLASSES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
_PARTS = ("train", "test")
_PREFIX = {"train": "train", "test": "t10k"}
_SIZES = {"train": 60_000, "test": 10_000}
_SIDE = 28
_IMAGE_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
_LABEL_MAGIC = 0x00000801  # unsigned bytes, 1 dimension
_MARKER = ".galleria-fashion-mnist.json"
_FOLDER_VERSION = 1


@dataclass(frozen=True)
class FashionMNIST:
    """One part of Fashion-MNIST: ``images`` (n, 28, 28) uint8 and ``labels`` (n,) int64 in 0…9."""

    images: np.ndarray
    labels: np.ndarray
    part: str

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def rgb(self, rows: Any = None) -> np.ndarray:
        """The images (or those at ``rows``) as (n, 28, 28, 3) uint8 RGB arrays, three equal channels."""
        chosen = self.images if rows is None else self.images[np.asarray(rows, dtype=np.int64)]
        return np.repeat(chosen[:, :, :, None], 3, axis=3)


def _find(root: Path, name: str) -> Path:
    for candidate in (root / name, root / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"Fashion-MNIST file {name!r} (or {name}.gz) not found in {str(root)!r}; on Debian/Ubuntu "
        "`apt-get install dataset-fashion-mnist` installs the files in " + DEBIAN_ROOT
    )


def _open(path: Path) -> IO[bytes]:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _read_exact(stream: IO[bytes], count: int, path: Path) -> bytes:
    data = stream.read(count)
    if len(data) != count:
        raise ValueError(f"{str(path)!r} is truncated: expected {count} bytes of data, got {len(data)}")
    return data


def _read_idx(path: Path, magic: int, dims: int, limit: int) -> np.ndarray:
    """Read one idx file of unsigned bytes after checking its header (no allocation before that)."""
    try:
        with _open(path) as stream:
            header = _read_exact(stream, 4 + 4 * dims, path)
            found, *shape = struct.unpack(f">I{dims}I", header)
            if found != magic:
                raise ValueError(f"{str(path)!r} is not an idx file of this kind (magic {found:#010x})")
            if shape[0] > limit or (dims == 3 and shape[1:] != [_SIDE, _SIDE]):
                raise ValueError(
                    f"{str(path)!r} declares shape {tuple(shape)}; Fashion-MNIST has at most {limit} "
                    f"items of {_SIDE}×{_SIDE}"
                )
            count = int(np.prod(shape))
            data = _read_exact(stream, count, path)
            if stream.read(1):
                raise ValueError(f"{str(path)!r} holds more data than its header declares")
    except (OSError, EOFError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise ValueError(f"{str(path)!r} cannot be read as an idx file: {error}") from error
    return np.frombuffer(data, dtype=np.uint8).reshape(shape)


def fashion_mnist(root: str | os.PathLike[str] | None = None, *, part: str = "train") -> FashionMNIST:
    """Read the training or test part of Fashion-MNIST from its standard idx files.

    Parameters
    ----------
    root : str or os.PathLike, optional
        The folder holding the idx files (plain or gzipped). Defaults to :data:`DEBIAN_ROOT`.
    part : {"train", "test"}
        The 60,000 training images or the 10,000 test images.

    Returns
    -------
    FashionMNIST
        ``images`` (n, 28, 28) uint8 and ``labels`` (n,) int64; class names in
        :data:`FASHION_MNIST_CLASSES`.

    Raises
    ------
    TypeError
        ``root`` is not a path; ``part`` not a str.
    ValueError
        ``part`` is not "train" or "test"; a file is damaged, truncated, of another kind, or its
        images and labels disagree in number; a label is outside 0…9.
    FileNotFoundError
        A file is missing (the message says how to install them).

    Examples
    --------
    >>> data = fashion_mnist(part="test")  # doctest: +SKIP
    >>> data.images.shape, FASHION_MNIST_CLASSES[int(data.labels[0])]  # doctest: +SKIP
    ((10000, 28, 28), 'Ankle boot')
    """
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a str or os.PathLike path, got {type(root).__name__}")
    check_choice("part", part, _PARTS)
    folder = Path(DEBIAN_ROOT if root is None else os.fspath(root))
    if not folder.is_dir():
        raise FileNotFoundError(
            f"Fashion-MNIST folder {str(folder)!r} does not exist; on Debian/Ubuntu "
            "`apt-get install dataset-fashion-mnist` installs the files in " + DEBIAN_ROOT
        )
    prefix = _PREFIX[part]
    limit = _SIZES[part]
    images = _read_idx(_find(folder, f"{prefix}-images-idx3-ubyte"), _IMAGE_MAGIC, 3, limit)
    labels = _read_idx(_find(folder, f"{prefix}-labels-idx1-ubyte"), _LABEL_MAGIC, 1, limit)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"Fashion-MNIST {part} files disagree: {images.shape[0]} images but {labels.shape[0]} labels"
        )
    if labels.size and int(labels.max()) >= len(FASHION_MNIST_CLASSES):
        raise ValueError(f"Fashion-MNIST {part} labels hold {int(labels.max())}, outside 0…9")
    return FashionMNIST(images=images, labels=labels.astype(np.int64), part=part)


def _stratified_rows(labels: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` rows drawn without replacement, as equal per class as possible (sorted)."""
    classes = np.unique(labels)
    share, extra = divmod(count, classes.size)
    chosen: list[np.ndarray] = []
    for position, cls in enumerate(classes):
        rows = np.flatnonzero(labels == cls)
        want = share + (1 if position < extra else 0)
        if want > rows.size:
            raise ValueError(f"class {int(cls)} has only {rows.size} images, {want} asked for")
        chosen.append(rng.choice(rows, size=want, replace=False))
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def benchmark_split(
    root: str | os.PathLike[str] | None = None,
    *,
    n_queries: int = 1000,
    n_gallery: int = 20_000,
    seed: int = 0,
) -> tuple[FashionMNIST, FashionMNIST]:
    """The fixed query/gallery split: queries from the test part, gallery from the training part.

    Both are stratified by class (equal shares) and drawn with ``numpy.random.default_rng(seed)``.

    Returns
    -------
    (queries, gallery) : tuple of FashionMNIST
        The chosen rows, in their original order.

    Raises
    ------
    TypeError, ValueError
        For a bad count or seed (more than the part holds), and as :func:`fashion_mnist`.
    """
    queries_wanted = check_positive_int("n_queries", n_queries)
    gallery_wanted = check_positive_int("n_gallery", n_gallery)
    if not is_int(seed) or seed < 0:
        raise TypeError(f"seed must be a non-negative integer, got {seed!r}")
    rng = np.random.default_rng(int(seed))
    test = fashion_mnist(root, part="test")
    train = fashion_mnist(root, part="train")
    if queries_wanted > len(test) or gallery_wanted > len(train):
        raise ValueError(
            f"n_queries={queries_wanted} / n_gallery={gallery_wanted} exceed the {len(test)} test / "
            f"{len(train)} training images"
        )
    query_rows = _stratified_rows(test.labels, queries_wanted, rng)
    gallery_rows = _stratified_rows(train.labels, gallery_wanted, rng)
    queries = FashionMNIST(test.images[query_rows], test.labels[query_rows], "test")
    gallery = FashionMNIST(train.images[gallery_rows], train.labels[gallery_rows], "train")
    return queries, gallery


def _label_folder(label: int) -> str:
    return f"{label}-" + FASHION_MNIST_CLASSES[label].lower().replace("/", "-").replace(" ", "-")


def _write_part(target: Path, data: FashionMNIST) -> None:
    for label in range(len(FASHION_MNIST_CLASSES)):
        (target / _label_folder(label)).mkdir(parents=True)
    for row, (image, label) in enumerate(zip(data.images, data.labels.tolist(), strict=True)):
        Image.fromarray(image, mode="L").convert("RGB").save(target / _label_folder(label) / f"{row:05d}.png")


def fashion_mnist_folder(
    cache_dir: str | os.PathLike[str] | None = None,
    root: str | os.PathLike[str] | None = None,
    *,
    n_queries: int = 1000,
    n_gallery: int = 20_000,
    seed: int = 0,
    on_write: Callable[[str, int, Path], None] | None = None,
) -> QueryGallerySplit:
    """Write :func:`benchmark_split` once as PNG folders and return it as a query/gallery split.

    The images go to ``<cache_dir>/fashion-mnist-<n_queries>-<n_gallery>-<seed>/{queries,gallery}/
    <label>-<name>/<row>.png`` (grey images stored as RGB); a marker file says the folder is
    complete, and a second call only lists it. ``cache_dir`` defaults to
    :func:`~galleria.datasets.default_cache_dir`. ``on_write(stage, count, folder)`` is told when
    the images are written (``stage`` ``"writing"`` before, ``"written"`` after, ``folder`` the
    target); it is not called when the folder is already complete.

    Raises
    ------
    FileNotFoundError, TypeError, ValueError
        As :func:`benchmark_split`.
    FileExistsError
        The target folder exists but is not a complete one (it is left alone).
    """
    if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"cache_dir must be a str or os.PathLike path, got {type(cache_dir).__name__}")
    base = default_cache_dir() if cache_dir is None else Path(os.fspath(cache_dir)).expanduser()
    payload = {"n_queries": n_queries, "n_gallery": n_gallery, "seed": seed, "version": _FOLDER_VERSION}
    target = base / f"fashion-mnist-{n_queries}-{n_gallery}-{seed}"
    try:
        complete = json.loads((target / _MARKER).read_text(encoding="utf-8")) == payload
    except (OSError, ValueError):
        complete = False
    if not complete:
        if target.exists() and any(target.iterdir()):
            raise FileExistsError(
                f"{str(target)!r} exists but is not a complete Fashion-MNIST folder; remove it or choose "
                "another cache folder"
            )
        queries, gallery = benchmark_split(root, n_queries=n_queries, n_gallery=n_gallery, seed=seed)
        count = len(queries) + len(gallery)
        if on_write is not None:
            on_write("writing", count, target)
        base.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".fashion-mnist-", dir=base))
        try:
            os.chmod(staging, default_mode(folder=True))
            _write_part(staging / "queries", queries)
            _write_part(staging / "gallery", gallery)
            (staging / _MARKER).write_text(json.dumps(payload, sort_keys=True), encoding="utf-8")
            try:
                os.replace(staging, target)
            except OSError:
                if not target.joinpath(_MARKER).is_file():
                    raise
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        if on_write is not None:
            on_write("written", count, target)
    query_folder = load_image_folder(target / "queries")
    gallery_folder = load_image_folder(target / "gallery")
    return QueryGallerySplit(
        query_paths=query_folder.paths,
        query_labels=query_folder.labels,
        gallery_paths=gallery_folder.paths,
        gallery_labels=gallery_folder.labels,
    )
