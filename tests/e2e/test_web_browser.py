"""``galleria serve`` in a real browser: Playwright drives Debian's chromium against a live server.

Every flow of the page: browse the gallery (pages, class folder, file name), click an image to
search by it, upload an image and change a setting (the same image is searched again), a text query
twice, the back button, the evaluation view of ``galleria evaluate --report`` and its side-by-side
view; each page at a 420 px wide viewport without horizontal scrolling, and no error in the
browser's console (the CSP refuses inline scripts and styles). ``GALLERIA_SCREENSHOTS=DIR`` keeps
screenshots of the browse page, the side-by-side view and the evaluation view (those in ``docs/``).
Skipped only when chromium is not installed (``.ci/run`` installs it: ``apt-get install chromium``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")

from _support.browser import CHROMIUM, serving, watched_page  # noqa: E402
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder  # noqa: E402
from galleria.cli import main as cli_main  # noqa: E402
from galleria.evaluation._query_reading import read_query_results  # noqa: E402
from galleria.web import create_app  # noqa: E402

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)

COLOURS = {"red": (200, 50, 50), "orange": (205, 125, 45), "blue": (50, 70, 200), "yellow": (205, 190, 50)}
#: A long class folder name, as real galleries have (the page must wrap it, never cut its middle).
LONG = "food_fruit_and_vegetables_stamps"


class _TextEmbedder(PixelEmbedder):
    """The pixel embedder with a text side: a text names a colour and embeds as that colour's image."""

    def embed_text(self, texts: Any) -> np.ndarray:
        images = [np.full((8, 8, 3), COLOURS[text.split()[-1]], dtype=np.uint8) for text in texts]
        return self.embed(images)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    base = tmp_path_factory.mktemp("browser")
    root = base / "gallery"
    rng = np.random.default_rng(1)
    paths = []
    folders = {**{label: label for label in COLOURS}, "yellow": LONG}
    for label, colour in COLOURS.items():
        (root / folders[label]).mkdir(parents=True)
        for i in range(16):
            shift = rng.normal(0, 40, 3)  # each image its own shade, so neighbouring classes overlap
            noise = rng.normal(0, 70, (48, 64, 3))
            pixels = np.clip(np.array(colour) + shift + noise, 0, 255).astype(np.uint8)
            name = f"{label}_{i}.png" if label != "yellow" else f"{LONG}_{i:04d}_with_a_long_name.png"
            path = root / folders[label] / name
            Image.fromarray(pixels).save(path)
            paths.append(str(path))
    report = base / "report"
    code = cli_main(
        ["evaluate", str(root), "--embedder", "pixel:8", "--rerank", "--k1", "6", "--k2", "2",
         "--pool", "30", "--query-fraction", "0.25", "--report", str(report), "--index", "exact"]
    )  # fmt: skip
    assert code == 0 and (report / "queries.json").is_file()
    store = InMemoryImageEmbeddingStore(paths, _TextEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    app = create_app(store, store_name="colours.safetensors", evaluation=read_query_results(report))
    query = base / "query.png"
    Image.new("RGB", (40, 40), COLOURS["blue"]).save(query)
    with serving(app) as address:
        yield address, query


def _params(url: str) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(urlsplit(url).query).items()}


def _all_thumbnails_load(page: Any, selector: str) -> None:
    images = page.locator(selector)
    for i in range(images.count()):
        image = images.nth(i)
        image.scroll_into_view_if_needed()  # thumbnails load lazily
        width = image.evaluate(
            "img => img.complete && img.naturalWidth ? img.naturalWidth"
            " : new Promise(done => { img.onload = () => done(img.naturalWidth);"
            " img.onerror = () => done(0); setTimeout(() => done(img.naturalWidth), 20000); })"
        )
        assert width > 0, image.get_attribute("src")


def _no_horizontal_overflow(page: Any) -> None:
    width = page.evaluate("() => document.documentElement.scrollWidth")
    viewport = page.evaluate("() => window.innerWidth")
    assert width <= viewport, f"{page.url}: content {width} px wide in a {viewport} px viewport"


