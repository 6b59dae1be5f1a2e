"""``galleria serve`` in a real browser: Playwright drives Debian's chromium against a live server.

The page is loaded, an image uploaded, re-ranking switched on, and both result grids checked; then a
result is clicked to search by it. Set ``GALLERIA_SCREENSHOT=/path.png`` to keep a screenshot.
Skipped only when chromium is not installed (``.ci/run`` installs it: ``apt-get install chromium``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")
import uvicorn  # noqa: E402

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder  # noqa: E402
from galleria.web import create_app  # noqa: E402


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


CHROMIUM = chromium_binary()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)

COLOURS = {"red": (210, 40, 40), "green": (40, 190, 60), "blue": (40, 60, 210), "yellow": (220, 210, 40)}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("browser") / "gallery"
    rng = np.random.default_rng(1)
    paths = []
    for label, colour in COLOURS.items():
        (root / label).mkdir(parents=True)
        for i in range(8):
            pixels = np.clip(np.array(colour) + rng.normal(0, 35, (48, 64, 3)), 0, 255).astype(np.uint8)
            path = root / label / f"{label}_{i}.png"
            Image.fromarray(pixels).save(path)
            paths.append(str(path))
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    port = _free_port()
    config = uvicorn.Config(
        create_app(store, store_name="colours.safetensors"), host="127.0.0.1", port=port, log_level="warning"
    )
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    for _ in range(200):  # wait for the socket (bounded)
        if instance.started:
            break
        time.sleep(0.05)
    assert instance.started, "the server did not start"
    query = root.parent / "query.png"
    Image.new("RGB", (40, 40), COLOURS["blue"]).save(query)
    yield f"http://127.0.0.1:{port}", query
    instance.should_exit = True
    thread.join(timeout=10)


def test_upload_rerank_and_click_in_chromium(server: tuple[str, Path]) -> None:
    url, query = server
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url + "/")
            assert "galleria" in page.title()
            assert page.locator("input[name=k1]").is_disabled()  # re-ranking is off at first
            page.set_input_files("#image", str(query))
            page.fill("input[name=k]", "6")
            page.check("#rerank")
            assert page.locator("input[name=k1]").is_enabled()
            page.fill("input[name=k1]", "6")
            page.fill("input[name=k2]", "2")
            page.fill("input[name=pool]", "20")
            page.click("#search")
            page.wait_for_selector("#reranked .item")
            plain = page.locator("#plain .item")
            reranked = page.locator("#reranked .item")
            assert plain.count() == 6 and reranked.count() == 6
            assert all("blue/" in (plain.nth(i).get_attribute("data-path") or "") for i in range(4))
            assert reranked.locator(".change").count() == 6
            for i in range(6):  # every thumbnail was served and decoded by the browser
                image = plain.nth(i).locator("img")
                image.scroll_into_view_if_needed()  # thumbnails load lazily
                width = image.evaluate(
                    "img => img.complete && img.naturalWidth ? img.naturalWidth"
                    " : new Promise(done => { img.onload = () => done(img.naturalWidth);"
                    " img.onerror = () => done(0); setTimeout(() => done(img.naturalWidth), 20000); })"
                )
                assert width > 0
            # Click a re-ranked result: the page searches by that gallery image, re-ranking still on.
            clicked = reranked.nth(0).get_attribute("data-path")
            reranked.nth(0).locator("a").click()
            page.wait_for_selector(".query-line code")
            assert page.locator(".query-line code").inner_text() == clicked
            assert page.locator("#reranked .item").count() == 6
            assert page.locator("#plain .item.hit").count() >= 4  # same class folder marked
            shot = os.environ.get("GALLERIA_SCREENSHOT")
            if shot:
                page.screenshot(path=shot, full_page=True)
            # A bad upload: a message on the page, never a traceback.
            bad = Path(str(query) + ".txt")
            bad.write_text("not an image")
            page.set_input_files("#image", str(bad))
            page.click("#search")
            page.wait_for_selector("#error")
            assert "not an image" in page.locator("#error").inner_text()
        finally:
            browser.close()
