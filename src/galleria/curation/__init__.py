"""Curating a collection: duplicate groups (and, above them, a map of the gallery).

Built on the gallery's neighbor graph (:func:`galleria.neighbor_graph`): nothing here makes an
n × n matrix.
"""

from __future__ import annotations

from galleria.curation.dedup import (
    DuplicateGroup,
    DuplicateReport,
    duplicate_groups,
    duplicate_report,
    find_duplicates,
)
from galleria.curation.keep import KEEP_RULES
from galleria.curation.threshold import THRESHOLD_BOUNDS

__all__ = [
    "KEEP_RULES",
    "THRESHOLD_BOUNDS",
    "DuplicateGroup",
    "DuplicateReport",
    "duplicate_groups",
    "duplicate_report",
    "find_duplicates",
]
