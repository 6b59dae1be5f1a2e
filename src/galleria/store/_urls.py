"""Gallery items known by a URL only (an imported clip-retrieval folder): galleria never fetches them."""

from __future__ import annotations

import re

__all__ = ["is_url", "url_error"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def is_url(path: str) -> bool:
    """Whether a gallery path is a URL (``scheme://...``) rather than a file path.

    Examples
    --------
    >>> is_url("https://example.org/a.jpg"), is_url("/g/a.jpg"), is_url("C:\\\\g\\\\a.jpg")
    (True, False, False)
    """
    return bool(_SCHEME.match(path))


def url_error(path: str) -> ValueError:
    """The error for reading the pixels of a URL-only item."""
    return ValueError(
        f"{path!r} is a URL-only gallery item (imported from clip-retrieval); galleria never fetches "
        "images from the network, so it has no pixels here (search it by vector, or download the "
        "images yourself and re-import with image_path)"
    )
