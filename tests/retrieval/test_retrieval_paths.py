"""One retrieval path: every caller's lists equal what the Searcher gives on the gallery it searches.

Method by method at its defaults, αQE alone, αQE with re-ranking and a tuned settings file: the
real CLI (``galleria search --json`` in a subprocess), the HTTP API (``POST /api/search``) and the
Python API answer a query exactly as :class:`galleria.retrieval.Searcher` does on the same store;
``evaluate`` and the tuner's trials answer as it does on their split's gallery.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from _support.extras import needs
from galleria import InMemoryImageEmbeddingStore
from galleria.cli import main
from galleria.rerank import RERANK_METHODS
from galleria.retrieval import RetrievalConfig, Searcher

K = 5
COLOURS = {
    "red": (200, 40, 40),
    "green": (40, 190, 60),
    "blue": (40, 60, 200),
    "grey": (128, 128, 128),
    "yellow": (210, 200, 40),
    "purple": (140, 50, 160),
}
#: Each case: a name, the CLI options, the page's / API's fields, the configuration.
CASES: list[tuple[str, list[str], dict[str, str], RetrievalConfig]] = [
    ("aqe", ["--expand"], {"expand": "1"}, RetrievalConfig("aqe", query_expansion=True)),
    (
        "aqe+rerank",
        ["--expand", "--rerank"],
        {"expand": "1", "rerank": "1"},
        RetrievalConfig("aqe+rerank", query_expansion=True, rerank=True),
    ),
    *[
        (
            method,
            ["--rerank", "--rerank-method", method],
            {"rerank": "1", "method": method},
            RetrievalConfig(method, rerank=True, rerank_method=method),
        )
        for method in RERANK_METHODS
    ],
]


def _write(root: Path, seed: int, per_label: int) -> list[str]:
    rng = np.random.default_rng(seed)
    paths = []
    for label, colour in COLOURS.items():
        (root / label).mkdir(parents=True)
        for i in range(per_label):
            shift = rng.normal(0, 35, size=3)
            pixels = np.array(colour) + shift + rng.normal(0, 30, size=(12, 12, 3))
            path = root / label / f"{i:02d}.png"
            Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path)
            paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, InMemoryImageEmbeddingStore, list[str]]:
    base = tmp_path_factory.mktemp("paths")
    _write(base / "gallery", 0, 10)
    queries = _write(base / "queries", 1, 1)
    out = base / "store.safetensors"
    assert main(["build", str(base / "gallery"), "--out", str(out), "--workers", "1"]) == 0
    store = InMemoryImageEmbeddingStore.load_from_disk(str(out))
    return out, store, queries


def _cli(store_file: Path, queries: list[str], options: list[str]) -> list[list[tuple[str, float]]]:
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "galleria", "search", str(store_file), "--image", *queries]
    process = subprocess.run(
        [*command, "-k", str(K), "--json", *options],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert process.returncode == 0, process.stderr
    payload = json.loads(process.stdout)
    return [[(r["path"], r["score"]) for r in entry["results"]] for entry in payload["queries"]]


def _api(client: Any, query: str, fields: dict[str, str]) -> dict[str, Any]:
    with open(query, "rb") as stream:
        data = stream.read()
    answer = client.post(
        "/api/search",
        files={"image": ("query.png", io.BytesIO(data), "image/png")},
        data={"k": str(K), **fields},
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def _pairs(candidates: list[Any]) -> list[tuple[str, float]]:
    return [(c.path, float(c.score)) for c in candidates]


def _items(items: list[dict[str, Any]]) -> list[tuple[str, float]]:
    return [(item["path"], item["score"]) for item in items]


def _same(got: list[tuple[str, float]], expected: list[tuple[str, float]]) -> None:
    assert [path for path, _ in got] == [path for path, _ in expected]
    assert [score for _, score in got] == pytest.approx([score for _, score in expected], abs=1e-6)


@needs("fastapi")
@pytest.mark.parametrize(("name", "options", "fields", "config"), CASES, ids=[case[0] for case in CASES])
def test_cli_api_and_python_equal_the_searcher(
    setup: tuple[Path, InMemoryImageEmbeddingStore, list[str]],
    name: str,
    options: list[str],
    fields: dict[str, str],
    config: RetrievalConfig,
) -> None:
    from fastapi.testclient import TestClient

    from galleria.web import create_app

    store_file, store, queries = setup
    searcher = Searcher(store, config)
    expected = [_pairs(found) for found in searcher.search(queries, K)]
    assert searcher.config.adaptive is False  # every value read from this gallery
    if config.query_expansion:  # the adaptive rule, not the paper's n 50
        assert searcher.config.expansion_neighbors in (1, 2)
    # the CLI, in a subprocess
    for got, want in zip(_cli(store_file, queries, options), expected, strict=True):
        _same(got, want)
    # the HTTP API: the same lists, and the exact values echoed
    client = TestClient(create_app(store))
    for query, want in zip(queries, expected, strict=True):
        answer = _api(client, query, fields)
        _same(_items(answer["reranked"] if config.rerank else answer["plain"]), want)
        assert answer["settings"] == searcher.used()
    # the Python API
    if not config.rerank:
        found = store.retrieve_top_k_similar(queries, K, query_expansion=True)
        for got, want in zip(found, expected, strict=True):
            _same(_pairs(got), want)
    again = Searcher(store, RetrievalConfig.from_settings(searcher.config.settings(), name=name))
    for got, want in zip(again.search(queries, K), expected, strict=True):
        _same(_pairs(got), want)


@needs("fastapi", "optuna")
def test_a_tuned_settings_file_is_answered_alike(
    setup: tuple[Path, InMemoryImageEmbeddingStore, list[str]], tmp_path: Path
) -> None:
    from fastapi.testclient import TestClient

    from galleria.tune import tune
    from galleria.tune.settings import read_settings, write_settings
    from galleria.web import create_app

    store_file, store, queries = setup
    labels = [path.split(os.sep)[-2] for path in store.paths]
    result = tune(store, labels, n_trials=4, methods=["aqe", "k-reciprocal"], n_splits=1, seed=0)
    tuned = RetrievalConfig("tuned", True, 1.5, 3, True, pool=30, rerank_params={"k1": 6, "k2": 2})
    for number, config in enumerate((result.best, tuned)):
        file = tmp_path / f"tuned{number}.json"
        write_settings(file, config)
        loaded = read_settings(file)
        searcher = Searcher(store, loaded)
        expected = [_pairs(found) for found in searcher.search(queries, K)]
        for got, want in zip(_cli(store_file, queries, ["--settings", str(file)]), expected, strict=True):
            _same(got, want)
        client = TestClient(create_app(store, defaults=loaded))
        for query, want in zip(queries, expected, strict=True):
            answer = _api(client, query, {})
            _same(_items(answer["reranked"] if loaded.rerank else answer["plain"]), want)


@pytest.mark.parametrize(("name", "config"), [(case[0], case[3]) for case in CASES])
def test_evaluate_and_the_tuner_agree_with_the_searcher_on_their_split(
    setup: tuple[Path, InMemoryImageEmbeddingStore, list[str]], name: str, config: RetrievalConfig
) -> None:
    from galleria.evaluation import evaluate_retrieval
    from galleria.tune._splits import _make_split, score_lists

    _, store, _ = setup
    labels = [path.split(os.sep)[-2] for path in store.paths]
    split = _make_split(store, store.embeddings, labels, 0, 12, "map@100")
    # evaluate: the lists it scores are the Searcher's on the split's gallery
    kept: dict[str, Any] = {}
    used: list[RetrievalConfig] = []
    evaluate_retrieval(
        split.store,
        split.queries,
        split.query_labels,
        split.gallery_labels,
        [config],
        depth=20,
        on_config=used.append,
        on_lists=lambda c, lists: kept.update(lists=lists),
    )
    searcher = Searcher(split.store, config)
    assert used == [searcher.config]
    expected = searcher.search(split.queries, 20)
    for got, want in zip(kept["lists"], expected, strict=True):
        _same(_pairs(got), _pairs(want))
    # the tuner's trial: its scores are those of the Searcher's lists on the same split
    values = split.run(config)
    depth = min(searcher.depth(split.depth), len(split.store))
    scores = score_lists(searcher.search(split.queries, depth), split.query_labels, split.gallery_labels)
    assert {key: values[key] for key in scores} == pytest.approx(scores)


@needs("fastapi")
def test_api_takes_declared_names_and_old_aliases_alike(
    setup: tuple[Path, InMemoryImageEmbeddingStore, list[str]],
) -> None:
    from fastapi.testclient import TestClient

    from galleria.web import create_app

    _, store, _ = setup
    client = TestClient(create_app(store))
    path = store.paths[3]

    def ask(body: dict[str, Any]) -> dict[str, Any]:
        answer = client.post("/api/search", json={"path": path, "k": K, **body})
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()
        return result

    # k-reciprocal: declared names, the old aliases, and a params object give one answer
    declared = ask(
        {
            "rerank": True,
            "pool": 40,
            "expand": True,
            "expansion_alpha": 2.5,
            "expansion_neighbors": 3,
            "k1": 9,
            "k2": 3,
            "lambda_value": 0.45,
        }
    )
    old = ask(
        {
            "rerank": True,
            "pool": 40,
            "expand": True,
            "alpha": 2.5,
            "neighbors": 3,
            "k1": 9,
            "k2": 3,
            "lambda": 0.45,
        }
    )
    nested = ask(
        {
            "rerank": True,
            "pool": 40,
            "expand": True,
            "alpha": 2.5,
            "neighbors": 3,
            "method": "k-reciprocal",
            "params": {"k1": 9, "k2": 3, "lambda_value": 0.45},
        }
    )
    assert declared == {**old, "elapsed_ms": declared["elapsed_ms"]}
    assert nested["reranked"] == declared["reranked"]
    assert declared["settings"] == {
        "expand": True,
        "rerank": True,
        "alpha": 2.5,
        "neighbors": 3,
        "method": "k-reciprocal",
        "params": {"k1": 9, "k2": 3, "lambda_value": 0.45},
        "pool": 40,
    }
    # another method's own alpha: in params (flat "alpha" is αQE's), echoed exactly
    config = RetrievalConfig(
        "d", rerank=True, pool=40, rerank_method="diffusion", rerank_params={"alpha": 0.5, "k": 7}
    )
    expected = Searcher(store, config).search([path], K, kind="path")[0]
    answer = ask({"rerank": True, "pool": 40, "method": "diffusion", "params": {"alpha": 0.5, "k": 7}})
    assert [item["path"] for item in answer["reranked"]] == [c.path for c in expected]
    assert answer["settings"]["params"] == Searcher(store, config).config.rerank_params
    form = client.post(
        "/api/search",
        data={
            "path": path,
            "k": str(K),
            "rerank": "1",
            "pool": "40",
            "method": "diffusion",
            "param.alpha": "0.5",
            "param.k": "7",
        },
    )
    assert form.json()["reranked"] == answer["reranked"]
    bad = client.post(
        "/api/search", json={"path": path, "rerank": True, "method": "diffusion", "params": {"k1": 3}}
    )
    assert bad.status_code == 400 and "k1" in bad.json()["detail"]


@needs("fastapi")
def test_the_page_address_carries_the_exact_values_used(
    setup: tuple[Path, InMemoryImageEmbeddingStore, list[str]],
) -> None:
    from urllib.parse import parse_qs, urlsplit

    from fastapi.testclient import TestClient

    from galleria.web import create_app

    _, store, _ = setup
    relative = "red/00.png"
    client = TestClient(create_app(store))
    answer = client.post(
        "/", data={"path": relative, "k": "5", "rerank": "1", "expand": "1"}, follow_redirects=False
    )
    assert answer.status_code == 303
    query = {key: values[0] for key, values in parse_qs(urlsplit(answer.headers["location"]).query).items()}
    used = Searcher(store, RetrievalConfig("s", query_expansion=True, rerank=True)).config
    assert (
        float(query["alpha"]) == used.expansion_alpha and int(query["neighbors"]) == used.expansion_neighbors
    )
    assert (int(query["k1"]), int(query["k2"]), query["lambda"]) == (
        used.rerank_params["k1"],
        used.rerank_params["k2"],
        repr(used.rerank_params["lambda_value"]),
    )
    page = client.get(answer.headers["location"])
    assert page.status_code == 200
    assert f"λ {used.rerank_params['lambda_value']!r}" in page.text