@pytest.fixture()
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield instance
        finally:
            instance.close()


def _shot(page: Any, name: str) -> None:
    folder = os.environ.get("GALLERIA_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / name), full_page=True)


def test_browse_filter_and_click_to_query(server: tuple[str, Path], browser: Any) -> None:
    url, _ = server
    page, problems = watched_page(browser)
    page.goto(url + "/")
    assert "galleria" in page.title()
    assert page.locator("#count").inner_text().startswith("64 images · page 1 of 2")
    assert page.locator("#gallery .item").count() == 48
    page.click("#next")  # the second page
    page.wait_for_url("**page=2")
    assert page.locator("#gallery .item").count() == 16
    page.select_option("#folder", LONG)  # the folder list shows a class at once
    page.wait_for_url(f"**folder={LONG}**")
    items = page.locator("#gallery .item")
    assert items.count() == 16
    assert all((items.nth(i).get_attribute("data-path") or "").startswith(LONG) for i in range(16))
    path = items.first.locator(".path")  # the whole path, wrapped, and on hover the full path
    assert path.inner_text().replace("\n", "") == items.first.get_attribute("data-path")
    assert "…" not in path.inner_text()
    assert (path.get_attribute("title") or "").endswith(items.first.get_attribute("data-path") or "?")
    page.fill("#name", "_0003_")
    page.click("#filter-button")
    page.wait_for_url("**name=_0003_**")
    assert page.locator("#gallery .item").count() == 1
    _all_thumbnails_load(page, "#gallery img")
    page.goto(url + "/?folder=blue")
    _shot(page, "serve-browse.png")
    clicked = page.locator("#gallery .item").nth(2).get_attribute("data-path")
    page.locator("#gallery .item").nth(2).locator("a").click()  # click to query
    page.wait_for_selector("#plain .item")
    assert _params(page.url)["path"] == clicked
    assert page.locator(".query-line code").inner_text() == clicked
    assert page.locator("#plain .item.hit").count() >= 8  # same class folder marked
    page.go_back()
    page.wait_for_selector("#gallery")
    assert _params(page.url) == {"folder": "blue"}
    assert problems == []


def test_upload_then_change_settings_searches_the_same_image(server: tuple[str, Path], browser: Any) -> None:
    url, query = server
    page, problems = watched_page(browser)
    page.goto(url + "/")
    assert page.locator("input[name=k1]").is_disabled()  # re-ranking is off at first
    page.set_input_files("#image", str(query))
    page.fill("input[name=k]", "6")
    page.click("#search")
    page.wait_for_selector("#plain .item")
    first = _params(page.url)
    assert set(first) >= {"upload", "k", "rerank"} and first["k"] == "6" and first["rerank"] == "0"
    assert page.locator("#reranked").count() == 0
    _all_thumbnails_load(page, ".query-thumb, #plain img")  # the upload's preview too
    plain = [page.locator("#plain .item").nth(i).get_attribute("data-path") for i in range(6)]
    assert all("blue/" in (path or "") for path in plain[:4])
    # Tick re-ranking, change k and λ, search again: the same upload, no error.
    page.check("#rerank")
    assert page.locator("input[name=k1]").is_enabled()
    page.fill("input[name=k]", "5")
    page.fill("input[name=k1]", "6")
    page.fill("input[name=k2]", "2")
    page.fill("input[name=lambda]", "0.25")
    page.fill("input[name=pool]", "20")
    page.click("#search")
    page.wait_for_selector("#reranked .item")
    second = _params(page.url)
    assert second["upload"] == first["upload"] and second["rerank"] == "1" and second["lambda"] == "0.25"
    assert page.locator("#error").count() == 0
    assert page.locator("#plain .item").count() == 5 and page.locator("#reranked .item").count() == 5
    assert "λ 0.25" in page.locator("#reranked h2").inner_text()  # λ as given
    assert page.locator("#reranked .change").count() == 5
    scores = page.locator(".score").all_inner_texts()
    assert scores and not any(score.startswith("-0.0000") for score in scores)
    assert [page.locator("#plain .item").nth(i).get_attribute("data-path") for i in range(5)] == plain[:5]
    _shot(page, "serve-side-by-side.png")
    page.reload()  # the address alone reproduces the search
    page.wait_for_selector("#reranked .item")
    assert page.locator("#reranked .item").count() == 5
    page.go_back()  # the first search, with its own settings
    page.wait_for_selector("#plain .item")
    assert _params(page.url) == first and page.locator("#reranked").count() == 0
    assert page.input_value("input[name=k]") == "6"
    assert problems == []
    # A bad upload: a message on the page (a 400), never a traceback.
    bad = Path(str(query) + ".txt")
    bad.write_text("not an image")
    page.set_input_files("#image", str(bad))
    page.click("#search")
    page.wait_for_selector("#error")
    assert "not an image" in page.locator("#error").inner_text()
    assert problems == [f"400 {url}/"]


def test_text_query_twice_keeps_the_text(server: tuple[str, Path], browser: Any) -> None:
    url, _ = server
    page, problems = watched_page(browser)
    page.goto(url + "/")
    page.fill("#text", "something red")
    page.click("#search")
    page.wait_for_selector("#plain .item")
    assert page.input_value("#text") == "something red"
    assert page.locator(".query-line q").inner_text() == "something red"
    found = page.locator("#plain .item").evaluate_all("items => items.map(item => item.dataset.path)")
    assert found[0].startswith("red/") and sum(path.startswith("red/") for path in found) >= 6
    page.check("#expand")
    page.click("#search")  # the second search of the same text, with αQE
    page.wait_for_selector("#plain .item")
    assert page.input_value("#text") == "something red"
    assert _params(page.url)["text"] == "something red" and _params(page.url)["expand"] == "1"
    assert page.locator("#error").count() == 0
    assert "αQE" in page.locator("#plain h2").inner_text()
    assert problems == []


def test_evaluation_view(server: tuple[str, Path], browser: Any) -> None:
    url, _ = server
    page, problems = watched_page(browser)
    page.goto(url + "/eval")
    rows = page.locator("#queries .query-row")
    assert rows.count() == 16
    deltas = [float(text) for text in page.locator("#queries .delta").all_inner_texts()]
    assert deltas == sorted(deltas)  # the largest loss first
    _all_thumbnails_load(page, "#queries img")
    _shot(page, "serve-evaluation.png")
    rows.first.locator("a").click()
    page.wait_for_selector("#recorded #reranked .item")
    assert page.locator("#plain .item").count() == 20 and page.locator("#reranked .item").count() == 20
    assert page.locator("#plain .item.hit").count() + page.locator("#plain .item.miss").count() == 20
    _all_thumbnails_load(page, "#recorded img")
    _shot(page, "serve-evaluation-query.png")
    page.click("#next")
    page.wait_for_selector("#recorded")
    page.go_back()
    page.wait_for_selector("#recorded")
    page.click("#live")  # the same query searched live, re-ranked
    page.wait_for_selector("#reranked .item")
    assert _params(page.url)["rerank"] == "1" and page.locator("#error").count() == 0
    assert problems == []


def test_every_page_fits_a_narrow_screen(server: tuple[str, Path], browser: Any) -> None:
    url, _ = server
    page, problems = watched_page(browser, width=420)
    first = LONG + "/" + LONG + "_0001_with_a_long_name.png"
    for address in (
        "/",
        f"/?folder={LONG}",
        f"/?path={first}&rerank=1&k=6&pool=30",
        "/eval",
        "/eval/0",
        "/?k=abc",
    ):
        page.goto(url + address)
        page.wait_for_load_state("load")
        _no_horizontal_overflow(page)
    assert problems == []
