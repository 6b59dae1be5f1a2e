"""The search page: ``/`` with a query (``path=``, ``text=`` or ``upload=``), the search form
(``POST /``, which keeps an upload and redirects to the search's address) and ``/upload/{id}.jpg``
(the preview of a kept upload).

``GET /`` itself is :mod:`galleria.web.routes.browse`'s route: without a query it is the gallery
grid, with one it is :func:`search_view`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import UploadFile

from galleria._plugin_guard import PluginError
from galleria.images.reading import ImageReadError
from galleria.viewer import UploadError
from galleria.viewer.thumbnails import array_thumbnail
from galleria.web._site import SETTING_KEYS, UPLOAD_GONE, Renderer, Site, encode_query, method_heading
from galleria.web._site import search_heading as plain_heading
from galleria.web._work import RequestTimeout
from galleria.web.routes._grid import form_error

__all__ = ["PREVIEW_SIZE", "search_router", "search_view"]

#: Longest side of an upload's preview, in pixels.
PREVIEW_SIZE = 160


async def search_view(
    site: Site,
    render: Renderer,
    request: Request,
    queries: dict[str, str],
    settings: Any,
    sent: dict[str, str],
    error: str | None = None,
    status: int = 200,
) -> HTMLResponse:
    """One query's plain and re-ranked results side by side (``queries``: the address's queries;
    ``error``: a problem already found in the address, then nothing is searched)."""
    context: dict[str, Any] = {"settings": settings, "sent": sent, "result": None}
    if len(queries) > 1:
        error, status = f"give one query: path, text or upload; got {sorted(queries)}", 400
    kind, given = next(iter(queries.items()))
    context.update(kind=kind, given=given)
    query: Any = None
    if kind == "path":
        query = site.labels.path_of(given)
        context.update(hidden_query=("path", given), query_path=query)
        if query is None and error is None:
            error, status = f"{given!r} is not an image of this gallery", 404
    elif kind == "text":
        query = given
        context.update(query_text=given)
    else:
        kept = site.uploads.get(given)
        context.update(hidden_query=("upload", given), preview=None)
        if kept is None:
            if error is None:
                error, status = UPLOAD_GONE, 404
        else:
            context["preview"] = "/upload/" + given + ".jpg"
            query = kept.data
        kind = "upload"  # the kept bytes, decoded by the search in its worker
    if error is None:
        try:
            context["result"] = await site.work(site.run_search, query, kind, settings)
        except RequestTimeout as problem:
            error, status = str(problem), 503
        except PluginError as problem:  # a plugin's re-ranker failed: the page says which, and serves on
            error, status = str(problem), 500
        except (ValueError, LookupError, TypeError, OverflowError, ImageReadError) as problem:
            error = str(problem.args[0] if problem.args else problem)
            status = 404 if isinstance(problem, (LookupError, ImageReadError)) else 400

    def link(path: str) -> str:
        return site.address({"path": site.relative(path) or ""}, settings)

    context.update(error=error, link=link)
    context.update(search_heading=plain_heading(settings), rerank_heading=method_heading(settings))
    return render(request, "search.html", context, status)


def search_router(site: Site, render: Renderer) -> APIRouter:
    """``POST /`` (the search form) and ``/upload/{id}.jpg`` (see the module docstring)."""
    router = APIRouter()

    @router.post("/", response_class=HTMLResponse)
    async def index_form(request: Request) -> Response:
        """The search form: keep an uploaded image, then redirect (303) to the search's address."""
        fields: dict[str, str] = {}
        try:
            form = await request.form()
            images = form.getlist("image")
            if len(images) > 1:
                message = "send one image at a time (the form has two 'image' fields)"
                return form_error(site, render, request, message, 400)
            fields = {key: value for key, value in form.items() if isinstance(value, str)}
            query: dict[str, str] = {}
            image = images[0] if images else None
            data = await image.read(site.max_upload_bytes + 1) if isinstance(image, UploadFile) else b""
            if isinstance(image, UploadFile) and (data or image.filename):
                preview = await site.work(_preview, site.decode_upload, data)
                query["upload"] = site.uploads.add(data, preview)
            else:
                for key in ("text", "upload", "path"):
                    if fields.get(key, "").strip():
                        query[key] = fields[key].strip() if key != "text" else fields[key]
                        break
        except UploadError as problem:
            return form_error(site, render, request, str(problem), 413 if problem.too_large else 400, fields)
        except RequestTimeout as problem:
            return form_error(site, render, request, str(problem), 503, fields)
        if not query:
            message = "choose an image to upload, type a text or click a gallery image"
            return form_error(site, render, request, message, 400, fields)
        sent = {key: fields[key] for key in SETTING_KEYS if key in fields}
        try:
            params = site.settings_from(sent).to_query()
        except ValueError:
            params = sent  # the search's address shows the problem, with the form as it was sent
        return RedirectResponse("/?" + encode_query({**query, **params}), status_code=303)

    @router.get("/upload/{key}.jpg")
    def upload_preview(key: str) -> Response:
        """The preview of a kept upload (404 once it is no longer kept)."""
        kept = site.uploads.get(key)
        if kept is None:
            return Response(UPLOAD_GONE, status_code=404, media_type="text/plain")
        return Response(
            kept.preview, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"}
        )

    return router


def _preview(decode: Callable[[bytes], Any], data: bytes) -> bytes:
    """The preview JPEG of an upload's bytes (in a worker: decoding is the heavy part)."""
    return array_thumbnail(decode(data), PREVIEW_SIZE)
