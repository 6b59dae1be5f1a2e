"""The request-body limit of ``galleria serve``: an upload over the limit is refused with 413 before
it is stored whole (ASGI middleware)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from galleria.viewer import UploadError

__all__ = ["FORM_SLACK", "BodyLimit"]

#: Room for the form's other fields beside the image, in bytes.
FORM_SLACK = 1024 * 1024


class BodyLimit:
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
    allowed = (limit - FORM_SLACK) / 1e6
    return f"the request is {size / 1e6:.1f} MB or more, over the upload limit of {allowed:.1f} MB"
