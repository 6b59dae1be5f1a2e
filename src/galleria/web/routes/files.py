"""The gallery's pixels: ``/thumb/{path}`` (a JPEG thumbnail), ``/image/{path}`` (the image at full
size, re-encoded from its decoded pixels) and the page's icon, ``/favicon.ico``.

A path is the image's path relative to the gallery root; anything that is not a readable image of
the gallery, under the root (:mod:`galleria.web._files`), is a 404. Only decoded pixels are sent.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, Response

from galleria.images.reading import ImageReadError, ImageTooLargeError
from galleria.viewer import GalleryLabels
from galleria.web._files import NotServedError

__all__ = ["files_router"]

_ICON = Path(__file__).resolve().parents[1] / "static" / "favicon.svg"


def not_shown(error: Exception) -> HTTPException:
    """The 404 of an image that is not served or cannot be read."""
    if isinstance(error, NotServedError):
        return HTTPException(status_code=404, detail=str(error))
    if isinstance(error, ImageTooLargeError):
        return HTTPException(status_code=404, detail=f"the image is too large to show: {error.reason}")
    return HTTPException(status_code=404, detail="the image file cannot be read")


def files_router(
    labels: GalleryLabels,
    thumbnails: Any,
    full_size: Any,
    encode: Callable[[str, str], tuple[bytes, str]],
) -> APIRouter:
    """The routes of the gallery's pixels: ``thumbnails`` (a
    :class:`~galleria.viewer.ThumbnailCache`) makes thumbnails; ``encode(path, relative)`` gives an
    image's full-size bytes and format, merged by ``full_size`` (a
    :class:`~galleria.viewer.flight.SingleFlight`) for concurrent requests of one image."""
    router = APIRouter()

    def gallery_path(relative: str) -> str:
        path = labels.path_of(relative)
        if path is None:
            raise HTTPException(status_code=404, detail="not an image of this gallery")
        return path

    @router.get("/thumb/{relative:path}")
    def thumbnail(relative: str) -> Response:
        """A JPEG thumbnail of a gallery image (404 for any path that is not a readable one)."""
        path = gallery_path(relative)
        try:
            data = thumbnails.get(path)
        except (NotServedError, ImageReadError) as error:
            raise not_shown(error) from None
        return Response(data, media_type="image/jpeg", headers={"Cache-Control": "max-age=3600"})

    @router.get("/image/{relative:path}")
    def image(relative: str) -> Response:
        """A gallery image at full size, re-encoded from its decoded pixels (JPEG stays JPEG, else PNG)."""
        path = gallery_path(relative)
        try:
            data, image_format = full_size.do(path, lambda: encode(path, relative))
        except (NotServedError, ImageReadError) as error:
            raise not_shown(error) from None
        return Response(
            data, media_type=f"image/{image_format.lower()}", headers={"Cache-Control": "max-age=3600"}
        )

    @router.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        """The page's icon (a file of galleria's own)."""
        return FileResponse(_ICON, media_type="image/svg+xml")

    return router
