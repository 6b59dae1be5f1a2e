"""The gallery's map on the page: ``/map`` (a canvas), ``/api/map`` (the points), items and regions.

``GET /api/map`` answers 202 (``{"status": "computing"}``) while the map is being computed in the
background (:func:`galleria.store.gallery_map.gallery_map`, once per gallery, read from ``STORE.map``
when it is there), then the map's first level: ``{"n", "method", "placed", "sampled", "labels":
[names], "shown", "rows": [store row per point], "label": [index per point], "xy": [x0, y0, x1, y1,
...]}`` with coordinates scaled to integers in [0, 65535] (one scale for both axes). A map of at most
:data:`MAP_LEVEL` points sends them all (``rows`` is then 0..n-1); a larger one sends a seeded sample
of that many, the same every time (rows in store order), so the page never receives a million points
at once. ``GET /api/map/view?x0=&y0=&x1=&y1=`` answers the points of a rectangle (map units) the same
way, ``{"total", "shown", "rows", "label", "xy"}``: all of them when at most :data:`MAP_LEVEL` lie
inside, else the first :data:`MAP_LEVEL` of that same seeded order — zooming in shows more and more
of the points, down to every one. ``GET /api/map/groups`` colours by duplicate group, only the rows in
a group (``{"groups", "rows", "group"}``, largest group first; 202 while computing).
``GET /api/map/item/{row}`` names one point's image; ``GET /api/map/region?x0=&y0=&x1=&y1=&page=``
lists the images inside a rectangle (map units), a page of :data:`REGION_PAGE_SIZE` at a time. The
same rectangle filters the browse grid, ``/?map=x0,y0,x1,y1`` (:func:`parse_rectangle`,
:func:`rows_inside`); the map page links there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from galleria.datasets.labels import labels_under
from galleria.store import is_url
from galleria.viewer import GalleryLabels
from galleria.web._background import Background
from galleria.web._items import url_link

__all__ = [
    "MAP_LEVEL",
    "MAP_SCALE",
    "REGION_PAGE_SIZE",
    "item_of",
    "map_points",
    "map_router",
    "parse_rectangle",
    "point_labels",
    "rows_inside",
]

#: Map coordinates are sent as integers in [0, MAP_SCALE].
MAP_SCALE = 65535
#: Images listed per page of a region.
REGION_PAGE_SIZE = 48
#: Most points one answer of the map sends (the whole map's level, or one rectangle's).
MAP_LEVEL = 40_000


def point_labels(store: Any, labels: GalleryLabels) -> tuple[list[str], list[int]]:
    """Label names and each image's label index: its first folder under the store's labels' root
    (``store.labels_root``), else its class folder under the gallery root, else one label ``""``."""
    paths = list(store.paths)
    root = getattr(store, "labels_root", None)
    if root:
        names, _ = labels_under(paths, root)
    else:
        names = [labels.label_of(path) or "" for path in paths]
    order = sorted(set(names))
    index = {name: i for i, name in enumerate(order)}
    return order, [index[name] for name in names]


def scaled(coordinates: np.ndarray) -> np.ndarray:
    """Coordinates as integers in [0, MAP_SCALE], one scale for both axes (the map keeps its shape)."""
    if coordinates.shape[0] == 0:
        return np.zeros((0, 2), np.int64)
    low = coordinates.min(axis=0)
    span = float((coordinates.max(axis=0) - low).max()) or 1.0
    out: np.ndarray = np.rint((coordinates - low) / span * MAP_SCALE).astype(np.int64)
    return out


def item_of(labels: GalleryLabels, path: str) -> dict[str, str | None]:
    """One image as the map and the region list name it: its path relative to the root and its links
    (a URL item has no thumbnail, and ``url``: its URL when it is an http(s) one, never fetched)."""
    shown = labels.relative(path)
    address = quote(shown)
    if is_url(path):
        return {
            "path": shown,
            "thumb": None,
            "url": url_link(path),
            "view": "/view/" + address,
            "search": "/?path=" + quote(shown, safe="/"),
        }
    return {
        "path": shown,
        "thumb": "/thumb/" + address,
        "view": "/view/" + address,
        "search": "/?path=" + quote(shown, safe="/"),
    }


def _integer(name: str, text: str | None, default: int | None = None) -> int:
    """An ASCII-digit query parameter of at most 9 digits; ValueError naming it otherwise."""
    if text is None:
        if default is None:
            raise ValueError(f"{name} is required")
        return default
    if not (0 < len(text) <= 9 and text.isascii() and text.isdigit()):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ValueError(f"{name} must be a non-negative integer, got {shown!r}")
    return int(text)


def parse_rectangle(text: str) -> tuple[int, int, int, int]:
    """A rectangle of the map from an address's ``map=x0,y0,x1,y1`` (map units, integers in
    [0, :data:`MAP_SCALE`]); ValueError naming the parameter and the value otherwise.

    Examples
    --------
    >>> parse_rectangle("10,0,65535,20")
    (10, 0, 65535, 20)
    >>> parse_rectangle("1,2,3")
    Traceback (most recent call last):
    ...
    ValueError: map must be four integers x0,y0,x1,y1 from 0 to 65535, got '1,2,3'
    """
    shown = text if len(text) <= 40 else text[:37] + "..."
    problem = ValueError(f"map must be four integers x0,y0,x1,y1 from 0 to {MAP_SCALE}, got {shown!r}")
    parts = text.split(",") if len(text) <= 4 * 6 else []
    if len(parts) != 4 or not all(0 < len(part) <= 5 and part.isascii() and part.isdigit() for part in parts):
        raise problem
    x0, y0, x1, y1 = (int(part) for part in parts)
    if max(x0, y0, x1, y1) > MAP_SCALE:
        raise problem
    return x0, y0, x1, y1


def rows_inside(points: np.ndarray, corners: tuple[int, int, int, int]) -> np.ndarray:
    """The store rows of the points inside the rectangle ``corners`` (both corners included), in order."""
    x0, y0, x1, y1 = corners
    x_low, x_high = sorted((x0, x1))
    y_low, y_high = sorted((y0, y1))
    inside: np.ndarray = np.flatnonzero(
        (points[:, 0] >= x_low)
        & (points[:, 0] <= x_high)
        & (points[:, 1] >= y_low)
        & (points[:, 1] <= y_high)
    )
    return inside


def map_points(store: Any, labels: GalleryLabels, background: Background) -> tuple[str, Any]:
    """The map's state: ``("ready", {"points", "body"})``, ``("computing", None)`` (its computation
    started in the background) or ``("failed", message)``."""
    return background.get(("map", len(store)), lambda: _map_body(store, labels))


def map_router(
    store: Any, labels: GalleryLabels, background: Background, render: Callable[..., Any]
) -> APIRouter:
    """The routes of the map (see the module docstring)."""
    router = APIRouter()

    def current() -> tuple[str, Any]:
        return map_points(store, labels, background)

    def pending(state: str, value: Any) -> JSONResponse:
        if state == "failed":
            return JSONResponse({"detail": f"the map could not be computed: {value}"}, status_code=500)
        return JSONResponse({"status": "computing"}, status_code=202, headers={"Retry-After": "2"})

    @router.get("/map", response_class=HTMLResponse)
    def map_page(request: Request) -> Any:
        """The map: every image a point, coloured by label or duplicate group."""
        current()  # start computing while the page loads
        return render(request, "map.html", {})

    @router.get("/api/map")
    def api_map() -> Response:
        """The map's points (202 while it is being computed)."""
        state, value = current()
        if state != "ready":
            return pending(state, value)
        return Response(value["body"], media_type="application/json", headers={"Cache-Control": "no-cache"})

    answered: dict[str, Any] = {}

    @router.get("/api/map/groups")
    def api_groups() -> Response:
        """The rows in a duplicate group and each one's group, largest group first (202 while computing)."""
        state, value = background.get(("duplicates", len(store), None), lambda: _groups(store, None))
        if state != "ready":
            return pending(state, value)
        if answered.get("report") is not value:  # once per report, not per request
            answered["body"] = _groups_body(labels.paths, value)
            answered["report"] = value
        return Response(answered["body"], media_type="application/json")

    @router.get("/api/map/view")
    def api_view(request: Request) -> Response:
        """The points inside a rectangle of the map: all, or the first :data:`MAP_LEVEL` of a seeded order."""
        try:
            corners, _ = _region_request(request.query_params)
        except ValueError as error:
            return JSONResponse({"detail": str(error)}, status_code=400)
        state, value = current()
        if state != "ready":
            return pending(state, value)
        return Response(
            json.dumps(_level(value, corners), separators=(",", ":")), media_type="application/json"
        )

    @router.get("/api/map/item/{row}")
    def api_item(row: str) -> JSONResponse:
        """The image of one point: its path relative to the gallery root and its links."""
        try:
            number = _integer("row", row)
        except ValueError as error:
            return JSONResponse({"detail": str(error)}, status_code=400)
        paths = labels.paths
        if number >= len(paths):
            return JSONResponse({"detail": f"no point {number} on this map"}, status_code=404)
        return JSONResponse({"row": number, **item_of(labels, paths[number])})

    @router.get("/api/map/region")
    def api_region(request: Request) -> JSONResponse:
        """The images inside a rectangle of the map (map units, both corners included), in pages."""
        try:
            corners, page = _region_request(request.query_params)
        except ValueError as error:
            return JSONResponse({"detail": str(error)}, status_code=400)
        state, value = current()
        if state != "ready":
            return pending(state, value)
        return JSONResponse(_region_page(value["points"], corners, page, labels.paths, labels))

    return router


