"""The routes of ``galleria serve``: the page, thumbnails and images of the gallery, the JSON API."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.datastructures import UploadFile

from galleria.embedders import embedder_config
from galleria.store.reading import (
    DEFAULT_MAX_PIXELS,
    ImageReadError,
    ImageTooLargeError,
    draft_size_for,
    read_rgb_image,
)
from galleria.viewer import (
    GalleryLabels,
    SearchSettings,
    ThumbnailCache,
    UploadError,
    compare_search,
    decode_upload,
)
from galleria.viewer.text import shorten_middle
from galleria.viewer.thumbnails import (
    DEFAULT_CACHE_BYTES,
    MAX_CONCURRENT_DECODES,
    array_thumbnail,
    encode_pixels,
)
from galleria.web._files import GalleryFiles, NotServedError
from galleria.web._guard import Guard, normalise_hosts

__all__ = ["DEFAULT_MAX_UPLOAD_BYTES", "create_app"]

#: Largest upload accepted by default (20 MB).
DEFAULT_MAX_UPLOAD_BYTES = 20 * 1024 * 1024
_HERE = Path(__file__).parent
_SETTING_KEYS = ("k", "expand", "alpha", "neighbors", "rerank", "k1", "k2", "lambda", "lambda_value", "pool")


#: Room for the form's other fields beside the image, in bytes.
_FORM_SLACK = 1024 * 1024


class _BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is refused with 413, never stored whole.

    A declared ``content-length`` over the limit is answered at once; a body that turns out longer
    while it is read (chunked uploads) raises :class:`UploadError` inside the route, which answers 413.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            response = JSONResponse({"detail": _too_large(int(declared), self.limit)}, status_code=413)
            await response(scope, receive, send)
            return
        total = 0
        limit = self.limit

        async def limited() -> Any:
            nonlocal total
            message = await receive()
            if message.get("type") == "http.request":
                total += len(message.get("body", b""))
                if total > limit:
                    raise UploadError(_too_large(total, limit), too_large=True)
            return message

        await self.app(scope, limited, send)


def _too_large(size: int, limit: int) -> str:
    allowed = (limit - _FORM_SLACK) / 1e6
    return f"the request is {size / 1e6:.1f} MB or more, over the upload limit of {allowed:.1f} MB"


def create_app(
    store: Any,
    *,
    store_name: str = "store",
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    thumbnail_cache_bytes: int = DEFAULT_CACHE_BYTES,
    defaults: Any = None,
    root: Any = None,
    allowed_hosts: Iterable[str] | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> FastAPI:
    """A FastAPI app that searches ``store`` (a built InMemoryImageEmbeddingStore), loaded once.

    Routes: ``GET /`` and ``POST /`` (the page; upload, gallery path or text queries), ``GET
    /thumb/{path}`` and ``GET /image/{path}`` (pixels of the gallery's own images, by their path
    relative to the gallery root, re-encoded as JPEG or PNG; anything else is a 404), ``POST
    /api/search``, ``GET /api/info``, ``GET /openapi.json`` and ``/favicon.ico``.

    ``defaults`` (a ``RetrievalConfig``, as ``galleria.tune.read_settings`` returns) sets the page's
    first settings and the re-ranking method and parameters (``galleria serve --settings FILE``).

    ``root`` is the folder whose files may be read (default: the folder the store's images share;
    ValueError when they share none below ``/`` or a path is relative): a stored path whose real
    path, resolved at each request, lies elsewhere is a 404. ``allowed_hosts`` (``galleria serve``
    passes its bound host and ``--allow-host`` names) turns on the ``Host`` check: other names than
    these, ``localhost`` and IP addresses get a 400; None (the default) checks no ``Host``.
    ``max_pixels`` bounds the images decoded for uploads, thumbnails and ``/image``.
    """
    import dataclasses

    initial = (
        SearchSettings()
        if defaults is None
        else SearchSettings(config=dataclasses.replace(defaults, name="search"))
    )

    def settings_from(values: dict[str, Any]) -> SearchSettings:
        if not values:
            return initial
        return SearchSettings.from_mapping(values, defaults)

    files = GalleryFiles(store.paths, root)
    labels = GalleryLabels(store.paths, None if root is None else os.path.abspath(os.fspath(root)))
    hosts = None if allowed_hosts is None else normalise_hosts(allowed_hosts)
    draft = draft_size_for(store.embedder)
    decoding = threading.BoundedSemaphore(MAX_CONCURRENT_DECODES)

    def read_gallery(path: str, min_size: Any, limit: int | None) -> Any:
        """Pixels of a stored path, read only through the root check (NotServedError, ImageReadError)."""
        with files.open(path) as handle, decoding:
            return read_rgb_image(handle, min_size, max_pixels=limit, name=labels.relative(path))

    thumbnails = ThumbnailCache(max_bytes=thumbnail_cache_bytes, max_pixels=max_pixels, reader=read_gallery)
    text_queries = callable(getattr(store.embedder, "embed_text", None))
    templates = Jinja2Templates(directory=str(_HERE / "templates"))
    app = FastAPI(
        title="galleria",
        description="Search a gallery store; plain and k-reciprocal re-ranked results side by side.",
        docs_url=None,  # Swagger's page loads its assets from a CDN: blank offline
        redoc_url=None,
    )
    app.mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static")
    app.add_middleware(_BodyLimit, limit=max_upload_bytes + _FORM_SLACK)
    app.add_middleware(Guard, allowed_hosts=hosts)
    app.state.gallery_root = files.root

    def gallery_path(relative: str) -> str:
        path = labels.path_of(relative)
        if path is None:
            raise HTTPException(status_code=404, detail="not an image of this gallery")
        return path

    def not_shown(error: Exception) -> HTTPException:
        if isinstance(error, NotServedError):
            return HTTPException(status_code=404, detail=str(error))
        if isinstance(error, ImageTooLargeError):
            return HTTPException(status_code=404, detail=f"the image is too large to show: {error.reason}")
        return HTTPException(status_code=404, detail="the image file cannot be read")

    def info() -> dict[str, Any]:
        return {
            "store": store_name,
            "count": len(store),
            "dim": store.dim,
            "space": store.space,
            "index": {"name": store.search_index.name, "params": store.search_index.params()},
            "embedder": None if store.embedder is None else embedder_config(store.embedder),
            "text_queries": text_queries,
            "root": files.root,
            "has_classes": labels.has_classes,
            "max_upload_bytes": max_upload_bytes,
        }

    async def read_upload(upload: Any) -> Any:
        if not isinstance(upload, UploadFile):
            raise UploadError("the 'image' field must be a file upload")
        data = await upload.read(max_upload_bytes + 1)
        return decode_upload(data, max_bytes=max_upload_bytes, max_pixels=max_pixels, min_size=draft)

    def run_search(query: Any, kind: str, settings: SearchSettings) -> dict[str, Any]:
        if kind == "text" and not text_queries:
            raise ValueError("text queries need a store built with a clip embedder")
        if kind == "path" and query not in store:
            raise LookupError(f"{query!r} is not an image of this gallery")
        result = compare_search(store, query, settings, kind=kind, labels=labels)
        return result.to_dict()

    def error_response(error: Exception) -> JSONResponse:
        if isinstance(error, UploadError) and error.too_large:
            return JSONResponse({"detail": str(error)}, status_code=413)
        if isinstance(error, LookupError):
            return JSONResponse({"detail": str(error.args[0] if error.args else error)}, status_code=404)
        if isinstance(error, ImageReadError):
            return JSONResponse({"detail": f"an image could not be read: {error.reason}"}, status_code=404)
        return JSONResponse({"detail": str(error)}, status_code=400)

    async def parse_request(request: Request) -> tuple[Any, str, SearchSettings]:
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
            fields: dict[str, Any] = body
            image = None
        elif content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
            form = await request.form()
            fields = {key: value for key, value in form.items() if key != "image"}
            images = form.getlist("image")
            if len(images) > 1:
                raise ValueError(f"give one 'image' field, got {len(images)}")
            image = images[0] if images else None
        else:
            raise ValueError(
                "send multipart form data (field 'image') or JSON ({'path': ...} or {'text': ...})"
            )
        settings = settings_from({key: fields[key] for key in _SETTING_KEYS if key in fields})
        given = [name for name in ("path", "text") if fields.get(name) not in (None, "")]
        if image is not None and not (isinstance(image, str) and not image):
            given.append("image")
        if len(given) != 1:
            raise ValueError(
                f"give exactly one query: 'image' (upload), 'path' or 'text'; got {given or 'none'}"
            )
        if given[0] == "image":
            return await read_upload(image), "image", settings
        if given[0] == "text":
            if not isinstance(fields["text"], str):
                raise ValueError("text must be a string")
            return fields["text"], "text", settings
        path = fields["path"]
        if not isinstance(path, str):
            raise ValueError("path must be a string")
        resolved = path if path in store else labels.path_of(path)
        return (resolved if resolved is not None else path), "path", settings

    @app.get("/api/info")
    def api_info() -> dict[str, Any]:
        """The store: size, embedder, index, space, whether it takes text queries."""
        return info()

    @app.post("/api/search")
    async def api_search(request: Request) -> Any:
        """Search by an uploaded image (multipart field ``image``), a gallery ``path`` or a ``text``.

        Settings: ``k``, ``expand`` with ``alpha`` and ``neighbors``, ``rerank`` with ``k1``, ``k2``,
        ``lambda`` and ``pool``. Answer: ``{"plain": [{"path", "score", "rank"}...], "reranked": [...
        with "previous_rank"] | null, "elapsed_ms": ...}``.
        """
        try:
            query, kind, settings = await parse_request(request)
            return run_search(query, kind, settings)
        except (ValueError, LookupError, TypeError, OverflowError, ImageReadError) as error:
            return error_response(error)

    def page(
        request: Request,
        *,
        query: Any = None,
        kind: str | None = None,
        settings: SearchSettings,
        error: str | None = None,
        status: int = 200,
        query_text: str = "",
    ) -> HTMLResponse:
        result = None
        if error is None and kind is not None:
            try:
                result = run_search(query, kind, settings)
            except (ValueError, LookupError, TypeError, OverflowError, ImageReadError) as problem:
                error, status = str(problem.args[0] if problem.args else problem), 400
                if isinstance(problem, (LookupError, ImageReadError)):
                    status = 404

        def thumb(path: str) -> str:
            return "/thumb/" + quote(labels.relative(path))

        def link(path: str) -> str:
            params = {**settings.to_dict(), "path": labels.relative(path)}
            fields = "&".join(
                f"{key}={quote(str(value).lower() if isinstance(value, bool) else str(value))}"
                for key, value in params.items()
                if not (isinstance(value, bool) and not value)
            )
            return "/?" + fields

        upload_preview = None
        if kind == "image" and result is not None:
            encoded = base64.b64encode(array_thumbnail(query, 96)).decode("ascii")
            upload_preview = f"data:image/jpeg;base64,{encoded}"

        def shown(path: str) -> str:
            return labels.relative(path)

        def short(path: str) -> str:
            return shorten_middle(labels.relative(path), 22)

        return templates.TemplateResponse(
            request,
            "index.html",
            {
                "info": info(),
                "settings": settings.to_dict(),
                "result": result,
                "error": error,
                "kind": kind,
                "query_path": query if kind == "path" else None,
                "query_text": query_text,
                "thumb": thumb,
                "link": link,
                "shown": shown,
                "short": short,
                "upload_preview": upload_preview,
            },
            status_code=status,
        )

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        """The page; ``?path=`` (a gallery path relative to the root) or ``?text=`` runs a search."""
        params = request.query_params
        try:
            settings = settings_from({key: params[key] for key in _SETTING_KEYS if key in params})
        except ValueError as error:
            return page(request, settings=initial, error=str(error), status=400)
        if params.get("path"):
            path = labels.path_of(params["path"])
            if path is None:
                return page(
                    request,
                    settings=settings,
                    error=f"{params['path']!r} is not an image of this gallery",
                    status=404,
                )
            return page(request, query=path, kind="path", settings=settings)
        if params.get("text"):
            return page(
                request, query=params["text"], kind="text", settings=settings, query_text=params["text"]
            )
        return page(request, settings=settings)

    @app.post("/", response_class=HTMLResponse)
    async def index_upload(request: Request) -> HTMLResponse:
        """The page answering an uploaded query image."""
        try:
            query, kind, settings = await parse_request(request)
        except (ValueError, LookupError, TypeError) as error:
            status = 413 if isinstance(error, UploadError) and error.too_large else 400
            return page(request, settings=initial, error=str(error), status=status)
        return page(request, query=query, kind=kind, settings=settings)

    @app.get("/thumb/{relative:path}")
    def thumbnail(relative: str) -> Response:
        """A JPEG thumbnail of a gallery image (404 for any path that is not a readable one)."""
        path = gallery_path(relative)
        try:
            data = thumbnails.get(path)
        except (NotServedError, ImageReadError) as error:
            raise not_shown(error) from None
        return Response(data, media_type="image/jpeg", headers={"Cache-Control": "max-age=3600"})

    @app.get("/image/{relative:path}")
    def image(relative: str) -> Response:
        """A gallery image at full size, re-encoded from its decoded pixels (JPEG stays JPEG, else PNG)."""
        path = gallery_path(relative)
        try:
            with files.open(path) as handle, decoding:
                is_jpeg = handle.read(3) == b"\xff\xd8\xff"
                handle.seek(0)
                pixels = read_rgb_image(handle, max_pixels=max_pixels, name=relative)
        except (NotServedError, ImageReadError) as error:
            raise not_shown(error) from None
        image_format = "JPEG" if is_jpeg else "PNG"
        return Response(
            encode_pixels(pixels, image_format),
            media_type=f"image/{image_format.lower()}",
            headers={"Cache-Control": "max-age=3600"},
        )

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        """The page's icon (a file of galleria's own)."""
        return FileResponse(_HERE / "static" / "favicon.svg", media_type="image/svg+xml")

    return app
