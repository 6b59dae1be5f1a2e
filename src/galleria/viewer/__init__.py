"""Looking at results: side-by-side plain and re-ranked searches, thumbnails, uploaded query images.

The pieces ``galleria serve`` (:mod:`galleria.web`) and the HTML evaluation report are made of; they
hold the logic, the web app only routes requests to them.
"""

from __future__ import annotations

from galleria.viewer.browse import BrowsePage, browse_gallery
from galleria.viewer.compare import RankedItem, SideBySide, compare_search, rank_changes
from galleria.viewer.labels import GalleryLabels
from galleria.viewer.settings import SearchSettings, search_defaults
from galleria.viewer.thumbnails import ThumbnailCache, make_thumbnail
from galleria.viewer.uploads import KeptUpload, UploadError, UploadStore, decode_upload

__all__ = [
    "BrowsePage",
    "GalleryLabels",
    "KeptUpload",
    "RankedItem",
    "SearchSettings",
    "SideBySide",
    "ThumbnailCache",
    "UploadError",
    "UploadStore",
    "browse_gallery",
    "compare_search",
    "decode_upload",
    "make_thumbnail",
    "rank_changes",
    "search_defaults",
]