def _map_body(store: Any, labels: GalleryLabels) -> dict[str, Any]:
    """The map's points (scaled), their seeded order and labels, and the JSON body ``/api/map`` sends
    (computed once per gallery)."""
    from galleria.store.gallery_map import gallery_map

    result = gallery_map(store)
    points = scaled(result.coordinates)
    names, index = point_labels(store, labels)
    count = points.shape[0]
    order = np.random.default_rng([count, 36]).permutation(count)  # which points show first
    value: dict[str, Any] = {
        "points": points,
        "order": order,
        "ranked": np.ascontiguousarray(points[order].astype(np.int32)),
        "label": np.asarray(index, dtype=np.int32),
    }
    whole = _level(value, (0, 0, MAP_SCALE, MAP_SCALE))
    body = {
        "n": count,
        "method": result.method,
        "placed": result.placed,
        "sampled": result.sampled,
        "labels": names,
        "shown": whole["shown"],
        "rows": whole["rows"],
        "label": whole["label"],
        "xy": whole["xy"],
    }
    value["body"] = json.dumps(body, separators=(",", ":")).encode()
    return value


def _level(value: dict[str, Any], corners: tuple[int, int, int, int]) -> dict[str, Any]:
    """The points inside ``corners`` a map answer sends: all of them, or the first :data:`MAP_LEVEL`
    of the map's seeded order, in store order."""
    ranked = value["ranked"]
    x0, y0, x1, y1 = corners
    x_low, x_high = sorted((x0, x1))
    y_low, y_high = sorted((y0, y1))
    inside = np.flatnonzero(
        (ranked[:, 0] >= x_low)
        & (ranked[:, 0] <= x_high)
        & (ranked[:, 1] >= y_low)
        & (ranked[:, 1] <= y_high)
    )
    rows = np.sort(value["order"][inside[:MAP_LEVEL]])
    return {
        "total": int(inside.size),
        "shown": int(rows.size),
        "rows": rows.tolist(),
        "label": value["label"][rows].tolist(),
        "xy": value["points"][rows].reshape(-1).tolist(),
    }


