"""One declaration, one check, every entry point (issue 35 §1), in the spirit of scikit-learn's
``check_estimator``: for every declared re-ranker (a test plugin included) and every entry point — the
class, the registry, :class:`RetrievalConfig`, a settings file, the command line and the JSON API —
an out-of-range value is refused with the same message naming the parameter and its range (and
where it came from), an omitted value gives the declared (or adaptive) default, and every adaptive
default lies inside the tuner's declared space.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from galleria._declare import Component, Param, Space
from galleria._plugins import clear_cache
from galleria.cli import main
from galleria.expansion import EXPANSION
from galleria.rerank import registry
from galleria.rerank.base import declared_params, resolved_params
from galleria.rerank.normalise import PREPARATION_PARAMS
from galleria.retrieval import RetrievalConfig
from galleria.statistics import GalleryStatistics
from galleria.store import InMemoryImageEmbeddingStore
from galleria.tune.settings import FORMAT_NAME, FORMAT_VERSION, read_settings


class PluginReranker:
    """A plugin written from docs/extending.md: its constructor checks through its declaration."""

    def __init__(self, store: InMemoryImageEmbeddingStore, *, depth: int | None = None) -> None:
        self.store = store
        self.depth = declared_params(PLUGIN, "PluginReranker", depth=depth)["depth"]

    def rerank(self, candidates: Any, top_k: int) -> list[Any]:
        return list(candidates)[:top_k]

    def rerank_batch(self, candidate_lists: Any, top_k: int) -> list[list[Any]]:
        return [self.rerank(candidates, top_k) for candidates in candidate_lists]


PLUGIN = Component(
    kind="reranker",
    name="test-plugin",
    params=(Param("depth", int, 7, 1, 50, paper=7, space=Space("int", 1, 50), help="how deep"),),
    build=PluginReranker,
    adaptive=lambda stats: {"depth": 3},
)


@pytest.fixture()
def with_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry with :data:`PLUGIN` added, as discovery adds one."""
    merged = {**registry._COMPONENTS.value(), PLUGIN.name: PLUGIN}
    monkeypatch.setattr(registry._COMPONENTS, "_compute", lambda: merged)
    clear_cache()  # every view (the method names, their parameters) computed again, with the plugin
    yield
    monkeypatch.undo()
    clear_cache()


def _components() -> list[Component]:
    return [*registry.reranker_components(), PLUGIN]


def _out_of_range(component: Component) -> tuple[Param, Any, str]:
    """A numeric parameter of ``component``, a value just above its range, and the message it gets."""
    param = next(p for p in component.params if p.type is int and p.high is not None)
    value = int(param.high) + 1  # type: ignore[arg-type]
    return param, value, f"{param.name} must lie in {param.range_text()}, got {value!r}"


@pytest.fixture(scope="module")
def store() -> InMemoryImageEmbeddingStore:
    vectors = np.random.default_rng(0).normal(size=(40, 6))
    return InMemoryImageEmbeddingStore.from_embeddings([f"{i:02d}" for i in range(40)], vectors)


COMPONENT_NAMES = [component.name for component in _components()]


@pytest.mark.parametrize("name", COMPONENT_NAMES)
def test_out_of_range_is_one_message_from_every_python_entry_point(
    name: str, store: InMemoryImageEmbeddingStore, with_plugin: None, tmp_path: Path
) -> None:
    component = registry.reranker_component(name)
    param, value, message = _out_of_range(component)
    given = {param.name: value}
    refused = {
        f"{component.build.__name__}: ": lambda: component.build(store, **given),  # the class
        f"make_reranker({name!r}): ": lambda: registry.make_reranker(name, store, **given),
        "": lambda: registry.check_method_params(name, given),
        " ": lambda: RetrievalConfig("x", rerank=True, rerank_method=name, rerank_params=given),
    }
    settings = tmp_path / "settings.json"
    document = {"rerank": True, "rerank_method": name, param.name: value}
    settings.write_text(
        json.dumps({"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "settings": document})
    )
    refused[f"settings file {str(settings)!r}: "] = lambda: read_settings(settings)
    for where, call in refused.items():
        with pytest.raises(ValueError) as caught:
            call()
        text = str(caught.value)
        assert "\n" not in text and text.endswith(message), (where, text)
        assert text.startswith(where.strip()), (where, text)


@pytest.mark.parametrize("name", [component.name for component in registry.reranker_components()])
def test_out_of_range_on_the_command_line_is_one_line_and_exit_2(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """(A plugin's method is a choice of ``--rerank-method`` once installed: discovery runs first.)"""
    component = registry.reranker_component(name)
    param, value, message = _out_of_range(component)
    file, image = tmp_path / "store.safetensors", tmp_path / "q.png"  # not read: options come first
    arguments = ["search", str(file), "--image", str(image), "--rerank", "--rerank-method", name]
    code = main([*arguments, "--rerank-preset", "paper", "--rerank-param", f"{param.name}={value}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.endswith(message) and "--rerank" in err, err


def test_a_flag_value_out_of_range_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arguments = ["search", str(tmp_path / "s.safetensors"), "--image", str(tmp_path / "q.png"), "--rerank"]
    assert main([*arguments, "--rerank-preset", "paper", "--k1", "10001"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--k1: k1 must lie in [1, 10000], got 10001") and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("name", COMPONENT_NAMES)
def test_an_omitted_value_is_the_declared_or_adaptive_default(
    name: str, store: InMemoryImageEmbeddingStore, with_plugin: None
) -> None:
    component = registry.reranker_component(name)
    checked = registry.check_method_params(name, {})
    assert checked == {p.name: p.default for p in component.params if p.name in checked}
    preparation = {p.name for p in PREPARATION_PARAMS}  # left out at their no-op values
    assert {p.name for p in component.params} - preparation <= set(checked)
    paper = RetrievalConfig("p", rerank=True, rerank_method=name, rerank_preset="paper")
    assert paper.rerank_params == registry.check_method_params(name, component.paper_params() or {})
    adaptive = RetrievalConfig("a", rerank=True, rerank_method=name).resolve(store).rerank_params
    rule = resolved_params(component, store)
    assert {key: adaptive[key] for key in rule} == rule
    # the constructor leaves nothing undeclared: its values are the declared defaults
    built = registry.make_reranker(name, store, **component.paper_params())
    assert built is not None


@pytest.mark.parametrize(
    "stats",
    [
        GalleryStatistics(1000, 200, (5, 10, 20), (0.6, 0.62, 0.65), (3.0, 6.0, 14.0)),  # reciprocal
        GalleryStatistics(1000, 200, (5, 10, 20), (0.3, 0.32, 0.35), (1.0, 3.0, 7.0)),  # loose
        GalleryStatistics(1000, 200, (5, 10, 20), (0.9, 0.9, 0.9), (5.0, 10.0, 19.0)),  # tight
        GalleryStatistics(2, 0, (), (), ()),  # no structure
    ],
    ids=["reciprocal", "loose", "tight", "flat"],
)
def test_every_adaptive_default_lies_in_the_tuner_space(stats: GalleryStatistics) -> None:
    """Today DBA's adaptive α 10 and 1000 lay outside its tuner range of at most 5 (optuna warned)."""
    for component in [*registry.reranker_components(), EXPANSION]:
        if component.adaptive is None:
            continue
        values = component.resolve(lambda: stats)
        for key, value in values.items():
            space = component.param(key).space
            if space is None or space.kind == "categorical":  # the tuner adds the adaptive choice
                continue
            assert space.low <= value <= space.high, (component.name, key, value, space)
