"""The boundary of what ``galleria serve`` reads: regular files whose real path lies under one root.

The root is the folder the user names (``--root``), else the folder the store's images share. Every
request resolves the stored path again (symlinks followed, then checked), so a link re-pointed after the
build, a relative path climbing out with ``..``, or a listed ``/etc/passwd`` is refused; a stored path is
never resolved against the server's working directory. The file is opened without following a final
symlink and without blocking (a FIFO or device is refused by ``fstat``), and only its decoded pixels are
ever sent. A URL item (a store imported from clip-retrieval) is never opened nor fetched: it takes no
part in finding the root, and reading it is refused; a store of URL items only serves no file.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Sequence
from typing import IO

from galleria.store import is_url
from galleria.viewer.labels import all_plain, common_folder

__all__ = ["GalleryFiles", "NotServedError", "gallery_root"]

_LOG = logging.getLogger("galleria.web")
#: Refused paths remembered so that each is logged once (bounded).
_MAX_LOGGED = 10_000


class NotServedError(LookupError):
    """A stored path that is not a regular file under the gallery root (answered with a 404)."""


def gallery_root(paths: Sequence[str], root: str | os.PathLike[str] | None = None) -> str:
    """The real path of the folder ``galleria serve`` serves: ``root``, else the images' common folder.

    Raises
    ------
    ValueError
        If ``root`` is not an existing folder; or, without ``root``, if the store holds a relative
        path, or its images share no folder below the file-system root (then ``root`` is needed).

    Examples
    --------
    >>> gallery_root(["/g/a/1.png", "/g/b/2.png"]) == os.path.realpath("/g")
    True
    >>> gallery_root(["/etc/passwd", "/g/b/2.png"])
    Traceback (most recent call last):
    ...
    ValueError: the store's images share no folder below '/' (e.g. '/etc/passwd' and '/g/b/2.png'); \
start galleria serve with --root FOLDER (create_app(root=...)) to name the folder to serve
    """
    if root is not None:
        name = os.fspath(root)
        if not isinstance(name, str) or not name or not os.path.isdir(name):
            raise ValueError(f"root must be an existing folder, got {root!r}")
        return os.path.realpath(name)
    hint = "start galleria serve with --root FOLDER (create_app(root=...)) to name the folder to serve"
    if not paths:
        raise ValueError(f"the store holds no image; {hint}")
    relative = None if all_plain(paths) else next((path for path in paths if not os.path.isabs(path)), None)
    if relative is not None:
        raise ValueError(f"the store holds a relative path ({relative!r}); {hint}")
    folder = os.path.dirname(paths[0]) if len(paths) == 1 else common_folder(paths)
    if os.path.dirname(folder) == folder:  # '/' (or a drive's root)
        other = next((p for p in paths[1:] if os.path.commonpath([paths[0], p]) == folder), None)
        example = f"{paths[0]!r}" + ("" if other is None else f" and {other!r}")
        raise ValueError(f"the store's images share no folder below {folder!r} (e.g. {example}); {hint}")
    return os.path.realpath(folder)


class GalleryFiles:
    """Open gallery files for reading, only under :attr:`root` (see :func:`gallery_root`).

    Parameters
    ----------
    paths : sequence of str
        The store's paths (used to find the root when ``root`` is None).
    root : str, os.PathLike or None
        The folder to serve; relative stored paths are taken relative to it.
    """

    def __init__(self, paths: Sequence[str], root: str | os.PathLike[str] | None = None) -> None:
        files = [path for path in paths if "://" not in path or not is_url(path)]
        #: The served folder's real path; None for a store of URL items only, given no ``root``.
        self.root: str | None = None if (paths and not files and root is None) else gallery_root(files, root)
        self._base = self.root if root is None else os.path.abspath(os.fspath(root))
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    def _refuse(self, path: str, why: str) -> NotServedError:
        with self._lock:
            first = path not in self._logged
            if first and len(self._logged) < _MAX_LOGGED:
                self._logged.add(path)
        if first:
            _LOG.warning("not served: %r (%s; gallery root %r)", path, why, self.root)
        return NotServedError(f"not an image of this gallery: {why}")

    def real_path(self, path: str) -> str:
        """The real path of stored ``path`` if it lies under the root; NotServedError otherwise."""
        if is_url(path):
            raise self._refuse(path, "a URL-only item (galleria never fetches it)")
        if self.root is None or self._base is None:
            raise self._refuse(path, "this gallery serves no file")
        full = path if os.path.isabs(path) else os.path.join(self._base, path)
        real = os.path.realpath(full)
        try:
            inside = os.path.commonpath([real, self.root]) == self.root
        except ValueError:  # another drive
            inside = False
        if not inside:
            raise self._refuse(path, "outside the gallery root")
        return real

    def open(self, path: str) -> IO[bytes]:
        """A binary file object of stored ``path``: a regular file under the root (NotServedError else)."""
        real = self.real_path(path)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
        try:
            descriptor = os.open(real, flags)
        except OSError as error:
            raise self._refuse(path, error.strerror or "cannot be opened") from None
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise self._refuse(path, "not a regular file")
            return os.fdopen(descriptor, "rb")
        except BaseException:
            os.close(descriptor)
            raise
