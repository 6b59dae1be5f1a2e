"""Browsing a gallery: one page of its images, filtered by class folder and by a part of the file name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from galleria.viewer.labels import GalleryLabels

__all__ = ["BROWSE_PAGE_SIZE", "MAX_NAME_FILTER", "BrowsePage", "browse_gallery"]

#: Images on one page of the gallery grid.
BROWSE_PAGE_SIZE = 48
#: Longest file-name filter accepted, in characters.
MAX_NAME_FILTER = 200


@dataclass(frozen=True)
class BrowsePage:
    """One page of the gallery: its paths (store paths, in store order) and where it lies.

    ``total`` counts the images that pass the filters; ``page`` is 1-based and ``pages`` is at
    least 1 (an empty result has one, empty, page).
    """

    paths: list[str]
    total: int
    page: int
    pages: int
    folder: str
    name: str
    folders: dict[str, int]

    def query(self, **changes: Any) -> dict[str, str]:
        """The URL parameters of this view, with ``changes`` (``page=2``...) applied; empty ones left out."""
        values = {"folder": self.folder, "name": self.name, "page": self.page, **changes}
        return {
            key: str(value)
            for key, value in values.items()
            if value not in ("", None) and not (key == "page" and value == 1)
        }


def _page_number(value: Any) -> int:
    if value is None or value == "":
        return 1
    text = str(value).strip()
    if not text.isdigit() or isinstance(value, bool):
        raise ValueError(f"page must be a positive integer, got {value!r}")
    number = int(text)
    if number < 1:
        raise ValueError(f"page must be a positive integer, got {value!r}")
    return number


def browse_gallery(
    labels: GalleryLabels, params: Mapping[str, Any], *, per_page: int = BROWSE_PAGE_SIZE
) -> BrowsePage:
    """The page of ``labels``' gallery that the parameters ``folder``, ``name`` and ``page`` ask for.

    ``folder`` keeps the images of one class folder (it must be one of them); ``name`` keeps the
    images whose path relative to the gallery root contains it, ignoring case; ``page`` (from 1)
    picks the page, a page past the last giving the last.

    Raises
    ------
    ValueError
        A ``folder`` that is not a class folder of the gallery, a ``name`` over
        :data:`MAX_NAME_FILTER` characters, or a ``page`` that is not a positive integer; the
        message names the parameter and the value.

    Examples
    --------
    >>> labels = GalleryLabels(["/g/cat/a.png", "/g/cat/b.png", "/g/dog/ab.png"])
    >>> page = browse_gallery(labels, {"name": "B"})
    >>> page.paths, page.total, page.folders
    (['/g/cat/b.png', '/g/dog/ab.png'], 2, {'cat': 2, 'dog': 1})
    >>> browse_gallery(labels, {"folder": "dog"}).paths
    ['/g/dog/ab.png']
    """
    folders = labels.folders()
    folder = params.get("folder") or ""
    if not isinstance(folder, str) or (folder and folder not in folders):
        raise ValueError(f"folder must be one of the gallery's class folders, got {folder!r}")
    name = params.get("name") or ""
    if not isinstance(name, str):
        raise ValueError(f"name must be text, got {name!r}")
    name = name.strip()
    if len(name) > MAX_NAME_FILTER:
        raise ValueError(f"name must be at most {MAX_NAME_FILTER} characters, got {len(name)}")
    page = _page_number(params.get("page"))
    needle = name.casefold()
    chosen: list[str] = labels.paths_in(folder) if folder else labels.paths  # indexed once, not scanned
    if needle:
        chosen = [
            path
            for path, folded in zip(labels.paths, labels.folded(), strict=True)
            if needle in folded and (not folder or labels.label_of(path) == folder)
        ]
    pages = max(1, -(-len(chosen) // per_page))
    page = min(page, pages)
    start = (page - 1) * per_page
    return BrowsePage(
        paths=chosen[start : start + per_page],
        total=len(chosen),
        page=page,
        pages=pages,
        folder=folder,
        name=name,
        folders=folders,
    )
