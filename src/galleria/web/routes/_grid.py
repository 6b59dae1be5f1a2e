"""The gallery grid (``/`` without a query), shared by the pages that fall back to it with an error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse

from galleria.viewer import SearchSettings
from galleria.viewer.browse import BrowsePage, browse_gallery
from galleria.web._site import SETTING_KEYS, Renderer, Site

__all__ = ["browse_view", "form_error"]


def browse_view(
    site: Site,
    render: Renderer,
    request: Request,
    *,
    error: str | None,
    status: int,
    sent: dict[str, str],
    settings: SearchSettings | None = None,
    query_text: str = "",
) -> HTMLResponse:
    """One page of the gallery grid (``folder=``, ``name=``, ``page=``); a bad filter is a 400."""
    try:
        page: BrowsePage = browse_gallery(site.labels, request.query_params)
    except ValueError as problem:
        page = browse_gallery(site.labels, {})
        error, status = error or str(problem), 400

    def link(**changes: Any) -> str:
        return site.address(page.query(**changes))

    def query_link(path: str) -> str:
        return site.address({"path": site.relative(path) or ""})

    context = {"page": page, "link": link, "query_link": query_link, "error": error}
    context.update(sent=sent, settings=settings, query_text=query_text)
    return render(request, "browse.html", context, status)


def form_error(
    site: Site,
    render: Renderer,
    request: Request,
    error: str,
    status: int,
    fields: Mapping[str, str] | None = None,
) -> HTMLResponse:
    """The gallery with ``error``; the form keeps the settings and the text that were sent."""
    fields = fields or {}
    sent = {key: fields[key] for key in SETTING_KEYS if key in fields}
    try:
        settings = site.settings_from(sent)
    except ValueError:
        settings = site.initial
    return browse_view(
        site,
        render,
        request,
        error=error,
        status=status,
        sent=sent,
        settings=settings,
        query_text=fields.get("text", ""),
    )
