"""Tux Paint's stamps as a labelled gallery: one class per second-level folder of the stamp tree.

Debian's ``tuxpaint-stamps-default`` installs clip-art PNGs under ``/usr/share/tuxpaint/stamps``,
sorted into ``<category>/<subcategory>/`` folders (``animals/birds``, ``symbols/chess``...), some of
them with further sub-folders. :func:`load_tuxpaint_stamps` labels every PNG under a second-level
folder with that folder's ``category/subcategory`` path, keeps the classes with at least
``min_images`` images, and leaves out stamps that lie directly in a first-level folder. The images
are RGBA; the store's one image reader (:func:`galleria.images.reading.read_rgb`) composites them on
white, so nothing here decodes an image.
"""

from __future__ import annotations

import os
from pathlib import Path

from galleria._validation import check_positive_int
from galleria.datasets.folder import ImageFolder, _check_folder, _walk

__all__ = ["TUXPAINT_STAMPS", "load_tuxpaint_stamps"]

#: Where Debian's ``tuxpaint-stamps-default`` puts the stamps.
TUXPAINT_STAMPS = "/usr/share/tuxpaint/stamps"


def load_tuxpaint_stamps(
    root: str | os.PathLike[str] = TUXPAINT_STAMPS, *, min_images: int = 5
) -> ImageFolder:
    """Read the stamp tree as an :class:`~galleria.datasets.ImageFolder` labelled ``category/subcategory``.

    Parameters
    ----------
    root : str or os.PathLike
        The stamps folder (default: Debian's ``/usr/share/tuxpaint/stamps``).
    min_images : int
        Smallest class kept (default 5): a class needs images to be both a query and a match.

    Returns
    -------
    ImageFolder
        Paths sorted within each class, classes in sorted order; only ``.png`` files (the stamps'
        sound and description files are not images).

    Raises
    ------
    TypeError
        ``root`` is not a path; ``min_images`` not an int.
    FileNotFoundError, NotADirectoryError
        ``root`` is missing or not a folder (install ``tuxpaint-stamps-default``).
    ValueError
        ``min_images`` below 1, or no class has ``min_images`` images.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("animals/birds/a.png", "animals/birds/more/b.png", "animals/c.png", "food/nuts/d.png"):
    ...     (root / name).parent.mkdir(parents=True, exist_ok=True); _ = (root / name).write_bytes(b"")
    >>> load_tuxpaint_stamps(root, min_images=2).labels
    ['animals/birds', 'animals/birds']
    """
    folder = _check_folder("root", root)
    smallest = check_positive_int("min_images", min_images)
    paths: list[str] = []
    labels: list[str] = []
    visited = {os.path.realpath(folder)}
    for category in sorted(entry for entry in folder.iterdir() if _visible_dir(entry)):
        visited.add(os.path.realpath(category))
        for sub in sorted(entry for entry in category.iterdir() if _visible_dir(entry)):
            found, _ = _walk(sub, recursive=True, visited=visited)
            pngs = [path for path in found if path.lower().endswith(".png")]
            if len(pngs) >= smallest:
                paths.extend(pngs)
                labels.extend([f"{category.name}/{sub.name}"] * len(pngs))
    if not paths:
        raise ValueError(f"no stamp class under {os.fspath(root)!r} has at least {smallest} PNG images")
    return ImageFolder(root=os.fspath(root), paths=paths, labels=labels)


def _visible_dir(entry: Path) -> bool:
    return entry.is_dir() and not entry.name.startswith(".")
