"""Issue 28 §4–§6 in a real browser: the map (draw, hover, click, rectangle), duplicates, the full view.

Also an EXIF-rotated JPEG in the full view and the evaluation's per-label list and its label filter.

Playwright drives Debian's chromium (with :mod:`_support.browser`, as :mod:`test_web_browser` does)
against a live server. With
``GALLERIA_SCREENSHOTS=DIR`` it keeps screenshots of ``/map``, ``/duplicates``, ``/view`` and the
browse grid filtered by a map rectangle (those in ``docs/img/``). Skipped only when chromium is not installed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")
import uvicorn  # noqa: E402

from _support.browser import CHROMIUM, free_port, serving, watched_page  # noqa: E402
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder  # noqa: E402
from galleria.evaluation._query_types import QueryOutcome, QueryResults, RankedPaths  # noqa: E402
from galleria.web import create_app  # noqa: E402

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)

COLOURS = {"red": (200, 50, 50), "green": (60, 170, 70), "blue": (50, 70, 200), "yellow": (205, 190, 50)}


def _photo(colour: tuple[int, int, int], seed: int) -> np.ndarray:
    """A 480×320 picture: a shade of the colour, a diagonal gradient and large discs, each its own."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:320, 0:480]
    shade = np.clip(np.array(colour) + rng.normal(0, 35, 3), 0, 255)
    angle = rng.uniform(0, 2 * np.pi)
    ramp = 0.5 + 0.5 * (np.cos(angle) * x / 480 + np.sin(angle) * y / 320)
    base = shade[None, None, :] * (0.45 + 0.55 * ramp[..., None])
    for _ in range(6):
        cx, cy, r = rng.integers(0, 480), rng.integers(0, 320), rng.integers(30, 90)
        base[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.integers(0, 255, 3)
    return np.clip(base + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    root = tmp_path_factory.mktemp("collector-browser") / "photos"
    paths = []
    for label, colour in COLOURS.items():
        (root / label).mkdir(parents=True)
        for i in range(15):
            path = root / label / f"{label}_{i:02d}.jpg"
            Image.fromarray(_photo(colour, i + 100 * len(paths))).save(path, quality=90)
            paths.append(str(path))
    for label, i in (("red", 3), ("blue", 5), ("blue", 6)):  # planted copies: exact and re-encoded
        source = root / label / f"{label}_{i:02d}.jpg"
        (root / label / f"{label}_{i:02d}_copy.jpg").write_bytes(source.read_bytes())
        Image.open(source).resize((360, 240)).save(root / label / f"{label}_{i:02d}_small.jpg", quality=70)
        paths += [
            str(root / label / f"{label}_{i:02d}_copy.jpg"),
            str(root / label / f"{label}_{i:02d}_small.jpg"),
        ]
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    app = create_app(store, store_name="photos.safetensors")
    port = free_port()
    instance = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    for _ in range(200):
        if instance.started:
            break
        time.sleep(0.05)
    assert instance.started, "the server did not start"
    yield f"http://127.0.0.1:{port}", len(paths)
    instance.should_exit = True
    thread.join(timeout=10)


@pytest.fixture()
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield instance
        finally:
            instance.close()


def _shot(page: Any, name: str, full_page: bool = True) -> None:
    folder = os.environ.get("GALLERIA_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / name), full_page=full_page)


def test_the_map_draws_hovers_clicks_and_filters(server: tuple[str, int], browser: Any) -> None:
    url, count = server
    page, problems = watched_page(browser)
    page.set_viewport_size({"width": 1280, "height": 1100})  # the whole canvas on screen
    page.goto(url + "/map")
    page.wait_for_selector("#map[data-ready='1']", timeout=120_000)
    assert page.locator("#map").get_attribute("data-points") == str(count)
    assert page.locator("#map-legend li").count() == len(COLOURS)
    drawn = page.evaluate(  # points are drawn: coloured pixels on the canvas
        "() => { const c = document.getElementById('map'); const d = c.getContext('2d')"
        ".getImageData(0, 0, c.width, c.height).data; let n = 0;"
        " for (let i = 0; i < d.length; i += 4) { if (d[i] !== d[i + 1] || d[i + 1] !== d[i + 2]) n++; }"
        " return n; }"
    )
    assert drawn >= count
    x, y = page.evaluate("() => document.getElementById('map').galleriaPoint(0)")
    page.mouse.move(x + 40, y + 40)
    page.mouse.move(x, y)
    page.wait_for_selector("#map-hover:not([hidden])")
    hover = page.locator("#map-hover-image")
    page.wait_for_function("() => document.getElementById('map-hover-image').naturalWidth > 0")
    shown = page.locator("#map-hover-path").inner_text()
    assert hover.get_attribute("src") == "/thumb/" + shown
    _shot(page, "map.png", full_page=False)
    page.mouse.click(x, y)  # opens the image with its neighbours
    page.wait_for_url("**/?path=**")
    assert page.locator("#plain .item").count() > 0
    assert page.locator(".query-name code").inner_text() == shown
    page.goto(url + "/map")
    page.wait_for_selector("#map[data-ready='1']", timeout=120_000)
    box = page.locator("#map").bounding_box()
    page.mouse.move(box["x"] + 2, box["y"] + 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, steps=5)
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] - 2, steps=5)
    page.mouse.up()
    page.wait_for_selector("#map-region:not([hidden]) #region-grid li")
    assert page.locator("#region-count").inner_text() == f"{count} images in the rectangle"
    assert page.locator("#region-grid li").count() == min(count, 48)
    # A smaller rectangle around one point lists fewer images, that point's among them.
    x, y = page.evaluate("() => document.getElementById('map').galleriaPoint(5)")
    page.mouse.move(x - 3, y - 3)
    page.mouse.down()
    page.mouse.move(x + 3, y + 3, steps=4)
    page.mouse.move(x + 4, y + 4, steps=2)
    page.mouse.up()
    page.wait_for_function(
        "total => !document.getElementById('region-count').textContent.startsWith(total + ' ')", arg=count
    )
    paths = page.locator("#region-grid .path").all_inner_texts()
    assert 1 <= len(paths) < count and "red/red_05.jpg" in paths
    page.select_option("#colour", "duplicates")  # colour by duplicate group
    page.wait_for_function("() => document.querySelectorAll('#map-legend li').length === 2")
    assert problems == []


def test_the_duplicates_view(server: tuple[str, int], browser: Any) -> None:
    url, _ = server
    page, problems = watched_page(browser)
    page.goto(url + "/duplicates")
    page.wait_for_selector("#dup-count", timeout=120_000)  # the page reloads itself until ready
    groups = page.locator(".dup-group")
    assert groups.count() >= 3
    sizes = [int(text.split(" · ")[1].split()[0]) for text in page.locator(".dup-group h2").all_inner_texts()]
    assert sizes == sorted(sizes, reverse=True)
    assert all(groups.nth(i).locator(".keep-badge").count() == 1 for i in range(groups.count()))
    page.wait_for_function(  # the first thumbnails (the others load lazily, when scrolled to)
        "() => [...document.querySelectorAll('#group-1 li:nth-child(-n+4) img')]"
        ".every(i => i.complete && i.naturalWidth > 0)"
    )
    _shot(page, "duplicates.png")
    page.locator(".dup-group a").first.click()
    page.wait_for_url("**/view/**")
    assert problems == []


def test_the_view_zooms_and_steps_through_the_results(server: tuple[str, int], browser: Any) -> None:
    url, _ = server
    page, problems = watched_page(browser)
    page.goto(url + "/?path=green/green_04.jpg")
    links = page.locator("#plain a.view-link")
    targets = [links.nth(i).get_attribute("href") for i in range(3)]
    links.nth(1).click()
    page.wait_for_url("**" + targets[1])
    page.wait_for_function("() => document.getElementById('full').naturalWidth > 0")
    assert page.evaluate("() => document.getElementById('full').naturalWidth") == 480
    fitted = page.evaluate("() => document.getElementById('full').clientWidth")
    page.click("#zoom-in")
    assert page.locator("#zoom-level").inner_text().endswith("%")
    assert page.evaluate("() => document.getElementById('full').clientWidth") > fitted
    page.keyboard.press("0")
    assert page.locator("#zoom-level").inner_text() == "fit"
    _shot(page, "view.png", full_page=False)
    page.keyboard.press("ArrowRight")
    page.wait_for_url("**" + targets[2])
    page.keyboard.press("ArrowLeft")
    page.wait_for_url("**" + targets[1])
    page.keyboard.press("ArrowLeft")
    page.wait_for_url("**" + targets[0])
    page.keyboard.press("Escape")
    page.wait_for_url("**/?path=green/green_04.jpg")
    assert problems == []


def test_the_new_pages_fit_a_narrow_screen(server: tuple[str, int], browser: Any) -> None:
    url, _ = server
    page, problems = watched_page(browser, width=420)
    for address, ready in (
        ("/map", "#map[data-ready='1']"),
        ("/duplicates", "#dup-count"),
        ("/view/red/red_01.jpg", "#full"),
    ):
        page.goto(url + address)
        page.wait_for_selector(ready, timeout=120_000)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= page.evaluate("() => window.innerWidth"), address
    assert problems == []


def test_a_drawn_rectangle_filters_the_browse_grid(server: tuple[str, int], browser: Any) -> None:
    """Issue 28 §5: the rectangle drawn on the map filters the main browse grid (``/?map=...``)."""
    url, count = server
    page, problems = watched_page(browser)
    page.set_viewport_size({"width": 1280, "height": 1100})
    page.goto(url + "/map")
    page.wait_for_selector("#map[data-ready='1']", timeout=120_000)
    box = page.locator("#map").bounding_box()
    page.mouse.move(box["x"] + 2, box["y"] + 2)  # the left half of the map
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 4, box["y"] + box["height"] / 2, steps=5)
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] - 2, steps=5)
    page.mouse.up()
    page.wait_for_selector("#map-region:not([hidden]) #region-grid li")
    total = int(page.locator("#region-count").inner_text().split()[0])
    address = page.locator("#region-browse").get_attribute("href")
    assert address.startswith("/?map=") and 0 < total < count
    # What the grid must show, worked out here from the points the map sent and the rectangle.
    x0, y0, x1, y1 = (int(v) for v in address.removeprefix("/?map=").split(","))
    xy = page.request.get(url + "/api/map").json()["xy"]
    rows = [
        row
        for row in range(count)
        if min(x0, x1) <= xy[2 * row] <= max(x0, x1) and min(y0, y1) <= xy[2 * row + 1] <= max(y0, y1)
    ]
    expected = [page.request.get(f"{url}/api/map/item/{row}").json()["path"] for row in rows]
    assert len(expected) == total
    page.click("#region-browse")
    page.wait_for_url("**/?map=**")
    assert "inside the rectangle" in page.locator("#count").inner_text()
    page.wait_for_function(  # the first thumbnails (the others load lazily)
        "() => [...document.querySelectorAll('#gallery li:nth-child(-n+6) img')]"
        ".every(i => i.complete && i.naturalWidth > 0)"
    )
    _shot(page, "browse-map-filter.png", full_page=False)
    shown = page.locator("#gallery .item").evaluate_all("items => items.map(i => i.dataset.path)")
    while page.locator("#next").count():  # every page of the filtered grid
        page.click("#next")
        page.wait_for_load_state()
        shown += page.locator("#gallery .item").evaluate_all("items => items.map(i => i.dataset.path)")
    assert shown == expected
    page.click("#map-filter-clear")  # back to the whole gallery
    page.wait_for_url(url + "/")
    assert str(count) in page.locator("#count").inner_text()
    assert problems == []


