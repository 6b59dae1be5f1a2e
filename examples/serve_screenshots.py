"""Take the screenshots of ``galleria serve`` in ``docs/img/``: the handwritten digits, browsed and evaluated.

Runs ``galleria evaluate`` on the digits (pixel embedder, k-reciprocal re-ranking) with ``--out``,
builds a store of all the digits, serves it with ``--eval`` in this process and photographs four
views in Debian's chromium (``apt-get install chromium``; needs the web and dev extras)::

    python examples/serve_screenshots.py docs/img/
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path


def main(out: str) -> None:
    import uvicorn
    from playwright.sync_api import sync_playwright

    from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
    from galleria.cli import main as galleria
    from galleria.datasets import digits_folder, load_image_folder
    from galleria.evaluation import read_query_results
    from galleria.web import create_app

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from _support.browser import chromium_binary

    folder = digits_folder()
    work = Path(tempfile.mkdtemp())
    report = work / "report"
    code = galleria(
        ["evaluate", str(folder), "--embedder", "pixel:16:gray", "--rerank", "--n-queries", "300",
         "--report", str(report)]
    )  # fmt: skip
    assert code == 0
    paths = list(load_image_folder(folder).paths)
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=16, grayscale=True))
    store.build_store(progress=False)
    app = create_app(store, store_name="digits.safetensors", evaluation=read_query_results(report))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=8765, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = "http://127.0.0.1:8765"
    target = Path(out)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_binary(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})

        def shoot(address: str, name: str, wait: str) -> None:
            page.goto(url + address)
            page.wait_for_selector(wait)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(target / name))

        shoot("/?folder=3", "serve-browse.png", "#gallery .item")
        first = page.locator("#gallery .item").nth(5).get_attribute("data-path")
        shoot(f"/?path={first}&k=12&rerank=1", "serve-side-by-side.png", "#reranked .item")
        shoot("/eval", "serve-evaluation.png", "#queries .query-row")
        page.locator("#queries .query-row a").first.click()
        page.wait_for_selector("#recorded .item")
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(target / "serve-evaluation-query.png"))
        narrow = browser.new_page(viewport={"width": 420, "height": 900})
        narrow.goto(url + f"/?path={first}&k=6&rerank=1")
        narrow.wait_for_load_state("networkidle")
        narrow.screenshot(path=str(target / "serve-narrow.png"))
        browser.close()
    server.should_exit = True


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/img")
