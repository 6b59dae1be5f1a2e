"""Curating a collection: duplicate groups (and, above them, a map of the gallery).

Built on the gallery's neighbor graph (:func:`galleria.neighbor_graph`): nothing here makes an
n × n matrix.
"""

from __future__ import annotations

from galleria.curation.dedup import (
    DEFAULT_THRESHOLDS,
    KEEP_RULES,
    DuplicateGroup,
    duplicate_groups,
    find_duplicates,
)

__all__ = ["DEFAULT_THRESHOLDS", "KEEP_RULES", "DuplicateGroup", "duplicate_groups", "find_duplicates"]
