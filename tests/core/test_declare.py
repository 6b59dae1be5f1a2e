"""Declared components: the data model, the one validator, what is derived from it, plugin discovery."""

from __future__ import annotations

import importlib.metadata
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from _support.extras import needs
from galleria import PluginWarning
from galleria._declare import PLUGIN_API_VERSION, Component, DeclarationError, Param, Space
from galleria._plugins import clear_cache, merge_components, plugin_components
from galleria.rerank import registry
from galleria.rerank.registry import (
    AUGMENTABLE_METHODS,
    METHOD_PARAMS,
    RERANK_METHODS,
    check_method_params,
    label,
    reranker_component,
    reranker_components,
)

ROOT = Path(__file__).resolve().parents[2]


class _Keep:
    """A re-ranker that keeps the order (what the demo declarations build)."""

    def __init__(self, store: Any, **params: Any) -> None:
        self.store = store

    def rerank(self, candidates: Any, top_k: int) -> list[Any]:
        return list(candidates)[:top_k]


def _component(*params: Param, **options: Any) -> Component:
    return Component("reranker", options.pop("name", "demo"), params, build=_Keep, **options)


# --- the data model -------------------------------------------------------------------------------


def test_a_param_checks_type_and_range_and_names_itself() -> None:
    k = Param("k", int, 5, 1, 10)
    assert k.check(7) == 7
    with pytest.raises(TypeError, match="k must be an integer"):
        k.check(2.5)
    with pytest.raises(TypeError, match="k must be an integer"):
        k.check(True)
    with pytest.raises(ValueError, match=r"k must lie in \[1, 10\], got 11"):
        k.check(11)
    alpha = Param("alpha", float, 0.5, 0.0, 1.0, high_open=True)
    assert alpha.check(0) == 0.0 and isinstance(alpha.check(0), float)
    with pytest.raises(ValueError, match=r"alpha must lie in \[0, 1\)"):
        alpha.check(1.0)
    with pytest.raises(ValueError, match="finite"):
        alpha.check(float("nan"))
    graph = Param("graph", str, "a", choices=("a", "b"))
    with pytest.raises(ValueError, match=r"graph must be one of a \| b, got .c."):
        graph.check("c")
    assert Param("on", bool, False).parse("true") is True
    with pytest.raises(ValueError, match="k must be an integer"):
        k.parse("x")


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Param("k", list, 1), "has no type"),
        (lambda: Param("k", int, 1), "has no range"),
        (lambda: Param("k", int, 0, 1, 10), "default is invalid"),
        (lambda: Param("k", int, 1, 1, 10, paper=20), "paper value is invalid"),
        (lambda: Param("g", str, "a"), "has no choices"),
        (
            lambda: _component(Param("k", int, 1, 1, 9), Param("k", int, 2, 1, 9)),
            "declares parameter 'k' twice",
        ),
        (lambda: _component(api_version=PLUGIN_API_VERSION + 1), "plugin API version"),
        (lambda: _component(Param("k2", int, 1, 1, 9, at_most="k1")), "unknown 'k1'"),
        (lambda: Space("int", 5, 1), "low <= high"),
    ],
)
def test_a_malformed_declaration_is_refused(make: Any, match: str) -> None:
    with pytest.raises(DeclarationError, match=match):
        make()


def test_the_validator_fills_defaults_and_bounds_the_work() -> None:
    demo = _component(
        Param("k", int, 10, 1, 1000, cost=True),
        Param("k2", int, 2, 1, 1000, at_most="k"),
        Param("iterations", int, 20, 1, 1000, cost=True),
        max_work=1_000_000,
    )
    assert demo.check({}) == {"k": 10, "k2": 2, "iterations": 20}
    with pytest.raises(ValueError, match="k2 must not exceed k"):
        demo.check({"k": 3, "k2": 4})
    with pytest.raises(ValueError, match=r"unknown demo parameter\(s\) \['x'\]"):
        demo.check({"x": 1})
    assert demo.check({"k": 500}, pool=100) == {"k": 500, "k2": 2, "iterations": 20}  # 10⁶ steps
    with pytest.raises(ValueError, match="pool 200 × k 500 × iterations 20 is 2,000,000 steps"):
        demo.check({"k": 500}, pool=200)


def test_every_builtin_method_keeps_a_request_affordable() -> None:
    for component in reranker_components():
        component.check({}, pool=1000)  # the defaults at the tuner's deepest pool
        largest = {p.name: p.high for p in component.params if p.cost and p.type is int}
        if largest:
            with pytest.raises(ValueError, match="over the bound"):
                component.check(largest, pool=1000)


# --- derived from the declarations ----------------------------------------------------------------


