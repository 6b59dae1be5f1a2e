"""A gallery's labels as the viewer shows them: read once, looked up by path."""

from __future__ import annotations

import os
from collections.abc import Sequence


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
                self.root = os.path.commonpath(paths)
            except ValueError:  # a mix of absolute and relative paths, or of drives
                self.root = ""
        self._relative = {path: self._relpath(path) for path in paths}
        self._by_relative = {relative: path for path, relative in self._relative.items()}
        parts = [relative.split("/") for relative in self._relative.values()]
        self.has_classes = bool(parts) and all(len(p) > 1 for p in parts) and len({p[0] for p in parts}) > 1
        self._labels = (
            {path: relative.split("/")[0] for path, relative in self._relative.items()}
            if self.has_classes
            else {}
        )

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
        counts: dict[str, int] = {}
        for label in self._labels.values():
            counts[label] = counts.get(label, 0) + 1
        return dict(sorted(counts.items()))