def _groups_body(paths: Any, report: Any) -> bytes:
    """``/api/map/groups``' answer for a duplicate report: the rows in a group, and their groups."""
    row = {path: i for i, path in enumerate(paths)}
    rows: list[int] = []
    group: list[int] = []
    for number, found in enumerate(
        getattr(report, "groups", ())
    ):  # a DuplicateReport, shared with /duplicates
        for path in getattr(found, "paths", ()):
            if path in row:
                rows.append(row[path])
                group.append(number)
    body = {"groups": len(getattr(report, "groups", ())), "rows": rows, "group": group}
    return json.dumps(body, separators=(",", ":")).encode()


def _region_request(params: Any) -> tuple[tuple[int, int, int, int], int]:
    """The rectangle's corners and the page asked for (ValueError naming a bad one)."""
    x0, y0, x1, y1 = (_integer(name, params.get(name)) for name in ("x0", "y0", "x1", "y1"))
    page = _integer("page", params.get("page"), 1)
    if page < 1:
        raise ValueError(f"page must be at least 1, got {page}")
    return (x0, y0, x1, y1), page


def _region_page(
    points: np.ndarray, corners: tuple[int, int, int, int], page: int, paths: Any, labels: GalleryLabels
) -> dict[str, Any]:
    """One page of the points inside the rectangle ``corners`` (both corners included)."""
    inside = rows_inside(points, corners)
    pages = max(1, -(-inside.size // REGION_PAGE_SIZE))
    page = min(page, pages)
    chosen = inside[(page - 1) * REGION_PAGE_SIZE : page * REGION_PAGE_SIZE]
    items = [{"row": int(row), **item_of(labels, paths[row])} for row in chosen]
    return {"total": int(inside.size), "page": page, "pages": pages, "items": items}


def _groups(store: Any, threshold: float | None) -> Any:
    from galleria.curation.dedup import duplicate_report

    return duplicate_report(store, threshold=threshold)