# Two features tested over HTTP in tests/web/test_web_collector.py, here as the browser shows them ---------

#: Each label's AP@100 after re-ranking in the made-up evaluation (before: 0.5 for every query).
LABEL_AP = {"red": 0.9, "green": 0.5, "blue": 0.2}


def _made_up_evaluation(paths: list[str]) -> QueryResults:
    """Three queries a label (``paths`` are ``label/…``), each with :data:`LABEL_AP`'s AP for its label."""
    queries = []
    for label, after in LABEL_AP.items():
        mine = [path for path in paths if Path(path).parent.name == label]
        others = [path for path in paths if Path(path).parent.name != label]
        for i, path in enumerate(mine[:3]):
            ranked = RankedPaths(tuple(others[:3]), (i == 0, False, False))
            queries.append(QueryOutcome(path, label, {"plain": 0.5, "rerank": after}, ranked, ranked))
    configurations = [
        {"name": "plain", "title": "plain", "settings": {"rerank": False}, "map@100": 0.5},
        {"name": "rerank", "title": "re-ranked", "settings": {"rerank": True}, "map@100": 0.53},
    ]
    return QueryResults("made up", ("plain", "rerank"), 3, configurations, queries)


@pytest.fixture(scope="module")
def labelled_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, np.ndarray]]:
    """A gallery with a JPEG stored sideways (EXIF orientation 6) and a made-up evaluation of it."""
    root = tmp_path_factory.mktemp("labelled-browser") / "photos"
    paths = []
    for label, colour in COLOURS.items():
        if label == "yellow":
            continue
        (root / label).mkdir(parents=True)
        for i in range(4):
            path = root / label / f"{label}_{i}.jpg"
            Image.fromarray(_photo(colour, i + 10 * len(paths))[:80, :120]).save(path, quality=90)
            paths.append(str(path))
    # Stored 120 wide and 40 high, its left half red and its right half blue; orientation 6 says
    # "turn 90° clockwise to show": upright it is 40 wide and 120 high, red on top, blue below.
    stored = np.zeros((40, 120, 3), dtype=np.uint8)
    stored[:, :60] = (220, 20, 20)
    stored[:, 60:] = (20, 20, 220)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(stored).save(root / "red" / "turned.jpg", exif=exif.tobytes(), quality=95)
    paths.append(str(root / "red" / "turned.jpg"))
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    on_disk = np.asarray(Image.open(root / "red" / "turned.jpg"))  # the pixel array as stored
    app = create_app(store, store_name="photos.safetensors", evaluation=_made_up_evaluation(paths))
    with serving(app) as url:
        yield url, on_disk


