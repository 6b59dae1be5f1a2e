"""Issue 16 §3: the pages of ``galleria serve`` at GET addresses: browse, search, kept uploads, evaluation."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
from fastapi.testclient import TestClient

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.evaluation import RetrievalConfig
from galleria.evaluation._query_reading import read_query_results
from galleria.evaluation._query_types import QueryResults
from galleria.viewer import UploadStore
from galleria.web import create_app

COLOURS = {"red": (210, 40, 40), "green": (40, 190, 60), "blue": (40, 60, 210)}


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, InMemoryImageEmbeddingStore]:
    root = tmp_path_factory.mktemp("pages") / "gallery"
    rng = np.random.default_rng(0)
    paths = []
    for label, colour in COLOURS.items():
        (root / label).mkdir(parents=True)
        for i in range(20):
            pixels = np.clip(np.array(colour) + rng.normal(0, 30, (20, 24, 3)), 0, 255).astype(np.uint8)
            path = root / label / f"{label} {i:02d}.png"  # a space: addresses must quote it
            Image.fromarray(pixels).save(path)
            paths.append(str(path))
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    return root, store


@pytest.fixture()
def client(gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> TestClient:
    return TestClient(create_app(gallery[1], store_name="colours.safetensors", max_upload_bytes=50_000))


def _png(colour: tuple[int, int, int], size: tuple[int, int] = (16, 16)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, "PNG")
    return buffer.getvalue()


def _params(url: str) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(urlsplit(url).query).items()}


def _items(html: str, column: str | None = None) -> list[str]:
    """The data-path of every result item (of one column when given)."""
    if column is not None:
        html = html.split(f'id="{column}"', 1)[1].split("</section>", 1)[0]
    return re.findall(r'<li class="item[^"]*" data-path="([^"]*)"', html)


def _upload(client: TestClient, colour: tuple[int, int, int], **fields: str) -> Any:
    return client.post(
        "/", files={"image": ("q.png", _png(colour), "image/png")}, data=fields, follow_redirects=False
    )


# Results at GET addresses ---------------------------------------------------------------------------


def test_an_upload_is_kept_and_searched_again_with_other_settings(client: TestClient) -> None:
    posted = _upload(client, COLOURS["blue"], k="4")
    assert posted.status_code == 303
    location = posted.headers["location"]
    first = _params(location)
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", first["upload"])  # 128 random bits
    assert first["k"] == "4" and first["rerank"] == "0"
    page = client.get(location)
    assert page.status_code == 200 and len(_items(page.text, "plain")) == 4
    assert all(path.startswith("blue/") for path in _items(page.text, "plain"))
    assert f'name="upload" id="current" value="{first["upload"]}"' in page.text  # the form keeps it
    assert f'src="/upload/{first["upload"]}.jpg"' in page.text
    preview = client.get(f"/upload/{first['upload']}.jpg")
    assert preview.status_code == 200 and preview.headers["content-type"] == "image/jpeg"
    # The form sent again with re-ranking on and no new image: the same upload, other settings.
    again = client.post(
        "/",
        data={"upload": first["upload"], "k": "3", "rerank": ["0", "1"], "k1": "5", "k2": "2", "pool": "12"},
        follow_redirects=False,
    )
    assert again.status_code == 303
    second = _params(again.headers["location"])
    assert second["upload"] == first["upload"] and second["rerank"] == "1" and second["k1"] == "5"
    page = client.get(again.headers["location"])
    assert page.status_code == 200 and "exactly one query" not in page.text
    assert len(_items(page.text, "plain")) == 3 and len(_items(page.text, "reranked")) == 3
    # The same search by the API, by the upload's id.
    answer = client.post("/api/search", json={"upload": first["upload"], "k": 3}).json()
    assert [item["path"].split("/")[-2] for item in answer["plain"]] == ["blue"] * 3


def test_two_uploads_are_two_ids_and_a_forgotten_one_says_so(
    gallery: tuple[Path, InMemoryImageEmbeddingStore],
) -> None:
    client = TestClient(create_app(gallery[1], uploads=UploadStore(max_items=2)))
    ids = [_params(_upload(client, colour).headers["location"])["upload"] for colour in COLOURS.values()]
    assert len(set(ids)) == 3
    gone = client.get(f"/?upload={ids[0]}")  # the oldest of three, with room for two
    assert gone.status_code == 404 and "upload it again" in gone.text
    assert 'name="upload"' in gone.text  # the form still holds it (and a new image replaces it)
    assert client.get(f"/upload/{ids[0]}.jpg").status_code == 404
    assert client.get(f"/?upload={ids[2]}").status_code == 200
    for bad in ("../../etc/passwd", "x" * 22, "", "%00"):
        answer = client.get("/?upload=" + bad)
        assert answer.status_code in (200, 404)  # never 500 ("" is no query: the gallery)
        assert client.get(f"/upload/{bad}.jpg").status_code == 404
    api = client.post("/api/search", json={"upload": "x" * 22})
    assert api.status_code == 404 and "upload it again" in api.json()["detail"]


def test_gallery_path_and_text_queries_live_at_their_address(
    client: TestClient, gallery: tuple[Path, InMemoryImageEmbeddingStore]
) -> None:
    posted = client.post("/", data={"path": "green/green 03.png", "k": "5"}, follow_redirects=False)
    assert posted.status_code == 303
    assert posted.headers["location"].startswith("/?path=green/green%2003.png&k=5&expand=0&rerank=0")
    page = client.get(posted.headers["location"])
    assert page.status_code == 200 and len(_items(page.text, "plain")) == 5
    assert "green/green 03.png" not in _items(page.text, "plain")  # the query is left out
    # Every result links to its own search, with the same settings.
    links = re.findall(r'<a href="([^"]+)" title="search by', page.text)
    assert links and all(_params(link.replace("&amp;", "&"))["k"] == "5" for link in links)
    # No text side in this store: a text query says so, with a 400.
    text = client.get("/?text=a%20red%20thing")
    assert text.status_code == 400 and "clip" in text.text


class _TextEmbedder(PixelEmbedder):
    def embed_text(self, texts: Any) -> np.ndarray:
        images = [np.full((8, 8, 3), COLOURS[text.split()[-1]], dtype=np.uint8) for text in texts]
        return self.embed(images)


def test_a_text_query_keeps_its_text(gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> None:
    store = InMemoryImageEmbeddingStore(gallery[1].paths, _TextEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    client = TestClient(create_app(store))
    posted = client.post("/", data={"text": "a bright red", "k": "4"}, follow_redirects=False)
    assert _params(posted.headers["location"])["text"] == "a bright red"
    page = client.get(posted.headers["location"])
    assert 'id="text" value="a bright red"' in page.text
    assert all(path.startswith("red/") for path in _items(page.text, "plain"))
    # Sent again as the form sends it (the text still in its box), with re-ranking: the same text.
    again = client.post(
        "/", data={"text": "a bright red", "k": "4", "rerank": ["0", "1"]}, follow_redirects=False
    )
    page = client.get(again.headers["location"])
    assert 'id="text" value="a bright red"' in page.text and len(_items(page.text, "reranked")) == 4
    # A new image replaces the text (the page's script also empties the box).
    image = client.post(
        "/",
        data={"text": "a bright red"},
        files={"image": ("q.png", _png(COLOURS["green"]), "image/png")},
        follow_redirects=False,
    )
    assert "upload" in _params(image.headers["location"]) and "text" not in _params(image.headers["location"])


def test_the_form_with_nothing_to_search_or_a_bad_image(client: TestClient) -> None:
    empty = client.post("/", data={"k": "3"}, files={"image": ("", b"", "application/octet-stream")})
    assert empty.status_code == 400 and "choose an image" in empty.text
    bad = client.post("/", files={"image": ("q.png", b"nope", "image/png")})
    assert bad.status_code == 400 and "not an image" in bad.text and "Traceback" not in bad.text
    kept = client.post(  # the form keeps what was sent: re-ranking on, k
        "/", data={"k": "7", "rerank": ["0", "1"]}, files={"image": ("q.png", b"nope", "image/png")}
    )
    assert kept.status_code == 400 and 'name="k" min="1" max="1000" value="7"' in kept.text
    assert "checked" in kept.text.split('id="rerank"')[1][:30]
    big = client.post("/", files={"image": ("q.png", b"\x89PNG" + b"0" * 60_000, "image/png")})
    assert big.status_code == 413
    two = client.post(
        "/",
        files=[
            ("image", ("a.png", _png((1, 2, 3)), "image/png")),
            ("image", ("b.png", _png((1, 2, 3)), "image/png")),
        ],
    )
    assert two.status_code == 400 and "one image" in two.text
    # Bad settings: the address keeps what was sent, and its page names the field.
    posted = client.post("/", data={"path": "red/red 01.png", "k": "0"}, follow_redirects=False)
    assert posted.status_code == 303 and _params(posted.headers["location"])["k"] == "0"
    page = client.get(posted.headers["location"])
    assert page.status_code == 400 and "k must be between 1 and 1000, got 0" in page.text
    assert 'name="k" min="1" max="1000" value="0"' in page.text  # the form as it was sent
    # A bad parameter with re-ranking on: the page still shows re-ranking (and αQE) on.
    bad_k1 = client.get("/?path=red/red%2001.png&rerank=1&expand=1&k1=5&k2=6")
    assert bad_k1.status_code == 400 and "k2 must not exceed k1" in bad_k1.text
    assert "checked" in bad_k1.text.split('id="rerank"')[1][:30]
    assert "checked" in bad_k1.text.split('id="expand"')[1][:30]
    assert 'name="k1" min="1" max="10000" value="5"' in bad_k1.text
    off = client.get("/?path=red/red%2001.png&rerank=0&k1=5&k2=6")
    assert "checked" not in off.text.split('id="rerank"')[1][:30]


def test_errors_name_the_field_as_sent(client: TestClient) -> None:
    for field, value, message in (
        ("lambda", 2, "lambda must"),
        ("lambda_value", 2, "lambda_value must"),
        ("alpha", -1, "alpha must"),
        ("neighbors", 0, "neighbors must"),
    ):
        answer = client.post(
            "/api/search", json={"path": "red/red 01.png", "rerank": True, "expand": True, field: value}
        )
        assert answer.status_code == 400
        detail = answer.json()["detail"]
        assert detail.startswith(message), detail
        assert "expansion_" not in detail and (field == "lambda_value" or "lambda_value" not in detail)
    page = client.get("/?path=red/red%2001.png&rerank=1&lambda=1.5")
    assert page.status_code == 400 and "lambda must" in page.text and "lambda_value" not in page.text


def test_scores_are_rounded_without_negative_zero_and_lambda_is_shown_as_given(client: TestClient) -> None:
    page = client.get("/?path=red/red%2001.png&k=8&rerank=1&lambda=0.25&k1=5&k2=2&pool=20")
    scores = re.findall(r'<span class="score"[^>]*>([^<]*)</span>', page.text)
    assert len(scores) == 16 and all(re.fullmatch(r"\d+\.\d{4}", score) for score in scores)
    assert "λ 0.25" in page.text and 'name="lambda" step="any" min="0" max="1" value="0.25"' in page.text
    upload = _params(_upload(client, COLOURS["red"], k="3").headers["location"])["upload"]
    assert "-0.0000" not in client.get(f"/?upload={upload}&k=3&rerank=1&pool=10").text


def test_paths_are_shown_whole(client: TestClient, gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> None:
    page = client.get("/?folder=red")
    path = str(gallery[0] / "red" / "red 07.png")
    assert f'<div class="path" title="{path}">red/red 07.png</div>' in page.text
    assert "…" not in page.text


# Browse ---------------------------------------------------------------------------------------------


def test_the_landing_page_browses_the_gallery(client: TestClient) -> None:
    home = client.get("/")
    assert home.status_code == 200 and "60 images · page 1 of 2" in home.text
    assert len(_items(home.text)) == 48 and 'id="next"' in home.text
    second = client.get("/?page=2")
    assert len(_items(second.text)) == 12 and set(_items(second.text)).isdisjoint(_items(home.text))
    assert client.get("/?page=99").text.count('class="item"') == 12  # past the last: the last
    green = client.get("/?folder=green")
    assert _items(green.text) == [f"green/green {i:02d}.png" for i in range(20)]
    named = client.get("/?name=%20RED%201%20")  # case and surrounding blanks ignored
    assert _items(named.text) == [f"red/red {i}.png" for i in range(10, 20)]
    both = client.get("/?folder=blue&name=BLUE%2005")
    assert _items(both.text) == ["blue/blue 05.png"]
    nothing = client.get("/?name=zebra")
    assert nothing.status_code == 200 and "0 images" in nothing.text and _items(nothing.text) == []
    # Click to query: each image links to its search.
    assert 'href="/?path=blue/blue%2005.png"' in both.text
    for query, message in (
        ("folder=purple", "folder must be one of"),
        ("page=0", "page must be a positive integer"),
        ("page=two", "page must be a positive integer"),
        ("name=" + "x" * 300, "name must be at most 200 characters"),
    ):
        answer = client.get("/?" + query)
        assert answer.status_code == 400 and message in answer.text, query
        assert len(_items(answer.text)) == 48  # the gallery is still there


# serve --settings ------------------------------------------------------------------------------------


def test_settings_file_sets_the_api_defaults_and_a_bad_one_is_refused(
    gallery: tuple[Path, InMemoryImageEmbeddingStore],
) -> None:
    tuned = RetrievalConfig(
        "tuned", query_expansion=True, expansion_neighbors=5, rerank=True, k1=7, k2=3, pool=30
    )
    client = TestClient(create_app(gallery[1], defaults=tuned))
    implicit = client.post("/api/search", json={"path": "red/red 01.png"}).json()
    explicit = client.post(
        "/api/search",
        json={
            "path": "red/red 01.png",
            "expand": True,
            "neighbors": 5,
            "rerank": True,
            "k1": 7,
            "k2": 3,
            "pool": 30,
        },
    ).json()
    assert implicit["reranked"] is not None and implicit["plain"] == explicit["plain"]
    assert implicit["reranked"] == explicit["reranked"]
    page = client.get("/?path=red/red%2001.png")
    assert 'id="reranked"' in page.text and "αQE" in page.text  # a shared address without settings
    off = client.get("/?path=red/red%2001.png&rerank=0&expand=0")
    assert 'id="reranked"' not in off.text
    with pytest.raises(ValueError, match="pool must be between 1 and 1000"):
        create_app(gallery[1], defaults=RetrievalConfig("tuned", rerank=True, pool=5000))


# Evaluation view ------------------------------------------------------------------------------------


def _evaluation(gallery: tuple[Path, InMemoryImageEmbeddingStore], changes: list[float]) -> QueryResults:
    """A made-up evaluation of some gallery images (with one query that is not in the gallery)."""
    from galleria.evaluation._query_types import QueryOutcome, RankedPaths

    paths = gallery[1].paths
    queries = []
    for i, change in enumerate(changes):
        query = paths[i] if i else "/elsewhere/not-served.png"
        before = tuple(paths[20 : 20 + 5])
        after = (*reversed(before[:4]), "/elsewhere/other.png")
        queries.append(
            QueryOutcome(
                query=query,
                label="red",
                ap={"plain": 0.5, "rerank": 0.5 + change},
                before=RankedPaths(before, (True, False, True, False, False)),
                after=RankedPaths(after, (False, True, False, True, False), (4, 3, 2, 1, None)),
            )
        )
    configurations = [
        {
            "name": "plain",
            "title": "plain retrieval",
            "settings": {"query_expansion": False, "rerank": False},
            "map@100": 0.5,
        },
        {
            "name": "rerank",
            "title": "k-reciprocal (k1=6)",
            "settings": {
                "query_expansion": False,
                "rerank": True,
                "k1": 6,
                "k2": 2,
                "lambda_value": 0.3,
                "pool": 40,
            },
            "map@100": 0.5,
        },
    ]
    return QueryResults("made up", ("plain", "rerank"), 5, configurations, queries)


def test_the_evaluation_lists_the_worst_change_first(
    gallery: tuple[Path, InMemoryImageEmbeddingStore],
) -> None:
    changes = [0.1, -0.3, 0.0, -0.05, 0.2] + [0.01 * i for i in range(55)]
    client = TestClient(create_app(gallery[1], evaluation=_evaluation(gallery, changes)))
    first = client.get("/eval")
    assert first.status_code == 200
    order = [int(n) for n in re.findall(r'<a href="/eval/(\d+)" class="open">', first.text)]
    expected = sorted(range(len(changes)), key=lambda i: (changes[i], i))
    assert order == expected[:50]
    second = client.get("/eval?page=2")
    assert [int(n) for n in re.findall(r'<a href="/eval/(\d+)" class="open">', second.text)] == expected[50:]
    deltas = re.findall(r'<span class="delta">([^<]*)</span>', first.text)
    assert deltas[0] == "-0.3000" and deltas[1] == "-0.0500" and "-0.0000" not in deltas
    assert client.get("/eval?page=x").status_code == 400
    # One query: the two recorded lists, marks and earlier ranks, and a live search of it.
    one = client.get("/eval/1")
    assert one.status_code == 200
    assert _items(one.text, "plain") == [f"green/green {i:02d}.png" for i in range(5)]
    assert _items(one.text, "reranked")[-1] == "/elsewhere/other.png"  # not served: its name only
    assert "not in this gallery" in one.text and "/thumb/elsewhere" not in one.text
    assert one.text.count('class="item hit"') == 4 and "▲3" in one.text and ">new<" in one.text
    live = re.search(r'<a href="([^"]+)" id="live">', one.text)
    assert live is not None
    params = _params(live[1].replace("&amp;", "&"))
    assert params["path"] == "red/red 01.png" and params["rerank"] == "1" and params["k1"] == "6"
    assert client.get(live[1].replace("&amp;", "&")).status_code == 200
    outside = client.get("/eval/0")  # a query the served gallery does not hold: no picture, no live link
    assert (
        outside.status_code == 200
        and 'id="live"' not in outside.text
        and "/elsewhere/not-served.png" in outside.text
    )
    for bad in ("60", "-1", "x", "1.0"):
        assert client.get(f"/eval/{bad}").status_code == 404


def test_the_evaluation_summary_shows_recall_at_1_beside_map_and_the_warning(
    tmp_path: Path, gallery: tuple[Path, InMemoryImageEmbeddingStore]
) -> None:
    """Re-ranking that lowers Recall@1 (as on issue 33's unseen gallery): the page gives plain and
    re-ranked Recall@1 beside mAP@100, and the warning ``evaluate`` prints, as text."""
    import dataclasses
    import html

    from galleria.cli._evaluation_run import lowering_warnings
    from galleria.evaluation import ConfigResult, standard_configs
    from galleria.evaluation.per_query import query_results, write_query_results

    plain, _, reranked = standard_configs()
    paths = gallery[1].paths[:6]
    labels = {path: "red" for path in gallery[1].paths}
    results = [
        ConfigResult(config, 6, recall, 1.0, mean_ap, 1.0, 1.0, np.zeros(1), np.zeros(1), np.full(6, mean_ap))
        for config, recall, mean_ap in ((plain, 0.9111, 0.746), (reranked, 0.8833, 0.799))
    ]
    warnings = lowering_warnings(results)
    assert "lowers Recall@1 from 0.9111 (plain retrieval) to 0.8833" in warnings[0]
    lists = {config.name: [paths[:5]] * 6 for config in (plain, reranked)}
    recorded = query_results(
        paths, ["red"] * 6, lists, results, labels, compared=("plain", reranked.name), title="unseen",
        warnings=warnings,
    )  # fmt: skip
    write_query_results(tmp_path / "queries.json", recorded)
    client = TestClient(create_app(gallery[1], evaluation=read_query_results(tmp_path)))  # as serve reads it
    page = client.get("/eval")
    assert page.status_code == 200
    table = re.search(r'<table class="configs" id="eval-configs">(.*?)</table>', page.text, re.S)
    assert table is not None
    assert re.findall(r"<th>([^<]*)</th>", table[1]) == ["configuration", "Recall@1", "mAP@100"]
    cells = re.findall(r'<td class="number">([^<]*)</td>', table[1])
    assert cells == ["0.9111", "0.7460", "0.8833", "0.7990"]  # plain, then re-ranked: Recall@1, mAP@100
    summary = re.search(r'<p class="legend" id="eval-summary">(.*?)</p>', page.text, re.S)
    assert summary is not None
    text = " ".join(re.sub(r"<[^>]+>", "", summary[1]).split())
    assert "Recall@1 0.9111 → 0.8833 (-0.0278)" in text and "mAP@100 0.7460 → 0.7990 (+0.0530)" in text
    box = re.search(r'<div class="warnings" id="eval-warnings" role="alert">(.*?)</div>', page.text, re.S)
    assert box is not None
    shown = [html.unescape(item) for item in re.findall(r'<li class="warning">(.*?)</li>', box[1])]
    assert shown == warnings  # each line as text: never a list's repr
    assert "[&#39;" not in page.text and "['" not in page.text
    # An evaluation written before Recall@1 and the warnings were recorded: no figure made up, no box.
    old = dataclasses.replace(
        recorded,
        configurations=[{k: v for k, v in e.items() if k != "recall@1"} for e in recorded.configurations],
        warnings=(),
    )
    page = TestClient(create_app(gallery[1], evaluation=old)).get("/eval")
    assert page.status_code == 200 and 'id="eval-warnings"' not in page.text
    assert "Recall@1 0.9111" not in page.text and "mAP@100 0.7460 → 0.7990" in page.text


def test_no_evaluation_pages_without_one(client: TestClient) -> None:
    for address in ("/eval", "/eval/0"):
        answer = client.get(address)
        assert answer.status_code == 404 and "--eval DIR" in answer.text
    assert 'href="/eval"' not in client.get("/").text


def test_the_pages_load_no_inline_script_or_style(client: TestClient) -> None:
    """The CSP is ``default-src 'self'``: every script and style must come from a file."""
    for address in ("/", "/?path=red/red%2001.png&rerank=1", "/?k=abc"):
        html = client.get(address).text
        assert "<script>" not in html and "<style" not in html and " style=" not in html
        assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/app.js">']
        assert " on" not in re.sub(r'"[^"]*"', '""', html).replace(" one", "")  # no onclick= etc.


def test_the_evaluation_of_the_cli_reads_back(
    tmp_path: Path, gallery: tuple[Path, InMemoryImageEmbeddingStore]
) -> None:
    """``galleria evaluate --report`` writes queries.json; ``serve --eval`` reads it back."""
    from galleria.cli import main

    report = tmp_path / "report"
    code = main(["evaluate", str(gallery[0]), "--embedder", "pixel:8", "--rerank", "--k1", "5", "--k2", "2",
                 "--pool", "20", "--n-queries", "9", "--report", str(report)])  # fmt: skip
    assert code == 0
    results = read_query_results(report)
    assert len(results.queries) == 9 and results.compared == ("plain", "rerank")
    assert all(0.0 <= entry["recall@1"] <= 1.0 for entry in results.configurations)  # recorded
    client = TestClient(create_app(gallery[1], evaluation=results))
    page = client.get("/eval")
    assert page.status_code == 200 and "<th>Recall@1</th>" in page.text and 'id="eval-summary"' in page.text
    assert all(client.get(f"/eval/{i}").status_code == 200 for i in range(9))


# Re-ranking defaults read from the gallery (issue 17 §2) --------------------------------------------


@pytest.fixture(scope="module")
def unclustered() -> InMemoryImageEmbeddingStore:
    """A gallery whose neighbourhoods are unreliable: its adaptive defaults are not the paper's."""
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(1, 128)) + rng.normal(size=(300, 128))  # one diffuse cloud, off centre
    paths = [f"/gallery/c{i % 3}/{i:03d}.png" for i in range(300)]
    return InMemoryImageEmbeddingStore.from_embeddings(paths, vectors)


