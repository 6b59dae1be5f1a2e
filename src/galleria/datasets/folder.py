"""Image folders on disk: listing images, reading ``root/<label>/<image>`` trees, query/gallery splits.

A labelled image folder holds one sub-folder per label, with the label's images directly inside it::

    root/
      cat/001.jpg  cat/002.png ...
      dog/001.jpg ...

Hidden files and folders (names starting with ``.``) are ignored, and so are files whose extension is
not in :data:`IMAGE_EXTENSIONS` (compared case-insensitively). Paths are returned as ``str`` in sorted
order, so a listing is reproducible across platforms and runs.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from galleria._validation import check_positive_int, is_int

__all__ = [
    "IMAGE_EXTENSIONS",
    "ImageFolder",
    "QueryGallerySplit",
    "list_images",
    "load_image_folder",
    "stratified_split",
]

#: File extensions (lower case, with the dot) treated as images.
IMAGE_EXTENSIONS: tuple[str, ...] = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")


def _is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_EXTENSIONS and not path.name.startswith(".") and path.is_file()


def _check_folder(name: str, root: Any) -> Path:
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike path, got {root!r} ({type(root).__name__})")
    folder = Path(os.fspath(root))
    if not folder.exists():
        raise FileNotFoundError(f"image folder {os.fspath(root)!r} does not exist")
    if not folder.is_dir():
        raise NotADirectoryError(f"image folder {os.fspath(root)!r} is not a directory")
    return folder


def _walk(folder: Path, recursive: bool, visited: set[str] | None = None) -> tuple[list[str], list[str]]:
    """The image files under ``folder`` and the symlinked folders not followed.

    Sub-folders (hidden ones excepted) are descended into, symbolic links to folders included, but
    each real folder is visited once: a link to a folder already visited (a loop, or a second link
    to the same place) is not followed again and is returned in the second list instead.
    ``visited`` (real paths) is shared between calls that must not list a folder twice.
    """
    found: list[str] = []
    repeated: list[str] = []
    visited = set() if visited is None else visited
    real_root = os.path.realpath(folder)
    if real_root in visited:
        return found, [str(folder)]
    visited.add(real_root)
    for current, dirnames, filenames in os.walk(folder, followlinks=True):
        kept = []
        for name in sorted(d for d in dirnames if not d.startswith(".")) if recursive else []:
            real = os.path.realpath(os.path.join(current, name))
            if real in visited:
                repeated.append(os.path.join(current, name))
                continue
            visited.add(real)
            kept.append(name)
        dirnames[:] = kept
        for filename in filenames:
            candidate = Path(current) / filename
            if _is_image(candidate):
                found.append(str(candidate))
    return sorted(found), sorted(repeated)


def _warn_repeated(repeated: list[str]) -> None:
    for link in repeated:
        warnings.warn(
            f"not following {link!r}: it leads to a folder already listed (a symbolic link loop or a "
            "second link to the same folder)",
            RuntimeWarning,
            stacklevel=3,
        )


def list_images(root: str | os.PathLike[str], *, recursive: bool = True) -> list[str]:
    """List the image files under a folder, sorted, for indexing an unlabelled gallery.

    Sub-folders are walked as :func:`load_image_folder` walks a label folder: hidden ones are
    skipped, symbolic links to folders are followed once, and a link to a folder already listed
    (a loop) is reported with a RuntimeWarning rather than followed again.

    Parameters
    ----------
    root : str or os.PathLike
        The folder to scan.
    recursive : bool
        Whether to descend into sub-folders (hidden ones are skipped).

    Returns
    -------
    list of str
        The image paths (``root`` joined with the relative path), sorted.

    Raises
    ------
    FileNotFoundError, NotADirectoryError
        If ``root`` is missing or not a folder.
    ValueError
        If the folder is empty or holds no file with an image extension.

    Warns
    -----
    RuntimeWarning
        For every symbolic link to a folder that was already listed.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (root / "b.png").write_bytes(b""); _ = (root / "a.JPG").write_bytes(b"")
    >>> [pathlib.Path(p).name for p in list_images(root)]
    ['a.JPG', 'b.png']
    """
    folder = _check_folder("root", root)
    if not any(folder.iterdir()):
        raise ValueError(f"image folder {os.fspath(root)!r} is empty")
    found, repeated = _walk(folder, recursive)
    _warn_repeated(repeated)
    if not found:
        raise ValueError(_no_images_message(root))
    return found


def _no_images_message(root: str | os.PathLike[str]) -> str:
    return f"image folder {os.fspath(root)!r} holds no images (extensions: {', '.join(IMAGE_EXTENSIONS)})"


@dataclass(frozen=True)
class QueryGallerySplit:
    """A split of a labelled image folder into query images and the gallery they are searched in.

    No image is in both parts, so an evaluation on a split has no self-matches.
    """

    query_paths: list[str]
    query_labels: list[str]
    gallery_paths: list[str]
    gallery_labels: list[str]

    @property
    def gallery_label_of(self) -> dict[str, str]:
        """Gallery path → label, the mapping the metrics take."""
        return dict(zip(self.gallery_paths, self.gallery_labels, strict=True))


@dataclass(frozen=True)
class ImageFolder:
    """A labelled image folder: every image's path and its label (the name of its sub-folder).

    Build one with :func:`load_image_folder`.
    """

    root: str
    paths: list[str]
    labels: list[str]

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def classes(self) -> list[str]:
        """The distinct labels, sorted."""
        return sorted(set(self.labels))

    def split(
        self, *, n_queries: int | None = None, query_fraction: float | None = None, seed: int = 0
    ) -> QueryGallerySplit:
        """Split into queries and gallery, stratified by label; see :func:`stratified_split`."""
        query_rows, gallery_rows = stratified_split(
            self.labels, n_queries=n_queries, query_fraction=query_fraction, seed=seed
        )
        return QueryGallerySplit(
            query_paths=[self.paths[i] for i in query_rows],
            query_labels=[self.labels[i] for i in query_rows],
            gallery_paths=[self.paths[i] for i in gallery_rows],
            gallery_labels=[self.labels[i] for i in gallery_rows],
        )


def load_image_folder(root: str | os.PathLike[str]) -> ImageFolder:
    """Read a ``root/<label>/<image>`` tree: every image's path and label, sorted by path.

    The label of an image is the first-level folder it lies in, however deep: ``root/cat/a.png``
    and ``root/cat/kittens/b.png`` are both ``cat``. Label folders are walked as
    :func:`list_images` walks a gallery (hidden folders skipped, symbolic links followed once), so
    ``galleria build`` and ``galleria evaluate`` see the same images. Images directly in ``root``
    have no label: they are left out with a RuntimeWarning that counts them.

    Raises
    ------
    TypeError
        If ``root`` is not a path.
    FileNotFoundError, NotADirectoryError
        If ``root`` is missing or not a folder.
    ValueError
        If ``root`` is empty, or none of its label folders holds an image.

    Warns
    -----
    RuntimeWarning
        For images directly in ``root`` (left out), and for every symbolic link to a folder
        already listed (not followed again).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("cat/1.png", "cat/small/2.png", "dog/1.png"):
    ...     (root / name).parent.mkdir(parents=True, exist_ok=True); _ = (root / name).write_bytes(b"")
    >>> folder = load_image_folder(root)
    >>> folder.labels, folder.classes
    (['cat', 'cat', 'dog'], ['cat', 'dog'])
    """
    folder = _check_folder("root", root)
    entries = sorted(folder.iterdir())
    if not entries:
        raise ValueError(f"image folder {os.fspath(root)!r} is empty")
    label_dirs = [entry for entry in entries if entry.is_dir() and not entry.name.startswith(".")]
    if not label_dirs:
        raise ValueError(
            f"image folder {os.fspath(root)!r} has no label sub-folders (expected root/<label>/<image>)"
        )
    paths: list[str] = []
    labels: list[str] = []
    repeated: list[str] = []
    visited = {os.path.realpath(folder)}
    for label_dir in label_dirs:
        found, links = _walk(label_dir, recursive=True, visited=visited)
        repeated.extend(links)
        paths.extend(found)
        labels.extend([label_dir.name] * len(found))
    _warn_repeated(repeated)
    loose = [entry for entry in entries if _is_image(entry)]
    if loose:
        warnings.warn(
            f"{len(loose)} image(s) directly in {os.fspath(root)!r} have no label folder and are left out, "
            f"e.g. {str(loose[0])!r}",
            RuntimeWarning,
            stacklevel=2,
        )
    if not paths:
        raise ValueError(_no_images_message(root) + " in its label sub-folders")
    return ImageFolder(root=os.fspath(root), paths=paths, labels=labels)


def _query_quota(class_sizes: np.ndarray, n_queries: int) -> np.ndarray:
    """Queries per class: proportional, largest remainder, every class keeping one gallery item."""
    capacity = class_sizes - 1
    exact = n_queries * class_sizes / class_sizes.sum()
    quota: np.ndarray = np.minimum(np.floor(exact).astype(np.int64), capacity)
    remainder = exact - quota
    while quota.sum() < n_queries:
        open_classes = np.flatnonzero(quota < capacity)
        # Largest remaining share first; ties go to the class listed first (stable sort).
        order = open_classes[np.argsort(-remainder[open_classes], kind="stable")]
        for cls in order[: n_queries - int(quota.sum())]:
            quota[cls] += 1
            remainder[cls] -= 1.0
    return quota


def stratified_split(
    labels: Sequence[Hashable],
    *,
    n_queries: int | None = None,
    query_fraction: float | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Split items into query rows and gallery rows, stratified by label and seeded.

    Give exactly one of ``n_queries`` (a total count) or ``query_fraction`` (a share, rounded to
    the nearest count, at least 1). The count is shared among the labels in proportion to their
    sizes (largest remainder first), and every label keeps at least one item in the gallery, so
    each query has at least one relevant gallery item. Within a label the queries are drawn at
    random with ``numpy.random.default_rng(seed)``.

    Parameters
    ----------
    labels : sequence of hashable
        One label per item.
    n_queries : int, optional
        Total number of queries, 1 ≤ n_queries ≤ len(labels) − number of labels.
    query_fraction : float, optional
        Share of items used as queries, strictly between 0 and 1.
    seed : int
        Seed of the random draw.

    Returns
    -------
    (query_rows, gallery_rows) : tuple of int64 arrays
        Sorted row numbers into ``labels``; together they cover every row once.

    Raises
    ------
    TypeError
        For a non-integer ``n_queries`` or ``seed``, or a non-numeric ``query_fraction``.
    ValueError
        If both or neither of ``n_queries`` and ``query_fraction`` are given, or a value is out of range.

    Examples
    --------
    >>> labels = ["a"] * 4 + ["b"] * 4
    >>> query_rows, gallery_rows = stratified_split(labels, n_queries=2, seed=0)
    >>> len(query_rows), len(gallery_rows), sorted(labels[i] for i in query_rows)
    (2, 6, ['a', 'b'])
    """
    if (n_queries is None) == (query_fraction is None):
        raise ValueError("give exactly one of n_queries and query_fraction")
    if not is_int(seed):
        raise TypeError(f"seed must be an integer, got {seed!r} ({type(seed).__name__})")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed!r}")
    label_list = list(labels)
    if not label_list:
        raise ValueError("labels must not be empty")
    classes = sorted(set(label_list), key=repr)
    class_of = {label: position for position, label in enumerate(classes)}
    codes = np.array([class_of[label] for label in label_list], dtype=np.int64)
    class_sizes = np.bincount(codes, minlength=len(classes))
    available = int((class_sizes - 1).sum())
    count = _query_count(n_queries, query_fraction, len(label_list))
    if count > available:
        raise ValueError(
            f"n_queries={count} is too many: {len(label_list)} images in {len(classes)} labels leave at most "
            f"{available} queries (every label keeps one gallery image)"
        )
    return _draw(codes, _query_quota(class_sizes, count), seed)