def test_the_full_view_shows_an_exif_rotated_jpeg_upright(
    labelled_server: tuple[str, np.ndarray], browser: Any
) -> None:
    url, stored = labelled_server
    page, problems = watched_page(browser)
    page.goto(url + "/view/red/turned.jpg")
    page.wait_for_function("() => document.getElementById('full').naturalWidth > 0")
    width, height = page.evaluate(
        "() => { const i = document.getElementById('full'); return [i.naturalWidth, i.naturalHeight]; }"
    )
    assert stored.shape[:2] == (40, 120)  # height, width as stored
    assert (width, height) == (stored.shape[0], stored.shape[1])  # swapped: shown upright
    top, bottom = page.evaluate(  # red on top, blue below: turned clockwise, not anticlockwise
        "() => { const i = document.getElementById('full'); const c = document.createElement('canvas');"
        " c.width = i.naturalWidth; c.height = i.naturalHeight; const g = c.getContext('2d');"
        " g.drawImage(i, 0, 0); const at = y => [...g.getImageData(c.width >> 1, y, 1, 1).data];"
        " return [at(10), at(c.height - 10)]; }"
    )
    assert top[0] > 150 > top[2] and bottom[2] > 150 > bottom[0], (top, bottom)
    assert problems == []


def test_the_evaluation_lists_labels_worst_first_and_filters(
    labelled_server: tuple[str, np.ndarray], browser: Any
) -> None:
    url, _ = labelled_server
    page, problems = watched_page(browser)
    page.goto(url + "/eval")
    rows = page.locator("#per-label tbody tr")
    labels = rows.locator("td:first-child a").all_inner_texts()
    assert labels == sorted(LABEL_AP, key=LABEL_AP.__getitem__)  # the lowest mAP@100 first
    after = [float(text.split("→")[1]) for text in rows.locator("td:nth-child(4)").all_inner_texts()]
    assert after == sorted(after) and after[0] < after[-1]
    assert page.locator("#queries .query-row").count() == 3 * len(LABEL_AP)
    assert page.locator("#label-filter").count() == 0
    page.locator("#per-label a", has_text="green").click()  # the label filter
    page.wait_for_url("**/eval?label=green")
    shown = page.locator("#queries .query-row .label").all_inner_texts()
    assert shown == ["green"] * 3
    assert "green" in page.locator("#label-filter").inner_text()
    assert page.locator("#per-label tr.compared td:first-child").inner_text() == "green"
    page.locator("#label-filter a").click()  # back to every label
    page.wait_for_url(url + "/eval")
    assert page.locator("#queries .query-row").count() == 3 * len(LABEL_AP)
    assert problems == []