def _field(html: str, name: str) -> str:
    match = re.search(rf'name="{name}"[^>]* value="([^"]*)"', html)
    assert match is not None, name
    return match[1]


def _box(html: str) -> tuple[str, str, str]:
    """The re-rank box's k1, k2 and λ, as the form shows them."""
    return _field(html, "k1"), _field(html, "k2"), _field(html, "lambda")


def test_the_re_rank_box_takes_its_defaults_from_the_gallery(
    unclustered: InMemoryImageEmbeddingStore,
) -> None:
    from galleria.rerank.adaptive import default_rerank_params

    read = default_rerank_params(unclustered, "k-reciprocal")
    paper = {"k1": 20, "k2": 6, "lambda_value": 0.3}
    assert all(read[name] != paper[name] for name in paper)  # else this test could not tell them apart
    client = TestClient(create_app(unclustered))
    expected = {"k1": str(read["k1"]), "k2": str(read["k2"]), "lambda": repr(read["lambda_value"])}
    for address in ("/", "/?path=c0/000.png", "/?path=c0/000.png&rerank=1&k=5"):
        page = client.get(address)
        assert page.status_code == 200, address
        assert {name: _field(page.text, name) for name in expected} == expected, address
        assert ">k1, k2, λ read from this gallery</span>" in page.text, address
    # The result's address carries the values used: a reload reproduces the search.
    posted = client.post("/", data={"path": "c0/000.png", "rerank": "1", "k": "5"}, follow_redirects=False)
    assert posted.status_code == 303
    params = _params(posted.headers["location"])
    assert {name: params[name] for name in expected} == expected
    again = client.get(posted.headers["location"])
    assert {name: _field(again.text, name) for name in expected} == expected
    heading = f"k1 {read['k1']} · k2 {read['k2']} · λ {read['lambda_value']!r}"
    assert heading in again.text
    # The API answers with the same values: nothing sent == the gallery's values sent.
    unsent = client.post("/api/search", json={"path": "c0/000.png", "rerank": True, "k": 5}).json()
    sent = client.post(
        "/api/search",
        json={
            "path": "c0/000.png",
            "rerank": True,
            "k": 5,
            "k1": read["k1"],
            "k2": read["k2"],
            "lambda": read["lambda_value"],
        },
    ).json()
    assert unsent["reranked"] is not None
    assert (unsent["plain"], unsent["reranked"]) == (sent["plain"], sent["reranked"])


