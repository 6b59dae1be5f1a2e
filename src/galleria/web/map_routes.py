"""Deprecated: moved to :mod:`galleria.web.routes.map` (galleria 0.2.0); removed in galleria 0.4.0."""

from __future__ import annotations

import warnings

from galleria.web.routes.map import MAP_SCALE, REGION_PAGE_SIZE, item_of, map_router, point_labels

__all__ = ["MAP_SCALE", "REGION_PAGE_SIZE", "item_of", "map_router", "point_labels"]

warnings.warn(
    "galleria.web.map_routes is deprecated and is removed in galleria 0.4.0: "
    "import from galleria.web.routes.map",
    DeprecationWarning,
    stacklevel=2,
)
