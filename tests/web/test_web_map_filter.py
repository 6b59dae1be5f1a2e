"""Issue 28 §5: a rectangle drawn on the map filters the browse grid, ``/?map=x0,y0,x1,y1``.

The parameter is bounded and checked: a bad value is a 400 naming it, never a 500; before the map is
computed the grid says so (503) instead of guessing.
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
from fastapi.testclient import TestClient

from galleria import InMemoryImageEmbeddingStore
from galleria.web import create_app
from galleria.web.routes.map import MAP_SCALE

N = 60  # over one page of the grid (48), so the filter's pages are checked too


@pytest.fixture(scope="module")
def store() -> InMemoryImageEmbeddingStore:
    rng = np.random.default_rng(28)
    centres = rng.normal(size=(3, 16)) * 4
    vectors = np.concatenate([centre + rng.normal(size=(N // 3, 16)) for centre in centres])
    paths = [f"/g/{('a', 'b', 'c')[i // (N // 3)]}/{i:02d}.png" for i in range(N)]
    return InMemoryImageEmbeddingStore.from_embeddings(paths, vectors.astype(np.float32))


def _ready_client(store: InMemoryImageEmbeddingStore) -> tuple[TestClient, list[int]]:
    client = TestClient(create_app(store))
    for _ in range(600):
        answer = client.get("/api/map")
        if answer.status_code == 200:
            return client, answer.json()["xy"]
        client.app.state.background.wait(("map", N), timeout=0.1)
    raise AssertionError("the map was never computed")


def _grid(client: TestClient, address: str) -> list[str]:
    """Every path the browse grid lists at ``address``, following its pages."""
    shown: list[str] = []
    while address:
        page = client.get(address)
        assert page.status_code == 200, page.text
        shown += re.findall(r'<li class="item" data-path="([^"]+)"', page.text)
        following = re.search(r'<a href="([^"]+)" rel="next"', page.text)
        address = following.group(1).replace("&amp;", "&") if following else ""
    return shown


def test_the_rectangle_keeps_exactly_the_points_inside(store: InMemoryImageEmbeddingStore) -> None:
    client, xy = _ready_client(store)
    points = np.array(xy).reshape(-1, 2)
    x_cut = int(np.median(points[:, 0]))
    for corners in ((0, 0, x_cut, MAP_SCALE), (MAP_SCALE, MAP_SCALE, x_cut, 0), (0, 0, MAP_SCALE, MAP_SCALE)):
        x0, y0, x1, y1 = corners
        inside = [
            row
            for row, (x, y) in enumerate(points)
            if min(x0, x1) <= x <= max(x0, x1) and min(y0, y1) <= y <= max(y0, y1)
        ]
        expected = [store.paths[row].removeprefix("/g/") for row in inside]
        shown = _grid(client, "/?map=" + ",".join(map(str, corners)))
        assert shown == expected  # exactly those, in store order, across pages
    assert 0 < len(_grid(client, f"/?map=0,0,{x_cut},{MAP_SCALE}")) < N
    page = client.get(f"/?map=0,0,{x_cut},{MAP_SCALE}")
    assert 'id="map-filter"' in page.text and 'name="map" value="0,0,' in page.text  # kept by the form
    folder = _grid(client, f"/?map=0,0,{MAP_SCALE},{MAP_SCALE}&folder=b")  # with the other filters
    assert folder == [path.removeprefix("/g/") for path in store.paths if "/b/" in path]


@pytest.mark.parametrize(
    "value",
    [
        "",
        "1,2,3",
        "1,2,3,4,5",
        "a,b,c,d",
        "-1,0,5,5",
        "0,0,65536,5",
        "1e3,0,5,5",
        "²,0,5,5",
        "9" * 5000,
        "1,,2,3",
    ],
)
def test_a_bad_rectangle_is_a_400_naming_it(store: InMemoryImageEmbeddingStore, value: str) -> None:
    client = TestClient(create_app(store))
    answer = client.get("/", params={"map": value})
    assert answer.status_code == 400
    assert "map must be four integers x0,y0,x1,y1 from 0 to 65535" in answer.text
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert 'id="map-filter"' not in answer.text  # the whole gallery, unfiltered, with the error


def test_before_the_map_is_computed_the_grid_says_so(
    store: InMemoryImageEmbeddingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import galleria.web.routes.map as map_routes

    release = threading.Event()
    monkeypatch.setattr(map_routes, "_map_body", lambda store, labels: release.wait(30))
    client = TestClient(create_app(store))
    try:
        answer = client.get("/", params={"map": "0,0,10,10"})
        assert answer.status_code == 503 and "still being computed" in answer.text
    finally:
        release.set()
