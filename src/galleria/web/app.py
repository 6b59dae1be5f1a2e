"""The app factory of ``galleria serve``: the gallery's services, and the routers wired on one app.

The routes live in :mod:`galleria.web.routes` (one router per page, one for the JSON API, one for
the gallery's pixels); searching, re-ranking, thumbnails and upload checks in :mod:`galleria.viewer`.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from galleria._deadline import check_deadline
from galleria._files import short
from galleria.embedders import embedder_config
from galleria.images.reading import DEFAULT_MAX_PIXELS, draft_size_for, read_rgb_image
from galleria.viewer import (
    GalleryLabels,
    SearchSettings,
    ThumbnailCache,
    UploadStore,
    compare_search,
    decode_upload,
)
from galleria.viewer.flight import SingleFlight
from galleria.viewer.settings import MAX_RESULTS, sent_names
from galleria.viewer.thumbnails import DEFAULT_CACHE_BYTES, MAX_CONCURRENT_DECODES, encode_pixels
from galleria.web import routes
from galleria.web._background import Background
from galleria.web._files import GalleryFiles
from galleria.web._guard import Guard, normalise_hosts
from galleria.web._items import ServedLabels
from galleria.web._limits import FORM_SLACK as _FORM_SLACK
from galleria.web._limits import BodyLimit as _BodyLimit
from galleria.web._site import Site, page_renderer
from galleria.web._work import DEFAULT_REQUEST_TIMEOUT, DEFAULT_WORKERS, WorkerPool
from galleria.web.routes.map import map_points

__all__ = ["DEFAULT_MAX_UPLOAD_BYTES", "create_app"]

#: Largest upload accepted by default (20 MB).
DEFAULT_MAX_UPLOAD_BYTES = 20 * 1024 * 1024
_HERE = Path(__file__).parent


def _bounded(settings: SearchSettings, sent: dict[str, Any]) -> SearchSettings:
    """``settings`` if a request's work stays bounded: the neighbour counts a request sends (αQE's
    ``neighbors``, k-reciprocal's ``k1`` and ``k2``) at most :data:`MAX_RESULTS`, like ``k`` and
    ``pool``, so that no product of them exceeds ``MAX_RESULTS``²; ValueError naming the one sent."""
    config = settings.config
    params = config.rerank_params
    given = sent_names(sent)  # whatever the spelling: k1, param.k1, params.k1; neighbors, expansion_neighbors
    for name, shown, value in (
        ("expansion_neighbors", "neighbors", config.expansion_neighbors),
        ("k1", "k1", params.get("k1")),
        ("k2", "k2", params.get("k2")),
    ):
        if name in given and isinstance(value, int) and value > MAX_RESULTS:
            raise ValueError(f"{shown} must be at most {MAX_RESULTS} in a request, got {value!r}")
    return settings


def _settings_from(store: Any, defaults: Any, values: dict[str, Any]) -> SearchSettings:
    """A request's settings: checked (the one validation), the defaults filled in, and bounded."""
    return _bounded(SearchSettings.from_mapping(values, defaults, store=store), values)


def _stored(labels: GalleryLabels, path: Any) -> bool:
    """Whether ``path`` is spelled exactly as a gallery path is stored."""
    try:
        labels.relative(path)
    except (KeyError, TypeError):
        return False
    return True


def _run_search(
    store: Any, labels: GalleryLabels, decode: Any, query: Any, kind: str, settings: SearchSettings
) -> dict[str, Any]:
    """Search (in a worker thread): an ``"upload"`` query is the upload's bytes, decoded here."""
    if kind == "text" and not callable(getattr(store.embedder, "embed_text", None)):
        raise ValueError("text queries need a store built with a clip embedder")
    if kind == "path" and not _stored(labels, query):  # exactly as stored: no working directory
        raise LookupError(f"{short(query)} is not an image of this gallery")
    if kind == "upload":
        query, kind = decode(query), "image"
        check_deadline()
    result = compare_search(store, query, settings, kind=kind, labels=labels)
    check_deadline()
    return result.to_dict()


def _read_gallery(
    files: GalleryFiles, labels: GalleryLabels, path: str, min_size: Any, limit: int | None
) -> Any:
    """Pixels of a stored path, read only through the root check (NotServedError, ImageReadError)."""
    with files.open(path) as handle:
        return read_rgb_image(handle, min_size, max_pixels=limit, name=labels.relative(path))


def _full_size(
    files: GalleryFiles, decoding: Any, max_pixels: int, path: str, relative: str
) -> tuple[bytes, str]:
    """A gallery image re-encoded from its pixels (JPEG stays JPEG, else PNG), and its format."""
    with files.open(path) as handle, decoding:  # held until the copy is encoded
        is_jpeg = handle.read(3) == b"\xff\xd8\xff"
        handle.seek(0)
        pixels = read_rgb_image(handle, max_pixels=max_pixels, name=relative)
        image_format = "JPEG" if is_jpeg else "PNG"
        data = encode_pixels(pixels, image_format)
        del pixels
    return data, image_format


