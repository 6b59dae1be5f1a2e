"""Deprecated: moved to :mod:`galleria.web.routes.view` (galleria 0.2.0); removed in galleria 0.4.0."""

from __future__ import annotations

import warnings

from galleria.web.routes.view import view_router

__all__ = ["view_router"]

warnings.warn(
    "galleria.web.view_routes is deprecated and is removed in galleria 0.4.0: "
    "import from galleria.web.routes.view",
    DeprecationWarning,
    stacklevel=2,
)
