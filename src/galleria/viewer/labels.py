"""A gallery's labels as the viewer shows them: read once, looked up by path."""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["GalleryLabels", "all_plain", "common_folder"]


def _plain_absolute(path: str) -> bool:
    """Whether ``path`` is an absolute POSIX path in normal form (what ``normpath`` leaves alone)."""
    return (
        path.startswith("/")
        and "//" not in path
        and "/./" not in path
        and "/../" not in path
        and not path.endswith(("/.", "/.."))
        and (path == "/" or not path.endswith("/"))
    )


def all_plain(paths: Sequence[str]) -> bool:
    """Whether every one of ``paths`` is an absolute POSIX path in normal form, not ending in ``/``
    (one scan of their joined text; a NUL, which no POSIX path holds, separates them)."""
    if os.sep != "/" or not paths:
        return False
    text = "\0" + "\0".join(paths) + "\0"
    if text.count("\0") != len(paths) + 1 or text.count("\0/") != len(paths):
        return False
    return not any(bad in text for bad in ("//", "/./", "/../", "/.\0", "/..\0", "/\0"))


def _head(relative: str) -> tuple[str, str, str]:
    return relative.partition("/")


def common_folder(paths: Sequence[str]) -> str:
    """``os.path.commonpath(paths)``, in one pass over a million paths when they are absolute and in
    normal form (the common prefix of the smallest and the largest path, cut at a ``/``).

    Examples
    --------
    >>> common_folder(["/g/ab/1.png", "/g/a/2.png"]), common_folder(["/g/a/1.png", "/g/a/b/2.png"])
    ('/g', '/g/a')
    >>> common_folder(["/x/1.png", "/y/2.png"])
    '/'
    """
    if not all_plain(paths):
        return os.path.commonpath(list(paths))
    low, high = min(paths), max(paths)
    prefix = os.path.commonprefix([low, high])  # noqa: RUF071 - characters, cut at a "/" below
    size = len(prefix)
    if not all(len(end) == size or end[size] == "/" for end in (low, high)):
        prefix = prefix[: prefix.rfind("/")]
    return prefix.rstrip("/") or "/"


class GalleryLabels:
    """Gallery paths relative to their common root, and their class (first-level folder) if any.

    ``has_classes`` is True when every image lies in a sub-folder of the root and there are at least
    two of them. ``root`` (default: the paths' common folder) is the folder they are relative to.

    Examples
    --------
    >>> labels = GalleryLabels(["/g/cat/1.png", "/g/cat/x/2.png", "/g/dog/3.png"])
    >>> labels.root, labels.relative("/g/cat/x/2.png"), labels.label_of("/g/cat/x/2.png")
    ('/g', 'cat/x/2.png', 'cat')
    >>> labels.path_of("../etc/passwd") is None, labels.path_of("/g/dog/3.png") is None
    (True, True)
    """

    def __init__(self, paths: Sequence[str], root: str | None = None) -> None:
        paths = list(paths)
        #: The gallery paths, in the store's order.
        self.paths: list[str] = paths
        if root is not None:  # the folder the user named (``galleria serve --root``)
            self.root = root
        elif not paths:
            self.root = ""
        elif len(paths) == 1:
            self.root = os.path.dirname(paths[0])
        else:
            try:
                self.root = common_folder(paths)
            except ValueError:  # a mix of absolute and relative paths, or of drives
                self.root = ""
        root = self.root
        if root and _plain_absolute(root) and all_plain(paths):  # no relpath: 20 µs a path
            cut = 1 if root == "/" else len(root) + 1
            lead = root if root == "/" else root + "/"
            self._relative = {
                path: path[cut:] if path.startswith(lead) else self._relpath(path) for path in paths
            }
        else:
            self._relative = {path: self._relpath(path) for path in paths}
        self._by_relative = {relative: path for path, relative in self._relative.items()}
        firsts: dict[str, str] = {}  # each class name held once, however many images it has
        tops = [firsts.setdefault(head, head) for head, _, _ in map(_head, self._relative.values())]
        self.has_classes = (
            bool(tops) and all("/" in relative for relative in self._relative.values()) and len(firsts) > 1
        )
        self._labels = dict(zip(self._relative, tops, strict=True)) if self.has_classes else {}

    def _relpath(self, path: str) -> str:
        if not self.root or (os.path.isabs(self.root) and not os.path.isabs(path)):
            relative = path  # already relative to the root (never resolved against the working directory)
        else:
            relative = os.path.relpath(path, self.root)
        return relative.replace(os.sep, "/")

    def relative(self, path: str) -> str:
        """``path`` relative to the root, with ``/`` separators (KeyError for a path not in the gallery)."""
        return self._relative[path]

    def path_of(self, relative: str) -> str | None:
        """The gallery path whose relative form is exactly ``relative``; None for anything else."""
        return self._by_relative.get(relative)

    def label_of(self, path: str) -> str | None:
        """The class of a gallery path, or None without class folders."""
        return self._labels.get(path)

    def folders(self) -> dict[str, int]:
        """The class folders and how many images each holds, by name (empty without class folders)."""
        return {name: len(paths) for name, paths in self._grouped().items()}

    def paths_in(self, folder: str) -> list[str]:
        """The listed paths (:attr:`paths`, in order) of class folder ``folder`` (empty if none)."""
        return self._grouped().get(folder, [])

    def folded(self) -> list[str]:
        """Each listed path's relative form, case-folded (for a file-name filter), in :attr:`paths` order."""
        cache = self.__dict__.get("_folded_cache")
        if cache is None or cache[0] is not self.paths:
            cache = (self.paths, [self.relative(path).casefold() for path in self.paths])
            self._folded_cache = cache
        return cache[1]

    def _grouped(self) -> dict[str, list[str]]:
        """The listed paths of each class folder, by name; computed once per :attr:`paths` list."""
        cache = self.__dict__.get("_grouped_cache")
        if cache is None or cache[0] is not self.paths:
            groups: dict[str, list[str]] = {}
            for path in self.paths:
                label = self.label_of(path)
                if label is not None:
                    groups.setdefault(label, []).append(path)
            cache = (self.paths, dict(sorted(groups.items())))
            self._grouped_cache = cache
        return cache[1]