def _info(
    store: Any, store_name: str, files: GalleryFiles, labels: GalleryLabels, upload: int
) -> dict[str, Any]:
    """``/api/info``'s answer (and the page header's)."""
    from galleria.embedders import describe_weights

    config = None if store.embedder is None else embedder_config(store.embedder)
    return {
        "store": store_name,
        "count": len(store),
        "dim": store.dim,
        "space": store.space,
        "index": {"name": store.search_index.name, "params": store.search_index.params()},
        "embedder": config,
        "weights": describe_weights(config),  # ImageNet (package, file, digest), a local file, random...
        "text_queries": callable(getattr(store.embedder, "embed_text", None)),
        "root": files.root,
        "has_classes": labels.has_classes,
        "max_upload_bytes": upload,
    }


def _new_app(pool: WorkerPool, max_upload_bytes: int, hosts: frozenset[str] | None) -> FastAPI:
    """The bare app: its static files, the body limit and the guard (headers, ``Host`` check)."""
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
    return app


def _include_routers(app: FastAPI, site: Site, store: Any, encode: Any) -> None:
    """Wire every router on ``app`` (its state holds the background, thumbnails and full-size merges)."""
    state = app.state
    render = state.render_page = page_renderer(site)
    labels = site.labels
    for router in (
        routes.api_router(site, store),
        routes.browse_router(site, render),
        routes.search_router(site, render),
        routes.evaluation_router(site, render),
        routes.map_router(store, labels, state.background, render),
        routes.duplicates_router(store, state.background, render),
        routes.view_router(labels, render),
        routes.files_router(labels, state.thumbnails, state.full_size, encode),
    ):
        app.include_router(router)


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
    """A FastAPI app that searches ``store`` (a built InMemoryImageEmbeddingStore), loaded once; its
    routes are :mod:`galleria.web.routes`'.

    ``defaults`` (a ``RetrievalConfig``, as ``galleria.tune.read_settings`` returns) gives every
    setting a request leaves out, on the page and in the API alike (``galleria serve --settings
    FILE``); without it the re-ranking parameters left out are read from the gallery
    (:func:`galleria.rerank.adaptive.default_rerank_params`), and the page says so. ``evaluation``
    (a :class:`~galleria.evaluation.per_query.QueryResults`, ``serve --eval DIR``) adds the
    evaluation pages, with ``evaluation_labels`` (a :class:`~galleria.datasets.labels.LabelSummary`).
    ``uploads`` keeps the uploaded query images (by default the last 32, within 128 MB).

    ``root`` is the folder whose files may be read (default: the folder the store's images share;
    ValueError when they share none below ``/`` or a path is relative): a stored path whose real
    path, resolved at each request, lies elsewhere is a 404. ``allowed_hosts`` (``serve`` passes its
    bound host and ``--allow-host`` names) turns on the ``Host`` check: other names than these,
    ``localhost`` and IP addresses get a 400; None checks no ``Host``. ``max_pixels`` bounds the
    images decoded for uploads, thumbnails and ``/image``.

    Searching, decoding uploads and re-ranking run in a pool of ``workers`` threads, off the event
    loop (:mod:`galleria.web._work`); a request whose work takes longer than ``request_timeout``
    seconds is answered 503. At most :data:`~galleria.viewer.thumbnails.MAX_CONCURRENT_DECODES`
    gallery images are decoded at once (thumbnails and ``/image`` together), and concurrent requests
    for one image are merged into one decode.
    """
    # The one validation, for the defaults too. Without a settings file (or with an adaptive one)
    # the re-ranking defaults are read from the served gallery, again for every request.
    initial = SearchSettings.from_mapping({}, defaults, store=store)
    pool = WorkerPool(workers, request_timeout)
    paths = store.paths  # one list of a million paths, not one per use
    files = GalleryFiles(paths, root)
    labels = ServedLabels(paths, None if root is None else os.path.abspath(os.fspath(root)))
    hosts = None if allowed_hosts is None else normalise_hosts(allowed_hosts)
    draft = draft_size_for(store.embedder)
    decoding = threading.BoundedSemaphore(MAX_CONCURRENT_DECODES)  # every decode of a gallery image
    reader = functools.partial(_read_gallery, files, labels)
    thumbnails = ThumbnailCache(
        max_bytes=thumbnail_cache_bytes, max_pixels=max_pixels, reader=reader, decoding=decoding
    )
    decode = functools.partial(
        decode_upload, max_bytes=max_upload_bytes, max_pixels=max_pixels, min_size=draft
    )
    background = Background()
    site = Site(
        labels=labels,
        initial=initial,
        settings_from=functools.partial(_settings_from, store, defaults),
        run_search=functools.partial(_run_search, store, labels, decode),
        info=functools.partial(_info, store, store_name, files, labels, max_upload_bytes),
        uploads=UploadStore() if uploads is None else uploads,
        max_upload_bytes=max_upload_bytes,
        decode_upload=decode,
        evaluation=evaluation,
        evaluation_labels=evaluation_labels,
        workers=pool,
        map_points=functools.partial(map_points, store, labels, background),
    )
    app = _new_app(pool, max_upload_bytes, hosts)
    full_size: SingleFlight[tuple[bytes, str]] = SingleFlight()
    app.state.gallery_root = files.root
    app.state.workers, app.state.thumbnails, app.state.full_size = pool, thumbnails, full_size
    app.state.background = background
    _include_routers(app, site, store, functools.partial(_full_size, files, decoding, max_pixels))
    return app