def test_the_registry_is_the_declarations() -> None:
    assert RERANK_METHODS[0] == "k-reciprocal"
    assert {"k-reciprocal", "diffusion", "gnn", "dba", "decoupled-diffusion"} <= set(RERANK_METHODS)
    for component in reranker_components():
        assert METHOD_PARAMS[component.name] == component.names
        assert (component.name in AUGMENTABLE_METHODS) == component.prepared
    assert check_method_params("gnn", {"k1": 10}) == {"k1": 10, "k2": 7, "lambda_value": 0.3}


def test_the_same_message_from_every_source(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad value reads the same from the library, a settings file's config and the command line."""
    from galleria.cli import main
    from galleria.retrieval import RetrievalConfig

    with pytest.raises(ValueError) as direct:
        check_method_params("diffusion", {"alpha": 1.0})
    message = str(direct.value)
    assert "alpha must lie in [0, 1)" in message
    with pytest.raises(ValueError) as config:
        RetrievalConfig("x", rerank=True, rerank_method="diffusion", rerank_params={"alpha": 1.0})
    assert str(config.value) == message
    search = ["search", "nowhere.safetensors", "--text", "a cat", "--rerank"]
    code = main([*search, "--rerank-method", "diffusion", "--rerank-param", "alpha=1.0"])
    assert code == 2 and message in capsys.readouterr().err


def test_labels_come_from_the_declarations() -> None:
    assert (
        label("gnn", {"k1": 26, "k2": 7, "lambda_value": 0.3}, pool=200)
        == "GNN (k1=26, k2=7, λ=0.3, pool=200)"
    )
    assert label("dba") == "DBA + αQE"
    assert label("k-reciprocal", {"lambda_value": 0.123456789}).endswith("λ=0.123456789)")


def test_cli_choices_and_help_are_derived(capsys: pytest.CaptureFixture[str]) -> None:
    from galleria.cli import main
    from galleria.cli._rerank_options import PRECOMPUTE_RERANK_CHOICES, RERANK_METHOD_CHOICES
    from galleria.rerank.registry import PRECOMPUTED_METHODS

    assert RERANK_METHOD_CHOICES == RERANK_METHODS and PRECOMPUTE_RERANK_CHOICES == PRECOMPUTED_METHODS
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for component in reranker_components():
        assert component.name in text
    assert "paper: 20" in text  # --k1's paper value, read from k-reciprocal's declaration


@needs("optuna")
def test_the_tuner_searches_the_declared_space() -> None:
    import optuna

    from galleria.tune._space import _paper_trial, _suggest

    assert _paper_trial("k-reciprocal") == {
        "k-reciprocal.k1": 20,
        "k-reciprocal.k2": 6,
        "k-reciprocal.lambda": 0.3,
    }
    for method in RERANK_METHODS:
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
        component = reranker_component(method)
        for _ in range(5):
            trial = study.ask()
            options = _suggest(trial, [method])
            study.tell(trial, 0.0)
            params = options.get("rerank_params", options)
            for param in component.params:
                if param.space is not None and param.space.kind == "int" and param.name in params:
                    assert param.space.low <= params[param.name] <= param.space.high
            assert options["pool"] in component.pools


def test_the_listing_shows_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    from galleria.cli import main

    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for name in ("k-reciprocal", "decoupled-diffusion", "hnsw", "ivfpq", "pixel", "timm", "graph_degree"):
        assert name in out


def test_the_docs_tables_are_the_generated_ones() -> None:
    """docs/components.md holds exactly what `galleria methods --markdown` prints (regenerate with
    scripts/gen_component_tables.py)."""
    from galleria.cli.methods import with_tables

    document = (ROOT / "docs" / "components.md").read_text(encoding="utf-8")
    assert document == with_tables(document)
    assert "`lambda_value`" in document and "`search_candidates`" in document


# --- plugins --------------------------------------------------------------------------------------


def _entry(name: str, loaded: Any, package: str = "galleria-demo-plugin") -> Any:
    def load() -> Any:
        if isinstance(loaded, Exception):
            raise loaded
        return loaded() if callable(loaded) and not isinstance(loaded, Component) else loaded

    return SimpleNamespace(
        name=name,
        value=f"demo_plugin:{name}",
        group="galleria.rerankers",
        dist=SimpleNamespace(name=package),
        load=load,
    )


def _fake_entry_points(monkeypatch: pytest.MonkeyPatch, entries: list[Any]) -> None:
    class Found(list):  # type: ignore[type-arg]
        def select(self, group: str) -> list[Any]:
            return [entry for entry in self if entry.group == group]

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda: Found(entries))
    monkeypatch.delenv("GALLERIA_NO_PLUGINS", raising=False)
    clear_cache()


def _good() -> Component:
    return _component(Param("k", int, 3, 1, 9), name="demo-good")