def _query_count(n_queries: int | None, query_fraction: float | None, items: int) -> int:
    """The total number of queries: ``n_queries`` checked, or ``query_fraction`` of ``items`` (at least 1)."""
    if query_fraction is not None:
        if isinstance(query_fraction, bool) or not isinstance(query_fraction, (int, float, np.floating)):
            raise TypeError(
                f"query_fraction must be a number in (0, 1), got {query_fraction!r} "
                f"({type(query_fraction).__name__})"
            )
        if not 0.0 < float(query_fraction) < 1.0:
            raise ValueError(f"query_fraction must lie strictly between 0 and 1, got {query_fraction!r}")
        return max(1, round(float(query_fraction) * items))
    return check_positive_int("n_queries", n_queries)


def _draw(codes: np.ndarray, quota: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``quota[c]`` query rows among the rows of class ``c`` (codes), class by class, seeded.

    Returns the sorted query rows and the sorted gallery rows (all the others), both int64.
    """
    rng = np.random.default_rng(seed)
    chosen: list[np.ndarray] = []
    for cls, size in enumerate(quota):
        if size:
            rows = np.flatnonzero(codes == cls)
            chosen.append(rng.choice(rows, size=int(size), replace=False))
    query_rows = np.sort(np.concatenate(chosen)).astype(np.int64)
    mask = np.ones(len(codes), dtype=bool)
    mask[query_rows] = False
    return query_rows, np.flatnonzero(mask).astype(np.int64)
