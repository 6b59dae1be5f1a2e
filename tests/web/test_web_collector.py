"""Issue 28 §4–§6 on the page: the map, the duplicates view, the full-size view, per-label evaluation.

Every new route keeps serve's trust rules: only gallery files, escaped names, the security headers,
the ``Host`` check, a 4xx for a bad parameter.
"""

from __future__ import annotations

import html
import io
import json
import os
import re
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
from fastapi.testclient import TestClient

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.evaluation._query_types import QueryOutcome, QueryResults, RankedPaths
from galleria.web import create_app

HOSTILE = '<img src=x onerror="y">&z'  # a label (class folder) a page must escape


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, InMemoryImageEmbeddingStore]:
    root = tmp_path_factory.mktemp("collector") / "gallery"
    rng = np.random.default_rng(3)
    paths = []
    for label, colour in (("red", (210, 40, 40)), ("blue", (40, 60, 210)), (HOSTILE, (40, 190, 60))):
        (root / label).mkdir(parents=True)
        for i in range(8):
            pixels = np.clip(np.array(colour) + rng.normal(0, 40, (20, 24, 3)), 0, 255).astype(np.uint8)
            path = root / label / f"{i} #?.png"  # '#' and '?' must be quoted in addresses
            Image.fromarray(pixels).save(path)
            paths.append(str(path))
    copy = root / "red" / "copy.png"  # an exact duplicate of red/0
    copy.write_bytes((root / "red" / "0 #?.png").read_bytes())
    paths.append(str(copy))
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    return root, store


def _ready(client: TestClient, address: str) -> dict:
    for _ in range(600):  # the work runs in a background thread: wait for it (bounded)
        answer = client.get(address)
        if answer.status_code != 202:
            assert answer.status_code == 200, answer.text
            return answer.json()
        client.app.state.background.wait(("map", 25), timeout=0.1)
    raise AssertionError(f"{address} never became ready")


