"""Deprecated: moved to :mod:`galleria.web.routes.view` (galleria 0.2.0); this alias goes in 0.3.0."""

from __future__ import annotations

import warnings

from galleria.web.routes.view import view_router

__all__ = ["view_router"]

warnings.warn(
    "galleria.web.view_routes is deprecated: import from galleria.web.routes.view",
    DeprecationWarning,
    stacklevel=2,
)
