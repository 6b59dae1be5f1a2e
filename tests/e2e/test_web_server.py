"""Issue 25 §3: a server one request cannot stall.

Heavy work off the event loop (a real uvicorn server on 127.0.0.1), a request deadline answered 503,
prepared galleries built once per gallery state, one decode per image for concurrent requests with
the semaphore held until the bytes are encoded, strict page numbers, security headers on a 500, and
side files parsed within a bounded multiple of their size.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")

from fastapi.testclient import TestClient

import galleria.web.app as web_app
from galleria import InMemoryImageEmbeddingStore
from galleria._deadline import check_deadline
from galleria.evaluation import RetrievalConfig
from galleria.viewer.thumbnails import MAX_CONCURRENT_DECODES, ThumbnailCache
from galleria.web import create_app

WAIT = 30.0  # seconds a test waits for an event that must happen (never asserted as a duration)


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, InMemoryImageEmbeddingStore]:
    root = tmp_path_factory.mktemp("gallery")
    rng = np.random.default_rng(25)
    paths = []
    for i in range(40):
        path = root / f"c{i % 4}" / f"{i}.png"
        path.parent.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    vectors = rng.normal(size=(len(paths), 8)).astype(np.float32)
    return root, InMemoryImageEmbeddingStore.from_embeddings(paths, vectors)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class _Blocker:
    """Replaces the search: each call signals that it started, then waits for ``release``."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.started = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        self.started.set()
        assert self.release.wait(WAIT)
        return self.real(*args, **kwargs)