@pytest.fixture()
def client(gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> TestClient:
    return TestClient(create_app(gallery[1], store_name="s.safetensors"))


# The map -----------------------------------------------------------------------------------------


def test_the_map_sends_every_point_scaled_with_its_label(
    client: TestClient, gallery: tuple[Path, InMemoryImageEmbeddingStore]
) -> None:
    page = client.get("/map")
    assert page.status_code == 200 and '<canvas id="map"' in page.text
    assert re.findall(r"<script[^>]*>", page.text) == [
        '<script src="/static/app.js">',
        '<script src="/static/map.js">',
    ]
    body = _ready(client, "/api/map")
    paths = gallery[1].paths
    assert body["n"] == len(paths) == len(body["label"]) and len(body["xy"]) == 2 * len(paths)
    assert min(body["xy"]) == 0 and max(body["xy"]) == 65535
    assert sorted(body["labels"]) == sorted(["red", "blue", HOSTILE])
    for path, index in zip(paths, body["label"], strict=True):
        assert body["labels"][index] == os.path.relpath(path, gallery[0]).split(os.sep)[0]


def test_map_items_and_regions(client: TestClient, gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> None:
    body = _ready(client, "/api/map")
    item = client.get("/api/map/item/0").json()
    assert item["path"] == "red/0 #?.png" and item["thumb"] == "/thumb/red/0%20%23%3F.png"
    assert client.get(item["thumb"]).status_code == 200 and client.get(item["view"]).status_code == 200
    for bad in ("-1", "x", "1e3", "²", "9" * 12):
        assert client.get(f"/api/map/item/{bad}").status_code in (400, 404), bad
    assert client.get("/api/map/item/25").status_code == 404
    everything = client.get("/api/map/region?x0=0&y0=0&x1=65535&y1=65535").json()
    assert everything["total"] == 25 and len(everything["items"]) == 25
    x, y = body["xy"][0], body["xy"][1]
    one = client.get(f"/api/map/region?x0={x}&y0={y}&x1={x}&y1={y}").json()
    rows = {entry["row"] for entry in one["items"]}
    expected = {i for i in range(25) if body["xy"][2 * i] == x and body["xy"][2 * i + 1] == y}
    assert rows == expected and 0 in rows
    for query in (
        "x0=0&y0=0&x1=5",
        "x0=a&y0=0&x1=1&y1=1",
        "x0=0&y0=0&x1=1&y1=1&page=0",
        "x0=-1&y0=0&x1=1&y1=1",
    ):
        answer = client.get("/api/map/region?" + query)
        assert (answer.status_code == 400 and "must" in answer.json()["detail"]) or "required" in answer.text


def test_the_map_colours_by_duplicate_group(
    client: TestClient, gallery: tuple[Path, InMemoryImageEmbeddingStore]
) -> None:
    body = _ready(client, "/api/map/groups")
    paths = gallery[1].paths
    original, copy = paths.index(str(gallery[0] / "red" / "0 #?.png")), len(paths) - 1
    group = dict(zip(body["rows"], body["group"], strict=True))  # only the rows in a group are sent
    assert body["groups"] >= 1 and group[original] == group[copy] >= 0
    assert len(body["rows"]) < len(paths) and all(0 <= g < body["groups"] for g in body["group"])


# The duplicates view -------------------------------------------------------------------------------


def _groups_page(client: TestClient, query: str, threshold: float | None) -> str:
    for _ in range(600):
        page = client.get("/duplicates" + query)
        assert page.status_code == 200
        if 'id="computing"' not in page.text:
            return page.text
        client.app.state.background.wait(("duplicates", 25, threshold), timeout=0.1)
    raise AssertionError("the duplicate groups were never found")


def test_the_duplicates_view_shows_groups_largest_first(
    client: TestClient, gallery: tuple[Path, InMemoryImageEmbeddingStore]
) -> None:
    from galleria.curation.dedup import duplicate_groups

    text = _groups_page(client, "", None)
    assert 'id="dup-count"' in text
    from galleria.curation.dedup import duplicate_report

    applied = duplicate_report(gallery[1]).threshold  # calibrated on the store, and shown
    assert f'<span id="dup-threshold">{applied:.4g}</span> (calibrated on this gallery)' in text
    assert text.count('class="kept-because">kept: ') == text.count('class="keep-badge"')
    sizes = [int(n) for n in re.findall(r"<h2>group \d+ · (\d+) images", text)]
    assert sizes and sizes == sorted(sizes, reverse=True)
    sections = text.split('<section class="dup-group')[1:]
    assert len(sections) == len(sizes) and all(part.count('class="keep-badge"') == 1 for part in sections)
    exact = _groups_page(client, "?threshold=0", 0.0)  # near copies off: the planted exact copy alone
    group = exact.split('id="group-1"', 1)[1].split("</section>", 1)[0]
    kind = "exact copies" if duplicate_groups(gallery[1], threshold=0)[0].exact else "near copies"
    assert f'class="kind">{kind}<' in group and group.count('class="keep-badge"') == 1
    assert "/view/red/0%20%23%3F.png" in group and "/view/red/copy.png" in group
    assert 'id="group-2"' not in exact


def test_the_duplicates_view_refuses_bad_parameters(client: TestClient) -> None:
    for query in (
        "threshold=3",
        "threshold=-0.1",
        "threshold=nan",
        "threshold=abc",
        "page=0",
        "page=x",
        "page=²",
    ):
        answer = client.get("/duplicates?" + query)
        assert answer.status_code == 400, query
        assert "<script>" not in answer.text
    hostile = client.get("/duplicates?threshold=" + "%3Cscript%3E")
    assert hostile.status_code == 400 and "&lt;script&gt;" in hostile.text and "<script>" not in hostile.text


# The full-size view --------------------------------------------------------------------------------


def test_the_view_shows_a_gallery_image_and_nothing_else(client: TestClient, tmp_path: Path) -> None:
    page = client.get("/view/red/0%20%23%3F.png")
    assert page.status_code == 200 and 'src="/image/red/0%20%23%3F.png"' in page.text
    assert 'id="zoom-in"' in page.text and '<script src="/static/view.js">' in page.text
    assert client.get("/image/red/0%20%23%3F.png").status_code == 200
    for bad in ("../../etc/passwd", "red/missing.png", "%2Fetc%2Fpasswd", "red/..%2F..%2Fetc%2Fpasswd"):
        answer = client.get("/view/" + bad)
        assert answer.status_code == 404, bad
    named = client.get("/view/" + "%3Cimg%20src%3Dx%3E")
    assert named.status_code == 404 and "<img src=x>" not in named.text and "&lt;img src=x&gt;" in named.text


def test_a_label_is_escaped_on_every_page(client: TestClient) -> None:
    _ready(client, "/api/map")
    view = client.get("/view/" + quote(HOSTILE) + "/1%20%23%3F.png")
    assert view.status_code == 200 and HOSTILE not in view.text and "&lt;img src=x" in view.text
    assert HOSTILE not in client.get("/duplicates").text


def test_search_results_link_to_the_view(client: TestClient) -> None:
    page = client.get("/?path=red/1%20%23%3F.png")
    links = re.findall(r'<a class="view-link" href="([^"]+)"', page.text)
    assert links and all(link.startswith("/view/") for link in links)
    assert client.get(links[0]).status_code == 200


def test_exif_orientation_is_honoured(tmp_path: Path) -> None:
    """A JPEG stored sideways with EXIF orientation 6 (rotate 90° clockwise) is shown upright."""
    folder = tmp_path / "photos"
    (folder / "a").mkdir(parents=True)
    (folder / "b").mkdir(parents=True)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (60, 20), (200, 30, 30)).save(folder / "a" / "turned.jpg", exif=exif.tobytes())
    Image.new("RGB", (30, 30), (20, 30, 200)).save(folder / "b" / "plain.jpg")
    paths = [str(folder / "a" / "turned.jpg"), str(folder / "b" / "plain.jpg")]
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    client = TestClient(create_app(store))
    answer = client.get("/image/a/turned.jpg")
    assert answer.status_code == 200
    assert Image.open(io.BytesIO(answer.content)).size == (20, 60)


# Trust rules on every new route -------------------------------------------------------------------

ROUTES = ("/map", "/api/map", "/api/map/groups", "/api/map/item/0", "/duplicates", "/view/red/copy.png")


@pytest.mark.parametrize("address", ROUTES)
def test_new_routes_carry_the_security_headers_and_check_the_host(
    gallery: tuple[Path, InMemoryImageEmbeddingStore], address: str
) -> None:
    client = TestClient(create_app(gallery[1], allowed_hosts=["127.0.0.1"]))
    answer = client.get(address, headers={"Host": "localhost:8000"})
    assert answer.status_code in (200, 202)
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'self'" in answer.headers["content-security-policy"]
    refused = client.get(address, headers={"Host": "evil.example"})
    assert refused.status_code == 400 and refused.headers["x-content-type-options"] == "nosniff"


def test_a_symlink_out_of_the_gallery_is_not_served(tmp_path: Path) -> None:
    folder = tmp_path / "g"
    for label in ("a", "b"):
        (folder / label).mkdir(parents=True)
        Image.new("RGB", (16, 16), (9, 9, 200 if label == "a" else 20)).save(folder / label / "1.png")
    secret = tmp_path / "secret.png"
    Image.new("RGB", (16, 16), (1, 2, 3)).save(secret)
    paths = [str(folder / "a" / "1.png"), str(folder / "b" / "1.png")]
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    (folder / "b" / "1.png").unlink()
    (folder / "b" / "1.png").symlink_to(secret)  # re-pointed after the build
    client = TestClient(create_app(store))
    assert client.get("/view/b/1.png").status_code == 200  # the page names it ...
    assert client.get("/image/b/1.png").status_code == 404  # ... but its pixels are refused
    item = _ready(client, "/api/map/region?x0=0&y0=0&x1=65535&y1=65535")
    assert client.get(item["items"][0]["thumb"]).status_code in (200, 404)
    assert all(
        client.get(entry["thumb"]).status_code == (404 if entry["path"] == "b/1.png" else 200)
        for entry in item["items"]
    )


# The evaluation view: per-label figures, the label filter, the label summary ------------------------


def _evaluation(paths: list[str]) -> QueryResults:
    queries = []
    for i, path in enumerate(paths[:12]):
        label = "red" if i < 8 else HOSTILE
        hit = i % 2 == 0
        ranked = RankedPaths(tuple(paths[12:15]), (hit, False, False))
        queries.append(
            QueryOutcome(
                path, label, {"plain": 0.5, "rerank": 0.2 if label == HOSTILE else 0.9}, ranked, ranked
            )
        )
    configurations = [
        {"name": "plain", "title": "plain", "settings": {"rerank": False}, "map@100": 0.5},
        {"name": "rerank", "title": "re-ranked", "settings": {"rerank": True}, "map@100": 0.6},
    ]
    return QueryResults("made up", ("plain", "rerank"), 3, configurations, queries)


def test_the_evaluation_shows_labels_worst_first_and_filters(
    gallery: tuple[Path, InMemoryImageEmbeddingStore],
) -> None:
    from galleria.datasets.labels import LabelSummary

    summary = LabelSummary(3, 8, 8.0, str(gallery[0]))
    client = TestClient(
        create_app(gallery[1], evaluation=_evaluation(gallery[1].paths), evaluation_labels=summary)
    )
    page = client.get("/eval")
    assert page.status_code == 200 and 'id="per-label"' in page.text
    table = page.text.split('id="per-label"', 1)[1].split("</table>", 1)[0]
    names = re.findall(r'<a href="/eval\?label=[^"]*">([^<]*)</a>', table)
    assert [html.unescape(name) for name in names] == [HOSTILE, "red"]  # mAP 0.2 before 0.9
    assert HOSTILE not in page.text
    assert "<b>3</b>" in page.text.split('id="label-summary"', 1)[1].split("</p>", 1)[0]
    only = client.get("/eval?label=" + quote(HOSTILE, safe=""))
    assert only.status_code == 200 and len(re.findall(r'class="open"', only.text)) == 4
    assert client.get("/eval?label=red").text.count('class="open"') == 8
    missing = client.get("/eval?label=%3Cscript%3E")
    assert missing.status_code == 404 and "<script>" not in missing.text.split("</header>", 1)[1].replace(
        '<script src="/static/app.js"></script>', ""
    )


def test_the_label_summary_is_read_from_the_report(tmp_path: Path) -> None:
    from galleria.evaluation.per_label import read_label_summary

    assert read_label_summary(tmp_path) is None
    labels = {"n_labels": 4, "images_per_label": {"min": 2, "median": 3.5}, "root": "/g"}
    (tmp_path / "metrics.json").write_text(json.dumps({"dataset": {"labels": labels}}))
    summary = read_label_summary(tmp_path)
    assert (summary.n_labels, summary.min_per_label, summary.median_per_label, summary.root) == (
        4,
        2,
        3.5,
        "/g",
    )
    for bad in ({"n_labels": -1}, {"images_per_label": {"min": "2", "median": 1}}, {"root": 7}, {"extra": 1}):
        (tmp_path / "metrics.json").write_text(json.dumps({"dataset": {"labels": {**labels, **bad}}}))
        with pytest.raises(ValueError, match=r"metrics\.json"):
            read_label_summary(tmp_path)
    (tmp_path / "metrics.json").write_text("{" * 5000)
    with pytest.raises(ValueError, match=r"metrics\.json"):
        read_label_summary(tmp_path)


def test_serve_keeps_the_map_beside_the_store_and_ignores_a_hostile_one(
    tmp_path: Path, gallery: tuple[Path, InMemoryImageEmbeddingStore]
) -> None:
    from galleria.cli._store_options import load_store
    from galleria.store.gallery_map import MapFileWarning, map_file_for

    store_file = tmp_path / "s.safetensors"
    gallery[1].save_to_disk(store_file)
    Path(map_file_for(store_file)).write_bytes(b"GALLERIA-MAP1\n" + b"\xff" * 64)  # hostile
    import argparse

    store = load_store(argparse.Namespace(), str(store_file))
    client = TestClient(create_app(store))
    with pytest.warns(MapFileWarning, match="ignored"):
        body = _ready(client, "/api/map")
    assert body["n"] == 25
    kept = Path(map_file_for(store_file))
    assert kept.stat().st_size == len(kept.read_bytes()) > 64 + 14  # rewritten: a valid map now
    from galleria.store.gallery_map import read_map_file

    assert read_map_file(kept, 25)[2].shape == (25, 2)


def test_a_real_report_shows_its_label_summary(
    tmp_path: Path, gallery: tuple[Path, InMemoryImageEmbeddingStore]
) -> None:
    from galleria.cli import main
    from galleria.evaluation._query_reading import read_query_results
    from galleria.evaluation.per_label import read_label_summary

    report = tmp_path / "report"
    code = main(
        ["evaluate", str(gallery[0]), "--embedder", "pixel:8", "--n-queries", "6", "--report", str(report)]
    )
    assert code == 0
    summary = read_label_summary(report)
    assert summary is not None and summary.n_labels == 3
    client = TestClient(
        create_app(gallery[1], evaluation=read_query_results(report), evaluation_labels=summary)
    )
    text = client.get("/eval").text
    assert 'id="label-summary"' in text and 'id="per-label"' in text
    one = client.get("/eval/0").text  # the recorded lists link to the full-size view too
    links = re.findall(r'<a class="view-link" href="([^"]+)"', one)
    assert links and all(client.get(link).status_code == 200 for link in links[:3])


def test_a_large_map_is_sent_in_levels(
    gallery: tuple[Path, InMemoryImageEmbeddingStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: a map of more points than one answer holds sends a seeded sample of them, and a
    rectangle's points (all of them once few enough lie inside), never every point at once."""
    from galleria.web.routes import map as map_routes

    monkeypatch.setattr(map_routes, "MAP_LEVEL", 10)
    client = TestClient(create_app(gallery[1], store_name="s.safetensors"))
    body = _ready(client, "/api/map")
    assert body["n"] == 25 and body["shown"] == 10 == len(body["rows"]) == len(body["label"])
    assert len(body["xy"]) == 20 and body["rows"] == sorted(body["rows"])
    again = TestClient(create_app(gallery[1], store_name="s.safetensors"))
    assert _ready(again, "/api/map")["rows"] == body["rows"]  # the same sample every time
    whole = client.get("/api/map/view?x0=0&y0=0&x1=65535&y1=65535").json()
    assert whole["total"] == 25 and whole["rows"] == body["rows"] and whole["xy"] == body["xy"]
    # a rectangle around a few of the points: every point inside is sent
    every = client.get("/api/map/region?x0=0&y0=0&x1=65535&y1=65535&page=1").json()
    assert every["total"] == 25
    x, y = body["xy"][0], body["xy"][1]
    corners = (max(0, x - 3000), max(0, y - 3000), min(65535, x + 3000), min(65535, y + 3000))
    query = "x0={}&y0={}&x1={}&y1={}".format(*corners)
    near = client.get("/api/map/view?" + query).json()
    listed = client.get("/api/map/region?" + query).json()
    assert near["total"] == listed["total"] <= 10 and near["shown"] == near["total"]
    assert set(near["rows"]) == {entry["row"] for entry in listed["items"]}
    for i, row in enumerate(near["rows"]):
        px, py = near["xy"][2 * i], near["xy"][2 * i + 1]
        assert corners[0] <= px <= corners[2] and corners[1] <= py <= corners[3], row
    assert client.get("/api/map/view?x0=0&y0=0&x1=5").status_code == 400


def test_the_map_level_takes_the_first_points_of_its_order() -> None:
    from galleria.web.routes.map import MAP_LEVEL, _level

    points = np.array([[0, 0], [10, 10], [20, 20], [30, 30]], dtype=np.int64)
    order = np.array([2, 0, 3, 1])
    value = {"points": points, "order": order, "ranked": points[order], "label": np.array([5, 6, 7, 8])}
    everything = _level(value, (0, 0, 65535, 65535))
    assert everything["rows"] == [0, 1, 2, 3] and everything["total"] == 4 and MAP_LEVEL >= 4
    inside = _level(value, (5, 5, 25, 25))
    assert inside == {"total": 2, "shown": 2, "rows": [1, 2], "label": [6, 7], "xy": [10, 10, 20, 20]}
