"""The JSON API: ``GET /api/info`` (the store) and ``POST /api/search`` (one query's two lists).

The map's own endpoints (``/api/map...``) are :mod:`galleria.web.routes.map`'s.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile

from galleria._plugin_guard import PluginError
from galleria.images.reading import ImageReadError
from galleria.viewer import SearchSettings, UploadError
from galleria.web._site import SETTING_KEYS, UPLOAD_GONE, Site
from galleria.web._work import RequestTimeout

__all__ = ["api_router", "error_response"]


def error_response(error: Exception) -> JSONResponse:
    """The JSON answer to a request's error: 503 timeout, 413 upload too large, 404 unknown, 500 a
    plugin's failure (``{"detail": ..., "plugin": {"kind", "name"}}``: the component that failed,
    never a traceback), else 400."""
    if isinstance(error, PluginError):
        plugin = {"kind": error.kind, "name": error.name}
        return JSONResponse({"detail": str(error), "plugin": plugin}, status_code=500)
    if isinstance(error, RequestTimeout):
        return JSONResponse({"detail": str(error)}, status_code=503, headers={"Retry-After": "10"})
    if isinstance(error, UploadError) and error.too_large:
        return JSONResponse({"detail": str(error)}, status_code=413)
    if isinstance(error, LookupError):
        return JSONResponse({"detail": str(error.args[0] if error.args else error)}, status_code=404)
    if isinstance(error, ImageReadError):
        return JSONResponse({"detail": f"an image could not be read: {error.reason}"}, status_code=404)
    return JSONResponse({"detail": str(error)}, status_code=400)


async def _fields(request: Request) -> tuple[dict[str, Any], Any]:
    """The request's fields and its uploaded ``image`` (None): a JSON object or a form."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("application/json"):
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError("the request body is not valid JSON") from None
        except RecursionError:
            raise ValueError("the JSON body is nested too deeply") from None
        if not isinstance(body, dict):
            raise ValueError("the JSON body must be an object")
        return body, None
    if content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        form = await request.form()
        fields = {key: value for key, value in form.items() if key != "image"}
        images = form.getlist("image")
        if len(images) > 1:
            raise ValueError(f"give one 'image' field, got {len(images)}")
        return fields, (images[0] if images else None)
    raise ValueError("send multipart form data (field 'image') or JSON ({'path': ...} or {'text': ...})")


async def parse_request(site: Site, store: Any, request: Request) -> tuple[Any, str, SearchSettings]:
    """The query (its kind: ``"upload"``, ``"text"`` or ``"path"``) and the settings of a search request."""
    fields, image = await _fields(request)
    settings = site.settings_from({key: fields[key] for key in SETTING_KEYS if key in fields})
    given = [name for name in ("path", "text", "upload") if fields.get(name) not in (None, "")]
    if image is not None and not (isinstance(image, str) and not image):
        given.append("image")
    if len(given) != 1:
        raise ValueError(
            "give exactly one query: 'image' (upload), 'upload' (the id of an earlier upload), "
            f"'path' or 'text'; got {given or 'none'}"
        )
    if given[0] == "image":
        if not isinstance(image, UploadFile):
            raise UploadError("the 'image' field must be a file upload")
        return await image.read(site.max_upload_bytes + 1), "upload", settings
    if given[0] == "upload":
        kept = site.uploads.get(fields["upload"])
        if kept is None:
            raise LookupError(UPLOAD_GONE)
        return kept.data, "upload", settings
    if given[0] == "text":
        if not isinstance(fields["text"], str):
            raise ValueError("text must be a string")
        return fields["text"], "text", settings
    path = fields["path"]
    if not isinstance(path, str):
        raise ValueError("path must be a string")
    # Exactly a stored path, or exactly one relative to the gallery root: never resolved against
    # the server's working directory (which may be gone), so an unknown path is a 404, not a 500.
    resolved = path if site.relative(path) is not None else site.labels.path_of(path)
    return (resolved if resolved is not None else path), "path", settings


def api_router(site: Site, store: Any) -> APIRouter:
    """``/api/info`` and ``/api/search`` (see the module docstring)."""
    router = APIRouter()

    @router.get("/api/info")
    def api_info() -> dict[str, Any]:
        """The store: size, embedder, index, space, whether it takes text queries."""
        return site.info()

    @router.post("/api/search")
    async def api_search(request: Request) -> Any:
        """Search by an uploaded image (multipart field ``image``), a gallery ``path`` or a ``text``.

        ``upload`` (an id from a page's address, ``/?upload=...``) searches an image uploaded earlier
        on the page again.

        Settings: ``k``, ``expand`` with ``expansion_alpha`` and ``expansion_neighbors`` (old names
        ``alpha``, ``neighbors``), ``rerank`` with ``method``, ``preset``, ``pool`` and the method's
        parameters by their declared names (flat, ``param.NAME`` or a ``params`` object; ``k1``,
        ``k2``, ``lambda`` stay accepted); left out: the gallery's adaptive values (or the settings
        file's). Answer: ``{"settings": {the exact values used}, "plain": [{"path", "score",
        "rank"}...], "reranked": [... with "previous_rank"] | null, "elapsed_ms": ...}``.
        """
        try:
            query, kind, settings = await parse_request(site, store, request)
            return await site.work(site.run_search, query, kind, settings)
        except (
            ValueError,
            LookupError,
            TypeError,
            OverflowError,
            ImageReadError,
            RequestTimeout,
            PluginError,
        ) as error:
            return error_response(error)

    return router
