"""The full-size view of a gallery image: ``/view/{path}`` (zoom, and keyboard navigation).

The picture is ``/image/{path}``: the gallery image decoded by the one image reader (which applies
its EXIF orientation) and re-encoded, so a photo taken upright shows upright. The page zooms (the
buttons, ``+``/``-``/``0``, the wheel with Ctrl) and, reached from a result list, steps through
that list with ← and → (``Esc`` goes back to the list): the list is remembered by the browser
(``sessionStorage``), never by the server. Any path that is not an image of this gallery is a 404.
A URL item (:mod:`galleria.web._items`) is shown by its URL: a placeholder and a link, no picture.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from galleria.store import is_url
from galleria.viewer import GalleryLabels

__all__ = ["view_router"]


def view_router(labels: GalleryLabels, render: Callable[..., Any]) -> APIRouter:
    """The route of the full-size view (see the module docstring)."""
    router = APIRouter()

    @router.get("/view/{relative:path}", response_class=HTMLResponse)
    def view_page(request: Request, relative: str) -> Any:
        """One gallery image at full size, with zoom, its label and a link to search by it."""
        path = labels.path_of(relative)
        if path is None:
            shown = relative if len(relative) <= 80 else relative[:77] + "..."
            return render(request, "view.html", {"error": f"{shown!r} is not an image of this gallery"}, 404)
        return render(
            request,
            "view.html",
            {
                "view_path": relative,
                "view_label": labels.label_of(path),
                "url_item": is_url(path),  # shown by its URL, never fetched
                "image_src": "/image/" + quote(relative),
                "search_link": "/?path=" + quote(relative, safe="/"),
            },
        )

    return router
