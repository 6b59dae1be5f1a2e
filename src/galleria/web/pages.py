"""Deprecated: the pages moved to :mod:`galleria.web.routes` (one router per page) and
:mod:`galleria.web._site` (galleria 0.2.0); removed in galleria 0.4.0."""

from __future__ import annotations

import warnings
from typing import Any

from galleria.web._site import SETTING_KEYS, UPLOAD_GONE, Site, page_renderer
from galleria.web.routes.evaluation import EVAL_PAGE_SIZE

__all__ = ["EVAL_PAGE_SIZE", "SETTING_KEYS", "UPLOAD_GONE", "Site", "add_pages"]

warnings.warn(
    "galleria.web.pages is deprecated and is removed in galleria 0.4.0: "
    "use galleria.web.create_app, or the routers of galleria.web.routes",
    DeprecationWarning,
    stacklevel=2,
)


def add_pages(app: Any, site: Site) -> None:
    """Register the page routes of ``site`` on ``app`` (browse, search and the evaluation pages)."""
    from galleria.web.routes import browse_router, evaluation_router, search_router

    render = page_renderer(site)
    app.state.render_page = render
    for router in (browse_router(site, render), search_router(site, render), evaluation_router(site, render)):
        app.include_router(router)
