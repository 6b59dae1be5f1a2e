"""The routes of ``galleria serve``: the page, thumbnails and images of the gallery, the JSON API."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import UploadFile

from galleria._deadline import check_deadline
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
    UploadStore,
    compare_search,
    decode_upload,
)
from galleria.viewer.compare import MAX_RESULTS
from galleria.viewer.flight import SingleFlight
from galleria.viewer.thumbnails import (
    DEFAULT_CACHE_BYTES,
    MAX_CONCURRENT_DECODES,
    encode_pixels,
)
from galleria.web._background import Background
from galleria.web._files import GalleryFiles, NotServedError
from galleria.web._guard import Guard, normalise_hosts
from galleria.web._limits import FORM_SLACK as _FORM_SLACK
from galleria.web._limits import BodyLimit as _BodyLimit
from galleria.web._work import DEFAULT_REQUEST_TIMEOUT, DEFAULT_WORKERS, RequestTimeout, WorkerPool
from galleria.web.duplicates_routes import duplicates_router
from galleria.web.map_routes import map_router
from galleria.web.pages import SETTING_KEYS, UPLOAD_GONE, Site, add_pages
from galleria.web.view_routes import view_router

__all__ = ["DEFAULT_MAX_UPLOAD_BYTES", "create_app"]

#: Largest upload accepted by default (20 MB).
DEFAULT_MAX_UPLOAD_BYTES = 20 * 1024 * 1024
_HERE = Path(__file__).parent
_SETTING_KEYS = SETTING_KEYS


def _bounded(settings: SearchSettings, sent: dict[str, Any]) -> SearchSettings:
    """``settings`` if a request's work stays bounded: the neighbour counts a request sends (αQE's
    ``neighbors``, k-reciprocal's ``k1`` and ``k2``) at most :data:`MAX_RESULTS`, like ``k`` and
    ``pool``, so that no product of them exceeds ``MAX_RESULTS``²; ValueError naming the one sent."""
    config = settings.config
    params = config.rerank_params
    for name, value in (
        ("neighbors", config.expansion_neighbors),
        ("k1", params.get("k1")),
        ("k2", params.get("k2")),
    ):
        if name in sent and isinstance(value, int) and value > MAX_RESULTS:
            raise ValueError(f"{name} must be at most {MAX_RESULTS} in a request, got {value!r}")
    return settings


def create_app(
    store: Any,
    *,
    store_name: str = "store",
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    thumbnail_cache_bytes: int = DEFAULT_CACHE_BYTES,
    defaults: Any = None,
    evaluation: Any = None,
    evaluation_labels: Any = None,
    uploads: UploadStore | None = None,
    root: Any = None,
    allowed_hosts: Iterable[str] | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    workers: int = DEFAULT_WORKERS,
) -> FastAPI:
    """A FastAPI app that searches ``store`` (a built InMemoryImageEmbeddingStore), loaded once.

    Routes: the pages (see :mod:`galleria.web.pages`: ``GET /`` browses the gallery or shows a
    search, ``POST /`` takes the search form and redirects to the search's address, ``GET /eval``
    lists an evaluation's queries; ``GET /map``, ``GET /duplicates``, ``GET /view/{path}``: see
    :mod:`galleria.web.map_routes`, :mod:`~galleria.web.duplicates_routes`,
    :mod:`~galleria.web.view_routes`), ``GET /thumb/{path}`` and ``GET /image/{path}`` (pixels of the
    gallery's own images, by their path relative to the gallery root, re-encoded as JPEG or PNG;
    anything else is a 404), ``POST /api/search``, ``GET /api/info``, ``GET /openapi.json`` and
    ``/favicon.ico``.

    ``defaults`` (a ``RetrievalConfig``, as ``galleria.tune.read_settings`` returns) gives every
    setting a request leaves out, on the page and in the API alike, and the re-ranking method and
    its parameters (``galleria serve --settings FILE``). Without ``defaults`` the re-ranking
    parameters a request leaves out (``k1``, ``k2``, ``lambda``) are read from the gallery
    (:func:`galleria.rerank.adaptive.default_rerank_params`), and the page says so. ``evaluation`` (a
    :class:`~galleria.evaluation.per_query.QueryResults`, ``galleria serve --eval DIR``) adds the
    evaluation pages; ``evaluation_labels`` (a :class:`~galleria.datasets.labels.LabelSummary`, from
    the report's ``metrics.json``) is shown on them. ``uploads`` keeps the uploaded query images (by
    default the last 32, within 128 MB).

    ``root`` is the folder whose files may be read (default: the folder the store's images share;
    ValueError when they share none below ``/`` or a path is relative): a stored path whose real
    path, resolved at each request, lies elsewhere is a 404. ``allowed_hosts`` (``galleria serve``
    passes its bound host and ``--allow-host`` names) turns on the ``Host`` check: other names than
    these, ``localhost`` and IP addresses get a 400; None (the default) checks no ``Host``.
    ``max_pixels`` bounds the images decoded for uploads, thumbnails and ``/image``.

    Searching, decoding uploads and re-ranking run in a pool of ``workers`` threads, off the event
    loop (:mod:`galleria.web._work`); a request whose work takes longer than ``request_timeout``
    seconds is answered 503 (``galleria serve --request-timeout``). At most
    :data:`~galleria.viewer.thumbnails.MAX_CONCURRENT_DECODES` gallery images are decoded and
    re-encoded at once (thumbnails and ``/image`` together), and concurrent requests for one image
    are merged into one decode.
    """
    # The one validation, for the defaults too. Without a settings file (or with an adaptive one)
    # the re-ranking defaults are read from the served gallery, again for every request: the
    # statistics behind them are cached on the store while its gallery stays the same.
    initial = SearchSettings.from_mapping({}, defaults, store=store)
    uploads = UploadStore() if uploads is None else uploads
    pool = WorkerPool(workers, request_timeout)

    def settings_from(values: dict[str, Any]) -> SearchSettings:
        return _bounded(SearchSettings.from_mapping(values, defaults, store=store), values)

    files = GalleryFiles(store.paths, root)
    labels = GalleryLabels(store.paths, None if root is None else os.path.abspath(os.fspath(root)))
    hosts = None if allowed_hosts is None else normalise_hosts(allowed_hosts)
    draft = draft_size_for(store.embedder)
    # One semaphore for every decode of a gallery image, held until its bytes are encoded.
    decoding = threading.BoundedSemaphore(MAX_CONCURRENT_DECODES)
    full_size: SingleFlight[tuple[bytes, str]] = SingleFlight()

    def read_gallery(path: str, min_size: Any, limit: int | None) -> Any:
        """Pixels of a stored path, read only through the root check (NotServedError, ImageReadError)."""
        with files.open(path) as handle:
            return read_rgb_image(handle, min_size, max_pixels=limit, name=labels.relative(path))

    thumbnails = ThumbnailCache(
        max_bytes=thumbnail_cache_bytes, max_pixels=max_pixels, reader=read_gallery, decoding=decoding
    )
    text_queries = callable(getattr(store.embedder, "embed_text", None))
    app = FastAPI(
        title="galleria",
        description="Search a gallery store; plain and k-reciprocal re-ranked results side by side.",
        docs_url=None,  # Swagger's page loads its assets from a CDN: blank offline
        redoc_url=None,
        lifespan=pool.lifespan,
    )
    app.mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static")
    app.add_middleware(_BodyLimit, limit=max_upload_bytes + _FORM_SLACK)
    app.add_middleware(Guard, allowed_hosts=hosts)
    app.state.gallery_root = files.root
    app.state.workers = pool
    app.state.thumbnails = thumbnails
    app.state.full_size = full_size

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

    def decode_bytes(data: bytes) -> Any:
        """The pixels of an upload's bytes (UploadError for anything that is not a usable image)."""
        return decode_upload(data, max_bytes=max_upload_bytes, max_pixels=max_pixels, min_size=draft)

    async def read_upload(upload: Any) -> bytes:
        if not isinstance(upload, UploadFile):
            raise UploadError("the 'image' field must be a file upload")
        return await upload.read(max_upload_bytes + 1)

    def run_search(query: Any, kind: str, settings: SearchSettings) -> dict[str, Any]:
        """Search (in a worker thread): an ``"upload"`` query is the upload's bytes, decoded here."""
        if kind == "text" and not text_queries:
            raise ValueError("text queries need a store built with a clip embedder")
        if kind == "path" and query not in store:
            raise LookupError(f"{query!r} is not an image of this gallery")
        if kind == "upload":
            query, kind = decode_bytes(query), "image"
            check_deadline()
        result = compare_search(store, query, settings, kind=kind, labels=labels)
        check_deadline()
        return result.to_dict()

    def error_response(error: Exception) -> JSONResponse:
        if isinstance(error, RequestTimeout):
            return JSONResponse({"detail": str(error)}, status_code=503, headers={"Retry-After": "10"})
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
        given = [name for name in ("path", "text", "upload") if fields.get(name) not in (None, "")]
        if image is not None and not (isinstance(image, str) and not image):
            given.append("image")
        if len(given) != 1:
            raise ValueError(
                "give exactly one query: 'image' (upload), 'upload' (the id of an earlier upload), "
                f"'path' or 'text'; got {given or 'none'}"
            )
        if given[0] == "image":
            return await read_upload(image), "upload", settings
        if given[0] == "upload":
            kept = uploads.get(fields["upload"])
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
        resolved = path if path in store else labels.path_of(path)
        return (resolved if resolved is not None else path), "path", settings

    @app.get("/api/info")
    def api_info() -> dict[str, Any]:
        """The store: size, embedder, index, space, whether it takes text queries."""
        return info()

    @app.post("/api/search")
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
            query, kind, settings = await parse_request(request)
            return await pool.run(run_search, query, kind, settings)
        except (ValueError, LookupError, TypeError, OverflowError, ImageReadError, RequestTimeout) as error:
            return error_response(error)

    add_pages(
        app,
        Site(
            labels=labels,
            initial=initial,
            settings_from=settings_from,
            run_search=run_search,
            info=info,
            uploads=uploads,
            max_upload_bytes=max_upload_bytes,
            decode_upload=decode_bytes,
            evaluation=evaluation,
            evaluation_labels=evaluation_labels,
            workers=pool,
        ),
    )
    # The collector's views (issue 28): the map, the duplicate groups, the full-size view.
    background = Background()
    app.state.background = background
    render = app.state.render_page
    app.include_router(map_router(store, labels, background, render))
    app.include_router(duplicates_router(store, background, render))
    app.include_router(view_router(labels, render))

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

        def encoded() -> tuple[bytes, str]:
            with files.open(path) as handle, decoding:  # held until the copy is encoded
                is_jpeg = handle.read(3) == b"\xff\xd8\xff"
                handle.seek(0)
                pixels = read_rgb_image(handle, max_pixels=max_pixels, name=relative)
                image_format = "JPEG" if is_jpeg else "PNG"
                data = encode_pixels(pixels, image_format)
                del pixels
            return data, image_format

        try:
            data, image_format = full_size.do(path, encoded)
        except (NotServedError, ImageReadError) as error:
            raise not_shown(error) from None
        return Response(
            data, media_type=f"image/{image_format.lower()}", headers={"Cache-Control": "max-age=3600"}
        )

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        """The page's icon (a file of galleria's own)."""
        return FileResponse(_HERE / "static" / "favicon.svg", media_type="image/svg+xml")

    return app
