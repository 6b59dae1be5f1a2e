"""The gallery grid (``/`` without a query), shared by the pages that fall back to it with an error.

``map=x0,y0,x1,y1`` (a rectangle drawn on ``/map``, in map units) keeps the images whose points lie
inside it, with the other filters on top; a bad rectangle is a 400 naming it, and the grid waits
for the map (503, "computing") when it is not computed yet.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse

from galleria.viewer import GalleryLabels, SearchSettings
from galleria.viewer.browse import BrowsePage, browse_gallery
from galleria.web._site import SETTING_KEYS, Renderer, Site
from galleria.web.routes.map import parse_rectangle, rows_inside

__all__ = ["browse_view", "form_error", "map_filter"]


class MapNotReady(Exception):
    """The map a ``map=`` filter needs is still being computed (or could not be)."""


def map_filter(site: Site, text: str) -> GalleryLabels:
    """The gallery's labels narrowed to the images inside the map rectangle ``text`` (``x0,y0,x1,y1``):
    ValueError for a bad rectangle, :class:`MapNotReady` while the map is not there."""
    corners = parse_rectangle(text)
    state: str
    value: Any
    state, value = ("failed", "this page has no map") if site.map_points is None else site.map_points()
    if state == "computing":
        raise MapNotReady("the map is still being computed; reload this page in a moment")
    if state != "ready":
        raise MapNotReady(f"the map could not be computed: {value}")
    paths = site.labels.paths
    narrowed = copy.copy(site.labels)  # the same lookups, only the listed paths change
    narrowed.paths = [paths[row] for row in rows_inside(value["points"], corners)]
    return narrowed


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
    """One page of the gallery grid (``folder=``, ``name=``, ``page=``, ``map=``); a bad filter is a 400."""
    region = request.query_params.get("map")
    labels = site.labels
    try:
        if region is not None:
            labels = map_filter(site, region)
        page: BrowsePage = browse_gallery(labels, request.query_params)
    except MapNotReady as problem:
        page, region = browse_gallery(site.labels, {}), None
        error, status = error or str(problem), 503
    except ValueError as problem:
        page, region = browse_gallery(site.labels, {}), None
        error, status = error or str(problem), 400
    kept = {} if region is None else {"map": region}

    def link(**changes: Any) -> str:
        return site.address({**page.query(**changes), **kept})

    def query_link(path: str) -> str:
        return site.address({"path": site.relative(path) or ""})

    context = {"page": page, "link": link, "query_link": query_link, "error": error, "map_region": region}
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
