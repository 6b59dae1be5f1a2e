"""The API reads a method's parameters through their declarations (issue 35 §1): the request bound
holds whatever the spelling, one parameter given twice is refused, a declared bool is a bool."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
from fastapi.testclient import TestClient

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria._params import format_value
from galleria.web import create_app

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220)}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    root = tmp_path_factory.mktemp("api") / "gallery"
    rng = np.random.default_rng(0)
    paths = []
    for label, colour in COLOURS.items():
        (root / label).mkdir(parents=True)
        for i in range(8):
            pixels = np.clip(np.array(colour) + rng.normal(0, 30, (12, 12, 3)), 0, 255).astype(np.uint8)
            path = root / label / f"{i}.png"
            Image.fromarray(pixels).save(path)
            paths.append(str(path))
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=6), num_workers=1)
    store.build_store(progress=False)
    return TestClient(create_app(store, store_name="api.safetensors"))


def _search(client: TestClient, **fields: Any) -> Any:
    return client.post("/api/search", json={"path": "red/0.png", "k": 3, **fields})


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"rerank": True, "k1": 1001, "k2": 2}, "k1"),
        ({"rerank": True, "params": {"k1": 1001, "k2": 2}}, "k1"),  # accepted before
        ({"rerank": True, "param.k1": 1001, "k2": 2}, "k1"),
        ({"rerank": True, "method": "gnn", "params": {"k1": 1001}}, "k1"),
        ({"expand": True, "neighbors": 1001}, "neighbors"),
        ({"expand": True, "expansion_neighbors": 1001}, "neighbors"),  # accepted before
    ],
)
def test_the_request_bound_holds_whatever_the_spelling(client: TestClient, fields: Any, name: str) -> None:
    answer = _search(client, **fields)
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"] == f"{name} must be at most 1000 in a request, got 1001"


@pytest.mark.parametrize(
    "fields",
    [
        {"rerank": True, "k1": 5, "params": {"k1": 6}},
        {"rerank": True, "k1": 5, "param.k1": 6},
        {"rerank": True, "lambda": 0.5, "lambda_value": 0.4},
        {"expand": True, "alpha": 2, "expansion_alpha": 3},
        {"rerank": True, "method": "gnn", "rerank_method": "dba"},
    ],
)
def test_one_parameter_given_twice_is_refused(client: TestClient, fields: Any) -> None:
    answer = _search(client, **fields)
    assert answer.status_code == 400, answer.text
    assert "give it once" in answer.json()["detail"]


def test_a_declared_bool_is_taken_as_a_bool(client: TestClient) -> None:
    """``centre`` was refused ("centre must be a number, got True") while the CLI took centre=true."""
    for centre in (True, "true"):
        answer = _search(client, rerank=True, method="diffusion", pool=10, params={"centre": centre})
        assert answer.status_code == 200, answer.text
    answer = _search(client, rerank=True, method="diffusion", pool=10, params={"centre": 1.5})
    assert answer.status_code == 400 and "centre must be a bool" in answer.json()["detail"]


def test_an_out_of_range_value_names_the_declared_range(client: TestClient) -> None:
    answer = _search(client, rerank=True, method="ecn", pool=10, params={"t": 101})
    assert answer.status_code == 400
    assert answer.json()["detail"] == "t must lie in [1, 100], got 101"


@pytest.mark.parametrize("method", ["diffusion", "ecn", "gnn", "dba", "decoupled-diffusion"])
def test_the_form_edits_every_declared_parameter_of_the_chosen_method(
    client: TestClient, method: str
) -> None:
    """The form edited only k-reciprocal's k1, k2, λ; another method's values were hidden fields."""
    from galleria.rerank.registry import reranker_component

    page = client.get(f"/?path=red/0.png&rerank=1&method={method}&pool=10")
    assert page.status_code == 200
    for param in reranker_component(method).params:
        name = f'name="param.{param.name}"'
        assert name in page.text, param.name
        assert f'<input type="hidden" {name} value="{param.default}"' not in page.text
        if param.type in (int, float):
            step = 'step="any" ' if param.type is float else ""
            low, high = format_value(param.low), format_value(param.high)
            assert f'{name} {step}min="{low}" max="{high}"' in page.text
    answer = client.get(f"/?path=red/0.png&rerank=1&method={method}&pool=10&param.{param.name}=x")
    assert answer.status_code == 400 and f"{param.key or param.name} must" in answer.text


@pytest.mark.parametrize("method", ["k-reciprocal", "diffusion", "gnn", "dba", "decoupled-diffusion", "ecn"])
def test_out_of_range_in_the_api_is_the_declared_message(client: TestClient, method: str) -> None:
    """The API entry point of tests/core/test_one_check.py: the same message as the class's."""
    from galleria.rerank.registry import reranker_component

    param = next(p for p in reranker_component(method).params if p.type is int and p.high is not None)
    value = int(param.high) + 1  # type: ignore[arg-type]
    answer = _search(client, rerank=True, method=method, pool=10, params={param.name: value})
    assert answer.status_code == 400
    assert answer.json()["detail"] == f"{param.name} must lie in {param.range_text()}, got {value}"
