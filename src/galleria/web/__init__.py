"""``galleria serve``: a FastAPI app over a loaded store (extra ``galleria[web]``).

The app only routes requests: searching, re-ranking, thumbnails and upload checks live in
:mod:`galleria.viewer`. Import :func:`create_app` to embed it elsewhere, or run ``galleria serve``.
"""

from __future__ import annotations

from typing import Any

from galleria.web._guard import normalise_hosts

__all__ = ["create_app", "normalise_hosts", "serve"]


def _require_web() -> None:
    try:
        import fastapi  # noqa: F401
        import jinja2  # noqa: F401
        import python_multipart  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"galleria serve needs the web extra ({error.name} is missing): pip install 'galleria[web]'"
        ) from error


def create_app(store: Any, **options: Any) -> Any:
    """The FastAPI application serving ``store``; see :func:`galleria.web.app.create_app`."""
    _require_web()
    from galleria.web.app import create_app as create

    return create(store, **options)


def serve(app: Any, *, host: str = "127.0.0.1", port: int = 8000, on_stop: Any = None) -> None:
    """Run ``app`` with uvicorn until interrupted; ``on_stop()`` is called when a stop signal arrives."""
    _require_web()
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    if on_stop is not None:
        handle_exit = server.handle_exit

        def stopping(sig: int, frame: Any) -> None:
            if not server.should_exit:
                on_stop()
            handle_exit(sig, frame)

        server.handle_exit = stopping  # type: ignore[method-assign]
    server.run()