@pytest.mark.parametrize(
    ("loaded", "expected"),
    [
        (ImportError("No module named 'numpyy'"), "failed to import: ImportError"),
        (lambda: _component(Param("k", int, 1)), "parameter 'k' has no range"),
        (lambda: _component(Param("k", int, 50, 1, 10)), "parameter 'k': its default is invalid"),
        (lambda: _component(Param("k", "int", 5, 1, 10)), "parameter 'k' has no type"),
        (lambda: _component(Param("k", int, 1, 1, 9), api_version=99), "plugin API version 99"),
        (lambda: _component(name="k-reciprocal"), "'k-reciprocal', a name already taken"),
        (lambda: Component("index", "demo-index", (), build=dict), "declares a index, not a reranker"),
        (lambda: 42, "is not a galleria Component"),
    ],
)
def test_a_bad_plugin_is_one_warning_and_the_builtins_still_work(
    monkeypatch: pytest.MonkeyPatch, loaded: Any, expected: str
) -> None:
    _fake_entry_points(monkeypatch, [_entry("bad", loaded), _entry("good", _good)])
    builtins = list(registry._BUILTINS)  # the built-ins alone (the registry would discover the fakes)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merged = merge_components("reranker", builtins)
    messages = [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]
    assert len(messages) == 1, messages
    assert "'galleria-demo-plugin'" in messages[0] and "'bad' = 'demo_plugin:bad'" in messages[0]
    assert expected in messages[0]
    names = [component.name for component in merged]
    assert names == [*(component.name for component in builtins), "demo-good"]
    assert list(RERANK_METHODS) == names  # the registry, used after the plugins changed, agrees
    clear_cache()


def test_no_plugins_turns_discovery_off(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_entry_points(monkeypatch, [_entry("good", _good)])
    assert [c.name for _, c in plugin_components("reranker")] == ["demo-good"]
    clear_cache()
    monkeypatch.setenv("GALLERIA_NO_PLUGINS", "1")
    assert plugin_components("reranker") == []
    clear_cache()


def test_public_names_spell_neighbor_and_the_old_spellings_still_work() -> None:
    import numpy as np

    from galleria import InMemoryImageEmbeddingStore
    from galleria.rerank import diffusion
    from galleria.rerank.base import top_similar
    from galleria.rerank.dba import augment_store

    assert diffusion.graph_neighbours is diffusion.graph_neighbors
    assert diffusion.truncated_neighbours is diffusion.truncated_neighbors
    vectors = np.random.default_rng(0).normal(size=(12, 4))
    store = InMemoryImageEmbeddingStore.from_embeddings([f"{i}" for i in range(12)], vectors)
    lists = top_similar(store.embeddings, store.embeddings, 4, exclude_self=True)[0]
    new = augment_store(store, neighbors=3, neighbor_lists=lists)
    with pytest.warns(DeprecationWarning, match="neighbor_lists"):
        old = augment_store(store, neighbors=3, neighbour_lists=lists)
    np.testing.assert_array_equal(new.embeddings, old.embeddings)


def test_a_settings_file_cannot_ask_for_minutes_of_work() -> None:
    from galleria.tune.settings import config_from_settings

    heavy = {
        "rerank": True,
        "rerank_method": "diffusion",
        "k": 5000,
        "query_k": 500,
        "maxiter": 5000,
        "pool": 400,
    }
    with pytest.raises(
        ValueError, match=r"settings: diffusion: pool 400 × k 5000 × query_k 500 × maxiter 5000"
    ):
        config_from_settings(heavy)
    config_from_settings({**heavy, "k": 50, "query_k": 10, "maxiter": 20})  # the usual sizes load


def test_every_method_module_is_found_by_scanning() -> None:
    """The registry holds exactly the modules of galleria.rerank that declare a COMPONENT: a new
    method is one new module, named nowhere else."""
    import galleria.rerank as package

    declaring = set()
    for path in Path(package.__file__).parent.glob("*.py"):
        if "\nCOMPONENT = Component(" in path.read_text(encoding="utf-8"):
            declaring.add(path.stem)
    modules = {component.build.__module__.rsplit(".", 1)[-1] for component in reranker_components()}
    assert modules == declaring
    import ast

    tree = ast.parse((Path(package.__file__).parent / "registry.py").read_text(encoding="utf-8"))
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    # a public signature's default (precompute_rerank's method) is kept as it was
    docstrings |= {
        id(value) for node in ast.walk(tree) if isinstance(node, ast.arguments) for value in node.defaults
    }
    strings = {
        node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and id(node) not in docstrings
    }
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    for component in reranker_components():  # no method is named in the registry's code
        assert component.name not in strings and component.build.__name__ not in names
