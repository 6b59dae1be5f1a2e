"""Issue 36: a map larger than one answer in a real browser — a sample first, more points on zoom.

The server sends at most ``MAP_LEVEL`` points at once (set to 40 here for a map of 400): the page
draws that sample, asks for the points of the view when the wheel zooms, shows every point once few
enough lie in view, and a rectangle dragged on the zoomed map is listed by the server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")
import uvicorn  # noqa: E402

from _support.browser import CHROMIUM, free_port, watched_page  # noqa: E402
from galleria import InMemoryImageEmbeddingStore  # noqa: E402
from galleria.store.gallery_map import gallery_map  # noqa: E402
from galleria.web import create_app  # noqa: E402
from galleria.web.routes import map as map_routes  # noqa: E402

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)

COUNT, LEVEL = 400, 40


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("levels") / "photos"
    rng = np.random.default_rng(4)
    paths = []
    for label in range(4):
        (root / f"label{label}").mkdir(parents=True)
    for i in range(COUNT):
        path = root / f"label{i % 4}" / f"{i:03d}.png"
        Image.new("RGB", (12, 12), (40 + 50 * (i % 4), 90, 120)).save(path)
        paths.append(str(path))
    vectors = np.repeat(np.eye(4, 6) * 4, COUNT // 4, axis=0)[np.argsort(np.arange(COUNT) % 4, kind="stable")]
    vectors = vectors + rng.normal(size=(COUNT, 6))
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, vectors, space="l2")
    gallery_map(store, method="pca")  # kept on the store: the page shows it at once
    patch = pytest.MonkeyPatch()
    patch.setattr(map_routes, "MAP_LEVEL", LEVEL)
    app = create_app(store, store_name="levels.safetensors")
    port = free_port()
    instance = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    for _ in range(200):
        if instance.started:
            break
        time.sleep(0.05)
    assert instance.started, "the server did not start"
    yield f"http://127.0.0.1:{port}"
    instance.should_exit = True
    thread.join(timeout=10)
    patch.undo()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield instance
        finally:
            instance.close()


def _settled(page: Any) -> None:
    page.wait_for_function(
        "() => { const c = document.getElementById('map'); return c.dataset.drawn === c.dataset.asked; }"
    )


def test_zooming_asks_for_the_points_in_view(server: str, browser: Any) -> None:
    page, problems = watched_page(browser)
    page.set_viewport_size({"width": 1100, "height": 1000})
    page.goto(server + "/map")
    page.wait_for_selector("#map[data-ready='1']", timeout=120_000)
    canvas = page.locator("#map")
    assert canvas.get_attribute("data-points") == str(COUNT)
    assert canvas.get_attribute("data-shown") == str(LEVEL)  # the sample, not every point
    box = canvas.bounding_box()
    rows = page.request.get(server + "/api/map").json()["rows"]
    missing = next(row for row in range(COUNT) if row not in rows)
    assert page.evaluate("r => document.getElementById('map').galleriaPoint(r)", missing) is None
    anchor = page.evaluate("r => document.getElementById('map').galleriaPoint(r)", rows[0])
    assert anchor is not None
    seen = []
    for _ in range(6):  # zoom in around one point of the sample
        page.mouse.move(*anchor)
        page.mouse.wheel(0, -300)
        _settled(page)
        seen.append(page.locator("#map-level").inner_text())
        anchor = page.evaluate("r => document.getElementById('map').galleriaPoint(r)", rows[0]) or anchor
    assert int(canvas.get_attribute("data-asked")) == 6
    assert "every image in view is shown" in seen[-1], seen
    assert any("zoom in for more" in text for text in seen[:2]), seen
    # a rectangle over the whole zoomed canvas: the server lists the images in view, fewer than all
    page.mouse.move(box["x"] + 3, box["y"] + 3)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] - 3, steps=6)
    page.mouse.up()
    page.wait_for_selector("#map-region:not([hidden]) #region-grid li")
    total = int(page.locator("#region-count").inner_text().split()[0])
    assert 1 <= total < COUNT
    page.click("#zoom-reset")
    _settled(page)
    assert canvas.get_attribute("data-shown") == str(LEVEL)
    assert problems == []
