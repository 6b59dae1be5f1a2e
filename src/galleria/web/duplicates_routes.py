"""Deprecated: moved to :mod:`galleria.web.routes.duplicates` (galleria 0.2.0); removed in galleria 0.4.0."""

from __future__ import annotations

import warnings

from galleria.web.routes.duplicates import GROUPS_PER_PAGE, duplicates_router

__all__ = ["GROUPS_PER_PAGE", "duplicates_router"]

warnings.warn(
    "galleria.web.duplicates_routes is deprecated and is removed in galleria 0.4.0: "
    "import from galleria.web.routes.duplicates",
    DeprecationWarning,
    stacklevel=2,
)
