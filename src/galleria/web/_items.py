"""Gallery items the page shows by their URL (stores imported from clip-retrieval): never fetched.

An item whose stored path is a URL (``scheme://...``, :func:`galleria.store._urls.is_url`) has no
file here. The server never opens or fetches it (``/thumb`` and ``/image`` answer 404), and the page
never loads it either: it shows a placeholder tile with the URL's host and file name, and a link to
the URL — only for ``http``/``https`` URLs, with ``rel="noopener noreferrer nofollow"`` — that the
user may follow. The content security policy stays ``img-src 'self' data:``: loading every listed
image from its host would make each page view reach third-party hosts (and tell them the viewer's
address), which an index of millions of web images should not do behind the user's back.

:class:`ServedLabels` keeps URL items out of the gallery root and the class folders: their relative
form is the URL itself, and they have no label.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

from galleria.store import is_url
from galleria.viewer import GalleryLabels

__all__ = ["ServedLabels", "is_url", "url_items", "url_link", "url_name"]

#: The URL schemes the page links to; any other URL is shown as text only.
LINKED_SCHEMES = frozenset({"http", "https"})


def url_items(paths: Sequence[str]) -> frozenset[str]:
    """The URL items among ``paths`` (a substring test first: a million file paths take ~0.1 s)."""
    return frozenset(path for path in paths if "://" in path and is_url(path))


def url_link(path: str) -> str | None:
    """``path`` if it is an ``http``/``https`` URL with a host, to link to; None for anything else.

    Examples
    --------
    >>> url_link("https://example.org/a.jpg"), url_link("javascript://x/%0aalert(1)"), url_link("/g/a.png")
    ('https://example.org/a.jpg', None, None)
    """
    if not is_url(path):
        return None
    try:
        parts = urlsplit(path)
    except ValueError:
        return None
    if parts.scheme.lower() not in LINKED_SCHEMES or not parts.hostname:
        return None
    return path


def url_name(path: str) -> str:
    """A URL item's short name: its host and last path segment (the tile's caption).

    Examples
    --------
    >>> url_name("https://example.org/img/3.jpg?size=large")
    'example.org · 3.jpg'
    """
    try:
        parts = urlsplit(path)
    except ValueError:
        return path[:80]
    last = unquote(parts.path.rstrip("/").rsplit("/", 1)[-1])[:60]
    host = (parts.hostname or parts.scheme)[:60]
    return f"{host} · {last}" if last else host


class ServedLabels(GalleryLabels):
    """:class:`~galleria.viewer.GalleryLabels` whose root and class folders are the files' alone;
    a URL item's relative form is its URL, and it has no label."""

    def __init__(self, paths: Sequence[str], root: str | None = None) -> None:
        paths = list(paths)
        self._urls = url_items(paths)
        super().__init__([path for path in paths if path not in self._urls] if self._urls else paths, root)
        self.paths = paths

    def relative(self, path: str) -> str:
        """``path`` relative to the root (a URL item: its URL); KeyError for a path not in the gallery."""
        return path if path in self._urls else super().relative(path)

    def path_of(self, relative: str) -> str | None:
        """The gallery path whose relative form is exactly ``relative`` (a URL item's: its URL)."""
        return relative if relative in self._urls else super().path_of(relative)

    def label_of(self, path: str) -> str | None:
        """The class of a gallery path (None for a URL item, and without class folders)."""
        return None if path in self._urls else super().label_of(path)

    def is_url(self, path: str) -> bool:
        """Whether ``path`` is one of this gallery's URL items."""
        return path in self._urls
