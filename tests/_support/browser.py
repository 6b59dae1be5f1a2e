"""Driving Debian's chromium from the browser tests: find the binary, a free port, a watched page."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["CHROMIUM", "chromium_binary", "free_port", "serving", "watched_page"]


def chromium_binary() -> str | None:
    """The chromium executable of Debian's package (what ``dpkg -L chromium`` lists), else on PATH."""
    try:
        listing = subprocess.run(
            ["dpkg", "-L", "chromium"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        listing = ""
    for line in listing.splitlines():
        if line.endswith("/bin/chromium") and os.access(line, os.X_OK):
            return line
    return shutil.which("chromium") or shutil.which("chromium-browser")


#: The chromium to launch, or ``None`` when it is not installed (the browser tests skip then).
CHROMIUM = chromium_binary()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def watched_page(browser: Any, width: int = 1280) -> tuple[Any, list[str]]:
    """A new page of ``browser`` and the list its problems go to.

    Problems: page errors, failed requests, console errors (a refused inline script or style).
    """
    page = browser.new_page(viewport={"width": width, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on(  # every failed request but the one checked on purpose (and the favicon: another helper's)
        "response",
        lambda response: (
            problems.append(f"{response.status} {response.url}")
            if response.status >= 400 and "k=abc" not in response.url and "favicon" not in response.url
            else None
        ),
    )
    page.on(  # a refused inline script or style, a script error
        "console",
        lambda message: (
            problems.append(message.text)
            if message.type == "error" and "Failed to load resource" not in message.text
            else None
        ),
    )
    return page, problems


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free port in a thread; yields its address, stops it after."""
    import uvicorn

    port = free_port()
    instance = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    for _ in range(200):  # wait for the socket (bounded)
        if instance.started:
            break
        time.sleep(0.05)
    assert instance.started, "the server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        instance.should_exit = True
        thread.join(timeout=10)