def test_sent_values_and_a_settings_file_win_over_the_gallery(
    unclustered: InMemoryImageEmbeddingStore,
) -> None:
    from galleria.rerank.adaptive import default_rerank_params
    from galleria.viewer import SearchSettings

    read = default_rerank_params(unclustered, "k-reciprocal")
    client = TestClient(create_app(unclustered))
    page = client.get("/?path=c0/000.png&rerank=1&k=5&k1=5&k2=2&lambda=0.25")
    assert page.status_code == 200
    assert _box(page.text) == ("5", "2", "0.25")
    assert "k1 5 · k2 2 · λ 0.25" in page.text
    own = f"values read from this gallery: k1 {read['k1']}, k2 {read['k2']}, λ {read['lambda_value']!r}"
    assert own in page.text
    explicit = {"path": "c0/000.png", "rerank": True, "k": 5, "k1": 5, "k2": 2, "lambda": 0.25}
    answer = client.post("/api/search", json=explicit).json()
    settings = SearchSettings.from_mapping({"k": 5, "rerank": True, "k1": 5, "k2": 2, "lambda": 0.25})
    from galleria.viewer import compare_search

    expected = compare_search(unclustered, "/gallery/c0/000.png", settings, kind="path").to_dict()

    def order(items: list[dict[str, Any]]) -> list[tuple[str, float]]:
        return [(item["path"], item["score"]) for item in items]

    assert order(answer["reranked"]) == order(expected["reranked"])
    # A settings file (galleria serve --settings) gives the defaults: no note, its values shown.
    tuned = RetrievalConfig("tuned", rerank=True, k1=7, k2=3, lambda_value=0.5, pool=30)
    page = TestClient(create_app(unclustered, defaults=tuned)).get("/?path=c0/000.png")
    assert _box(page.text) == ("7", "3", "0.5")
    assert 'id="rerank-note"' not in page.text
    # An adaptive settings file is read from the gallery too.
    adaptive = RetrievalConfig("tuned", rerank=True, rerank_preset="adaptive", pool=30)
    page = TestClient(create_app(unclustered, defaults=adaptive)).get("/?path=c0/000.png")
    assert _field(page.text, "k1") == str(read["k1"]) and _field(page.text, "k2") == str(read["k2"])
    assert ">k1, k2, λ read from this gallery</span>" in page.text
