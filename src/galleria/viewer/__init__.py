"""Looking at results: side-by-side plain and re-ranked searches, thumbnails, uploaded query images.

The pieces ``galleria serve`` (:mod:`galleria.web`) and the HTML evaluation report are made of; they
hold the logic, the web app only routes requests to them.
"""

from __future__ import annotations

from galleria.viewer.compare import (
    GalleryLabels,
    RankedItem,
    SearchSettings,
    SideBySide,
    compare_search,
    rank_changes,
)
from galleria.viewer.thumbnails import ThumbnailCache, make_thumbnail
from galleria.viewer.uploads import UploadError, decode_upload

__all__ = [
    "GalleryLabels",
    "RankedItem",
    "SearchSettings",
    "SideBySide",
    "ThumbnailCache",
    "UploadError",
    "compare_search",
    "decode_upload",
    "make_thumbnail",
    "rank_changes",
]
