"""The trials the tuner tries: the declared spaces, the paper and adaptive first trials."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from galleria.expansion import EXPANSION
from galleria.rerank.registry import (
    reranker_component,
    reranker_components,
)
from galleria.store import InMemoryImageEmbeddingStore
from galleria.tune._constants import _PREPARATION

#: αQE's parameters as the tuner names them (``aqe.alpha``, ``aqe.n``: their declared trial names).
_AQE_KEYS = {param.name: f"aqe.{param.trial_name}" for param in EXPANSION.params}


def _trial_key(method: str, name: str) -> str:
    """Optuna's name of ``method``'s parameter ``name`` (``gnn.k1``; a declared trial name: ``.lambda``)."""
    return f"{method}.{reranker_component(method).param(name).trial_name}"


def _adaptive_trial(family: str, store: InMemoryImageEmbeddingStore) -> dict[str, Any]:
    """Optuna's parameters for ``family``'s adaptive defaults on ``store`` (empty for plain retrieval)."""
    from galleria.rerank.adaptive import default_rerank_params

    if family == "plain":
        return {}
    params = default_rerank_params(store, family)
    if family == "aqe":
        return {_AQE_KEYS[name]: value for name, value in params.items()}
    return {_trial_key(family, key): value for key, value in params.items()}


def _paper_trial(family: str) -> dict[str, Any]:
    """Optuna's parameters for ``family``'s paper values (those the search covers), from the declaration."""
    if family == "aqe":
        return {_AQE_KEYS[name]: value for name, value in EXPANSION.paper_params().items()}
    if family == "plain":
        return {}
    component = reranker_component(family)
    return {
        _trial_key(family, param.name): param.paper
        for param in component.params
        if param.has_paper and param.space is not None and param.name not in _PREPARATION
    }


def _choices(adaptive: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
    """The categorical choices of the search: each declared categorical space plus the adaptive
    trial's value for it (so that the adaptive trial is a point of the space)."""
    result: dict[str, tuple[Any, ...]] = {}
    for component in reranker_components():
        for param in component.params:
            if param.space is None or param.space.kind != "categorical" or param.name in _PREPARATION:
                continue
            key = _trial_key(component.name, param.name)
            values = set(param.space.choices)
            if key in adaptive:
                values.add(adaptive[key])
            result[key] = tuple(sorted(values))
    return result


def _suggest(
    trial: Any, methods: Sequence[str], choices: Mapping[str, tuple[Any, ...]] | None = None
) -> dict[str, Any]:
    """Optuna's proposal for one trial, as ``RetrievalConfig`` keyword arguments.

    The space of each method is its declaration's: every parameter with a tuner ``space`` (a
    categorical one widened by ``choices``), a parameter declared ``at_most`` another clipped to it,
    the declared pools, αQE before it when declared ``with_aqe``, and the preparation parameters
    for a ``prepared`` method.
    """
    choices = _choices({}) if choices is None else choices
    method = trial.suggest_categorical("method", list(methods))
    component = None if method in ("plain", "aqe") else reranker_component(method)
    options: dict[str, Any] = {}
    if method == "aqe" or (
        component is not None
        and component.with_aqe
        and trial.suggest_categorical(f"{method}.aqe", [False, True])
    ):
        options["query_expansion"] = True
        for param in EXPANSION.params:  # the declared spaces (they hold the adaptive values)
            assert param.space is not None
            options[param.name] = param.space.suggest(trial, _AQE_KEYS[param.name])
    if component is None:
        return options
    options["rerank"] = True
    options["rerank_method"] = method
    options["pool"] = trial.suggest_categorical(f"{method}.pool", list(component.pools))
    params: dict[str, Any] = {}
    for param in component.params:
        if param.space is None or param.name in _PREPARATION:
            continue
        key = _trial_key(method, param.name)
        space = param.space
        if space.kind == "categorical" and key in choices:
            space = replace(space, choices=tuple(choices[key]))
        value = space.suggest(trial, key)
        params[param.name] = min(params[param.at_most], value) if param.at_most else value
    if component.prepared:
        params.update(_suggest_preparation(trial, method))
    options["rerank_params"] = params
    return options


def _suggest_preparation(trial: Any, method: str) -> dict[str, Any]:
    """The preparation steps proposed before ``method``: power, centring, then DBA or not."""
    params: dict[str, Any] = {}
    for name in ("vector_power", "centre"):
        space = _PREPARATION[name].space
        assert space is not None
        value = space.suggest(trial, f"{method}.{name}")
        if value != _PREPARATION[name].default:
            params[name] = value
    if trial.suggest_categorical(f"{method}.dba", [False, True]):
        for name in ("dba_neighbors", "dba_alpha"):
            space = _PREPARATION[name].space
            assert space is not None
            params[name] = space.suggest(trial, f"{method}.{name}")
    return params
