"""The browse page: ``GET /``, the gallery grid (``folder=``, ``name=``, ``page=``).

With a query in the address (``path=``, ``text=`` or ``upload=``) the same address shows that
query's results (:func:`galleria.web.routes.search.search_view`); the settings in the address
(``k``, ``expand``, ``rerank``...) are read for both, a bad one named in a 400.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from galleria.web._site import QUERY_KEYS, SETTING_KEYS, Renderer, Site
from galleria.web.routes._grid import browse_view
from galleria.web.routes.search import search_view

__all__ = ["browse_router"]


def browse_router(site: Site, render: Renderer) -> APIRouter:
    """``GET /`` (see the module docstring)."""
    router = APIRouter()

    @router.get("/", response_class=HTMLResponse)
    async def index(request: Request) -> HTMLResponse:
        """The gallery to browse; with ``path=``, ``text=`` or ``upload=``, that query's results."""
        params = request.query_params
        sent = {key: params[key] for key in SETTING_KEYS if key in params}
        error: str | None = None
        status = 200
        settings = site.initial
        try:
            settings = site.settings_from(sent)
        except ValueError as problem:
            error, status = str(problem), 400
        queries = {key: params[key] for key in QUERY_KEYS if params.get(key)}
        if not queries:
            return browse_view(
                site, render, request, error=error, status=status, sent=sent, settings=settings
            )
        return await search_view(site, render, request, queries, settings, sent, error, status)

    return router
