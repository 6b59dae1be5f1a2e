"""The demo's data: scikit-learn's 1,797 handwritten digits, written once as an image folder.

``sklearn.datasets.load_digits`` ships 1,797 real 8×8 scans of handwritten digits (ten classes, about
180 each) inside scikit-learn itself, so no download is needed. :func:`digits_folder` writes them as
PNG files in the labelled layout ``<cache>/digits/<label>/<id>.png`` (``id`` is the digit's row in
``load_digits``, zero-padded to four places), so the demo runs the real path: files on disk →
threaded decoding → embedder → index.

Each image is the 8×8 scan upscaled ×4 to 32×32 with nearest-neighbour sampling (every original
pixel becomes a 4×4 block, so nothing is invented and the 8×8 scan is exactly recoverable), its
intensities 0…16 mapped linearly to 0…255 (ink bright on a black background, as in the data), and
stored as RGB with three equal channels.

The folder is written to a temporary sibling and renamed into place, so it is either complete or
absent; a marker file records the image count and format, and a second call returns at once.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from galleria._files import default_mode

__all__ = [
    "DIGITS_COUNT",
    "DIGITS_IMAGE_SIZE",
    "MARKER_NAME",
    "default_cache_dir",
    "digits_folder",
]

#: Number of images in scikit-learn's digits data.
DIGITS_COUNT = 1797
#: Side of the written PNG images, in pixels.
DIGITS_IMAGE_SIZE = 32
#: Name of the marker file that says a digits folder is complete.
MARKER_NAME = ".galleria-digits.json"
_FORMAT_VERSION = 1
_SCALE = DIGITS_IMAGE_SIZE // 8


def default_cache_dir() -> Path:
    """The folder galleria caches data in.

    ``$GALLERIA_CACHE_DIR`` if set (used as it is); otherwise the platform's user cache folder with
    ``galleria`` appended: ``%LOCALAPPDATA%`` on Windows, ``~/Library/Caches`` on macOS, and
    ``$XDG_CACHE_HOME`` (default ``~/.cache``) elsewhere.

    Examples
    --------
    >>> import os
    >>> os.environ["GALLERIA_CACHE_DIR"] = "/tmp/galleria-cache"
    >>> str(default_cache_dir())
    '/tmp/galleria-cache'
    >>> del os.environ["GALLERIA_CACHE_DIR"]
    """
    override = os.environ.get("GALLERIA_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "galleria"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "galleria"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "galleria"


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError as error:  # pragma: no cover - the demo extra is installed in tests
        raise ImportError(
            "the digits data needs scikit-learn; install the demo extra: pip install -e '.[demo]'"
        ) from error
    data = load_digits()
    return np.asarray(data.images), np.asarray(data.target)


def _marker_payload() -> dict[str, int]:
    return {"count": DIGITS_COUNT, "image_size": DIGITS_IMAGE_SIZE, "version": _FORMAT_VERSION}


def _is_complete(folder: Path) -> bool:
    try:
        recorded = json.loads((folder / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(recorded == _marker_payload())


def _digit_rgb(image: np.ndarray) -> np.ndarray:
    gray = np.rint(np.clip(image, 0, 16) * (255.0 / 16.0)).astype(np.uint8)
    big = np.kron(gray, np.ones((_SCALE, _SCALE), dtype=np.uint8))
    return np.repeat(big[:, :, None], 3, axis=2)


def _write_digits(target: Path, images: np.ndarray, targets: np.ndarray) -> None:
    for label in range(10):
        (target / str(label)).mkdir()
    for row, (image, label) in enumerate(zip(images, targets, strict=True)):
        Image.fromarray(_digit_rgb(image), mode="RGB").save(target / str(int(label)) / f"{row:04d}.png")
    (target / MARKER_NAME).write_text(json.dumps(_marker_payload(), sort_keys=True), encoding="utf-8")


def digits_folder(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the folder of digit PNGs, writing it first if it is not there yet.

    Parameters
    ----------
    cache_dir : str or os.PathLike, optional
        The cache folder; the digits go in its ``digits`` sub-folder. Defaults to
        :func:`default_cache_dir` (``$GALLERIA_CACHE_DIR`` or the platform cache folder).

    Returns
    -------
    pathlib.Path
        ``<cache_dir>/digits``, a labelled image folder (``<label>/<id>.png``, 1,797 images).

    Raises
    ------
    ImportError
        If scikit-learn (the ``demo`` extra) is not installed.
    TypeError
        If ``cache_dir`` is not a path.
    NotADirectoryError
        If ``cache_dir`` is a file.
    FileExistsError
        If ``<cache_dir>/digits`` exists but is not a complete galleria digits folder (it is left alone).

    Examples
    --------
    >>> import tempfile
    >>> folder = digits_folder(tempfile.mkdtemp())
    >>> sorted(p.name for p in folder.iterdir() if p.is_dir())[:3]
    ['0', '1', '2']
    """
    if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"cache_dir must be a str or os.PathLike path, got {type(cache_dir).__name__}")
    root = default_cache_dir() if cache_dir is None else Path(os.fspath(cache_dir)).expanduser()
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"cache folder {str(root)!r} is not a directory")
    target = root / "digits"
    if _is_complete(target):
        return target
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(
            f"{str(target)!r} exists but is not a complete galleria digits folder (no valid {MARKER_NAME}); "
            "remove it or choose another cache folder"
        )
    images, targets = _load_digits()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".digits-", dir=root))
    try:
        os.chmod(staging, default_mode(folder=True))  # mkdtemp makes it private (0o700); a cache need not be
        _write_digits(staging, images, targets)
        try:
            os.replace(staging, target)  # atomic; succeeds onto a missing or empty folder
        except OSError:
            if not _is_complete(target):  # another process did not finish it first
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