@pytest.fixture()
def served(gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> Iterator[tuple[int, Any]]:
    """A uvicorn server on 127.0.0.1 (an unused port), in a thread; yields (port, app)."""
    import uvicorn

    app = create_app(gallery[1], workers=1)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    _wait_for(lambda: server.started, "the server to start")
    port = server.servers[0].sockets[0].getsockname()[1]
    yield port, app
    server.should_exit = True
    thread.join(WAIT)


def _request(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {} if body is None else {"content-type": "application/json"}
        connection.request(method, path, body=data, headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


# ------------------------------------------------------------------------------ off the event loop


def test_info_and_thumbnails_answer_while_a_search_runs(
    served: tuple[int, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the search ran inside the event loop, and every other request waited for it."""
    port, _ = served
    blocker = _Blocker(web_app.compare_search)
    monkeypatch.setattr(web_app, "compare_search", blocker)
    heavy: dict[str, Any] = {}

    def search() -> None:
        heavy["answer"] = _request(port, "POST", "/api/search", {"path": "c0/0.png", "k": 3})

    thread = threading.Thread(target=search)
    thread.start()
    assert blocker.started.wait(WAIT)
    try:
        assert _request(port, "GET", "/api/info")[0] == 200
        assert _request(port, "GET", "/thumb/c1/1.png")[0] == 200
        assert _request(port, "GET", "/")[0] == 200
        assert "answer" not in heavy  # the search is still blocked: the others did not wait for it
    finally:
        blocker.release.set()
        thread.join(WAIT)
    assert heavy["answer"][0] == 200 and len(json.loads(heavy["answer"][1])["plain"]) == 3


def test_a_search_past_the_request_timeout_is_answered_503_and_frees_its_worker(
    gallery: tuple[Path, InMemoryImageEmbeddingStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    stopped = threading.Event()

    def endless(*args: Any, **kwargs: Any) -> Any:
        try:
            while True:  # a long computation that checks its deadline, as diffusion's iterations do
                check_deadline()
                time.sleep(0.005)
        finally:
            stopped.set()

    original = web_app.compare_search
    monkeypatch.setattr(web_app, "compare_search", endless)
    app = create_app(gallery[1], request_timeout=0.2, workers=1)
    with TestClient(app) as client:
        answer = client.post("/api/search", json={"path": "c0/0.png", "k": 3})
        assert answer.status_code == 503
        assert "0.2 s" in answer.json()["detail"] and "--request-timeout" in answer.json()["detail"]
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert stopped.wait(WAIT)  # the worker left the computation at its next check
        page = client.get("/?path=c0/0.png&k=3")
        assert page.status_code == 503 and "--request-timeout" in page.text
        monkeypatch.setattr(web_app, "compare_search", original)
        assert client.post("/api/search", json={"path": "c0/0.png", "k": 3}).status_code == 200


def test_request_timeout_is_validated(gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> None:
    for bad in (0, -1, float("nan"), float("inf"), 1e9):
        with pytest.raises(ValueError, match="request_timeout"):
            create_app(gallery[1], request_timeout=bad)
    with pytest.raises(TypeError, match="request_timeout"):
        create_app(gallery[1], request_timeout="60")


# ------------------------------------------------------------------------------ prepared galleries


def test_a_prepared_gallery_is_built_once_per_gallery_state(
    gallery: tuple[Path, InMemoryImageEmbeddingStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: serve --settings of a prepared gallery rebuilt it (and its offline table) per request."""
    import galleria.rerank.registry as registry

    store = InMemoryImageEmbeddingStore.from_embeddings(gallery[1].paths, gallery[1].embeddings)
    built: list[int] = []
    real = registry._prepare

    def counting(source: Any, preparation: Any) -> Any:
        built.append(len(source))
        return real(source, preparation)

    monkeypatch.setattr(registry, "_prepare", counting)
    tuned = RetrievalConfig(
        "tuned",
        rerank=True,
        pool=20,
        rerank_method="decoupled-diffusion",
        rerank_params={"k": 5, "truncation": 10, "vector_power": 0.5, "centre": True},
    )
    client = TestClient(create_app(store, defaults=tuned))
    first = client.post("/api/search", json={"path": "c0/0.png", "k": 3})
    second = client.post("/api/search", json={"path": "c0/0.png", "k": 3})
    assert first.status_code == second.status_code == 200
    assert first.json()["reranked"] == second.json()["reranked"]
    assert built == [40]  # the second request reused the prepared gallery
    store.remove_images([store.paths[-1]])  # the gallery changed: prepared again, for 39 rows
    assert client.post("/api/search", json={"path": "c0/0.png", "k": 3}).status_code == 200
    assert built == [40, 39]


# ------------------------------------------------------------------------------ memory per request


def test_concurrent_misses_of_one_thumbnail_decode_it_once(tmp_path: Path) -> None:
    path = tmp_path / "a.png"
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(path)
    entered = threading.Event()
    release = threading.Event()
    reads: list[str] = []

    def reader(key: str, size: Any, limit: Any) -> Any:
        reads.append(key)
        entered.set()
        assert release.wait(WAIT)
        return Image.open(key).convert("RGB")

    cache = ThumbnailCache(reader=reader)
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(cache.get(str(path)))) for _ in range(8)]
    for thread in threads:
        thread.start()
    assert entered.wait(WAIT)
    _wait_for(lambda: cache._flight.waiting(str(path)) == 7, "7 requests waiting for the first")
    release.set()
    for thread in threads:
        thread.join(WAIT)
    assert reads == [str(path)] and len(results) == 8 and len(set(results)) == 1


def test_the_semaphore_is_held_until_the_bytes_are_encoded(
    gallery: tuple[Path, InMemoryImageEmbeddingStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: re-encoding (/image) and shrinking (/thumb) held the full image outside the semaphore."""
    import galleria.viewer.thumbnails as thumbnails

    app = create_app(gallery[1])
    semaphore = app.state.thumbnails._decoding
    held: list[bool] = []

    def encode_watch(real: Callable[..., bytes]) -> Callable[..., bytes]:
        def watched(*args: Any, **kwargs: Any) -> bytes:
            held.append(semaphore._value < MAX_CONCURRENT_DECODES)
            return real(*args, **kwargs)

        return watched

    monkeypatch.setattr(web_app, "encode_pixels", encode_watch(web_app.encode_pixels))
    monkeypatch.setattr(thumbnails, "_jpeg", encode_watch(thumbnails._jpeg))
    client = TestClient(app)
    assert client.get("/image/c0/0.png").status_code == 200
    assert client.get("/thumb/c0/4.png").status_code == 200
    assert held == [True, True]


def test_concurrent_requests_for_one_image_decode_it_once(
    gallery: tuple[Path, InMemoryImageEmbeddingStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(gallery[1])
    blocker = _Blocker(web_app.read_rgb_image)
    monkeypatch.setattr(web_app, "read_rgb_image", blocker)
    client = TestClient(app)
    answers: list[Any] = []
    threads = [
        threading.Thread(target=lambda: answers.append(client.get("/image/c2/2.png"))) for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    assert blocker.started.wait(WAIT)
    path = gallery[1].paths[2]
    _wait_for(lambda: app.state.full_size.waiting(path) == 5, "5 requests waiting for the first")
    blocker.release.set()
    for thread in threads:
        thread.join(WAIT)
    assert blocker.calls == 1
    assert [answer.status_code for answer in answers] == [200] * 6
    assert len({answer.content for answer in answers}) == 1


# ------------------------------------------------------------------------------ bad parameters, 500s


def test_page_numbers_that_are_not_ascii_digits_are_4xx_with_headers(
    gallery: tuple[Path, InMemoryImageEmbeddingStore],
) -> None:
    """Before: '²' passed isdigit() and int() raised (500); so did numbers of over 4,300 digits."""
    from _support.web_attacks import _evaluation

    client = TestClient(create_app(gallery[1], evaluation=_evaluation(gallery[1].paths)))
    for value in ("²", "1" * 5000, "-1", "0"):
        answer = client.get("/eval", params={"page": value})
        assert answer.status_code == 400 and "page must be a positive integer" in answer.text
        assert "content-security-policy" in answer.headers
    for value in ("²", "1" * 5000, "99"):
        answer = client.get(f"/eval/{value}")
        assert answer.status_code == 404 and "no query" in answer.text
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert client.get("/eval", params={"page": "2"}).status_code == 200  # past the end: the last page


def test_an_unexpected_error_is_a_500_with_the_security_headers(
    gallery: tuple[Path, InMemoryImageEmbeddingStore],
) -> None:
    app = create_app(gallery[1])

    @app.get("/broken")
    def broken() -> None:
        raise RuntimeError("a bug")

    answer = TestClient(app, raise_server_exceptions=False).get("/broken")
    assert answer.status_code == 500 and "a bug" not in answer.text
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]


# ------------------------------------------------------------------------------ side files


def _peak(function: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("folder", ["/data/gallery/class_", "/g/"])
def test_a_queries_json_is_read_within_4x_its_size(folder: str, tmp_path: Path) -> None:
    """Before: a queries.json took 27 times its size while it was parsed, before any check; one
    that galleria wrote for a gallery of short paths took 4.7 times."""
    from galleria.evaluation._query_reading import read_query_results
    from galleria.evaluation._query_types import QueryOutcome, QueryResults, RankedPaths
    from galleria.evaluation.per_query import write_query_results

    rng = np.random.default_rng(0)
    paths = [f"{folder}{i % 10:02d}/{i}.png" for i in range(3000)]
    queries = []
    for i in range(1500):
        before = tuple(paths[j] for j in rng.choice(3000, 20, replace=False))
        after = tuple(paths[j] for j in rng.choice(3000, 20, replace=False))
        ranks = tuple(int(r) if r > 0 else None for r in rng.integers(0, 3000, 20))
        queries.append(
            QueryOutcome(
                paths[i],
                "x",
                {"plain": 0.5, "rerank": round(float(rng.random()), 6)},
                RankedPaths(before, tuple(bool(b) for b in rng.random(20) < 0.5)),
                RankedPaths(after, tuple(bool(b) for b in rng.random(20) < 0.5), ranks),
            )
        )
    settings = {"query_expansion": False, "rerank": False}
    configurations = [
        {"name": "plain", "title": "plain", "settings": settings, "map@100": 0.5},
        {"name": "rerank", "title": "rerank", "settings": {**settings, "rerank": True}, "map@100": 0.5},
    ]
    good = tmp_path / "queries.json"
    write_query_results(good, QueryResults("t", ("plain", "rerank"), 20, configurations, queries))
    size = good.stat().st_size
    assert size > 1_500_000
    read: list[Any] = []
    assert _peak(lambda: read.append(read_query_results(good))) <= 4 * size
    # Another layout (indented) is read whole, to the same results.
    spaced = tmp_path / "spaced.json"
    spaced.write_text(json.dumps(_first(good, 50), indent=1))
    assert read_query_results(spaced).queries == read[0].queries[:50]
    # The same size of tiny values: refused before parsing, naming the file.
    for name, item in (("lists", "[]"), ("objects", "{}"), ("floats", "1.5")):
        bad = tmp_path / f"{name}.json"
        values = ",".join([item] * (size // 3))
        bad.write_text('{"schema": "galleria.queries/1", "queries": [' + values + "]}")
        assert _peak(lambda bad=bad, name=name: _refused(bad, name)) <= 4 * bad.stat().st_size


def _refused(path: Path, name: str) -> None:
    from galleria.evaluation._query_reading import read_query_results

    with pytest.raises(ValueError, match=rf"{name}\.json.*times its size in memory"):
        read_query_results(path)


def test_neighbour_counts_of_a_request_are_bounded(gallery: tuple[Path, InMemoryImageEmbeddingStore]) -> None:
    """Before: ``neighbors`` and ``k1`` of 10^9 were accepted; now a request's products stay ≤ 1000²."""
    client = TestClient(create_app(gallery[1]))
    refused = client.post("/api/search", json={"path": "c0/0.png", "neighbors": 10**9, "expand": True})
    assert refused.status_code == 400  # outside the declared range: the declaration's one message
    assert refused.json()["detail"] == "neighbors must lie in [1, 10000], got 1000000000"
    for body in (
        {"neighbors": 5000, "expand": True},
        {"k1": 5000, "rerank": True},
        {"k1": 2000, "k2": 1500, "rerank": True},
    ):
        answer = client.post("/api/search", json={"path": "c0/0.png", **body})
        assert answer.status_code == 400 and "at most 1000 in a request" in answer.json()["detail"]
    assert client.post("/api/search", json={"path": "c0/0.png", "k1": 30, "rerank": True}).status_code == 200


def test_serve_checks_its_request_timeout(
    gallery: tuple[Path, InMemoryImageEmbeddingStore], tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    store = tmp_path / "s.safetensors"
    gallery[1].save_to_disk(store)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    for value in ("0", "1e9", "x"):
        process = subprocess.run(
            [
                sys.executable,
                "-m",
                "galleria",
                "serve",
                str(store),
                "--request-timeout",
                value,
                "--port",
                "0",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert process.returncode == 2 and "--request-timeout" in process.stderr, process.stderr


def _first(path: Path, count: int) -> dict[str, Any]:
    """The document of ``path`` with its first ``count`` queries."""
    document = json.loads(path.read_text())
    return {**document, "queries": document["queries"][:count]}
