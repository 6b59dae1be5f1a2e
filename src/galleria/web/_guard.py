"""ASGI middleware of ``galleria serve``: security headers on every answer, and a ``Host`` check.

The ``Host`` check defeats DNS rebinding (a page on another site whose name is re-pointed at the
server's address): a request is answered only when its ``Host`` names the bound host, ``localhost``,
an IP address literal (what a browser sends when the user typed an address), or a name given with
``--allow-host``. Anything else is a 400.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

__all__ = ["SECURITY_HEADERS", "Guard", "host_name", "normalise_hosts"]

#: Headers added to every HTTP answer (unless the route set them).
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        b"form-action 'self'; frame-ancestors 'none'",
    ),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


def host_name(header: str) -> str:
    """The host of a ``Host`` header, lower-case, without port, brackets or a trailing dot.

    Examples
    --------
    >>> host_name("LocalHost:8000"), host_name("[::1]:80"), host_name("example.org.")
    ('localhost', '::1', 'example.org')
    """
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else ""
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def normalise_hosts(names: Iterable[str]) -> frozenset[str]:
    """The allowed host names, normalised by :func:`host_name`, with ``localhost`` always in.

    Raises ValueError for an empty name or one with a character no host name has.
    """
    allowed = {"localhost"}
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"allowed_hosts must hold strings, got {name!r}")
        host = host_name(name)
        if not host or any(c.isspace() or c in "/\\@?#" for c in host):
            raise ValueError(f"allowed host must be a host name or address, got {name!r}")
        allowed.add(host)
    return frozenset(allowed)


class Guard:
    """Add :data:`SECURITY_HEADERS` to every answer; with ``allowed_hosts``, answer other hosts 400.

    An error no route answered becomes a plain 500 sent from here, so that it carries the headers
    too; the error is then raised on, to be logged.
    """

    def __init__(self, app: Any, allowed_hosts: frozenset[str] | None) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts

    def _host_allowed(self, scope: Any) -> bool:
        if self.allowed_hosts is None:
            return True
        values = [value for key, value in scope.get("headers") or [] if key == b"host"]
        if len(values) != 1:
            return False
        name = host_name(values[0].decode("latin-1"))
        return name in self.allowed_hosts or _is_ip(name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_guarded(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                present = {key.lower() for key, _ in headers}
                headers.extend(item for item in SECURITY_HEADERS if item[0] not in present)
                message = {**message, "headers": headers}
            await send(message)

        if not self._host_allowed(scope):
            from starlette.responses import JSONResponse

            response = JSONResponse(
                {"detail": "this Host is not served here (start galleria serve with --allow-host NAME)"},
                status_code=400,
            )
            await response(scope, receive, send_guarded)
            return
        started = False

        async def send_tracked(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send_guarded(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception:
            # Starlette's own 500 page is sent from outside this middleware, without the headers:
            # answer here, then let the error go on to be logged (nothing more is sent for it).
            if not started:
                from starlette.responses import PlainTextResponse

                answer = PlainTextResponse("Internal Server Error", status_code=500)
                await answer(scope, receive, send_tracked)
            raise
