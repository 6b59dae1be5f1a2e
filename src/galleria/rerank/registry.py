"""The registry of re-ranking methods: every method by name, its parameters, their validation.

Every method declares itself in its own module: a module of :mod:`galleria.rerank` with a
module-level ``COMPONENT`` (a :class:`galleria._declare.Component`) is found by scanning the package,
and an installed package adds one through the entry-point group ``galleria.rerankers``
(:mod:`galleria._plugins`). A new method is therefore one new module; nothing here names it. This
module sits above the implementations (it imports them; none of them imports it at import time).

* :func:`reranker_components` / :func:`reranker_component` — the declarations, the default first;
* :data:`RERANK_METHODS` — the names :func:`make_reranker` knows, the default first;
* :data:`METHOD_PARAMS` — the keyword parameters each method takes (besides the store);
* :func:`make_reranker` — build a method's re-ranker on a store;
* :func:`check_method_params` — validate a method's parameters without a store, defaults filled in
  (the one validator the CLI, the API, settings files and stores share: :meth:`Component.check`);
* :func:`label` — how reports name a method with its parameters;
* :data:`AUGMENTABLE_METHODS` — the methods that can run on a prepared gallery: power-normalised
  and centred vectors (``vector_power`` < 1, ``centre``; :mod:`galleria.rerank.normalise`), then
  DBA-augmented ones (``dba_neighbors`` > 0, ``dba_alpha``; as for the ``dba`` method,
  :func:`~galleria.rerank.dba.augment_store`). The method re-ranks on that derived store, so
  candidates are retrieved from the re-ranker's :attr:`store`. The defaults (power 1, no centring,
  ``dba_neighbors`` 0) are the gallery as it is and are left out of the settings;
* :data:`PRECOMPUTED_METHODS` / :func:`precompute_rerank` — the methods with an offline part a store
  can keep (``galleria build --precompute-rerank``), and the call that computes it into the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import galleria.rerank as _package
from galleria._declare import Component
from galleria._params import format_value
from galleria._plugins import builtin_components, merge_components
from galleria._validation import check_choice
from galleria.rerank._dba_core import augmented_store_for
from galleria.rerank._prepared import cached_preparation
from galleria.rerank.base import Reranker
from galleria.rerank.normalise import PREPARATION_PARAMS, normalised_store, preparation_constraint
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = [
    "AUGMENTABLE_METHODS",
    "DEFAULT_METHOD",
    "METHOD_PARAMS",
    "PRECOMPUTED_METHODS",
    "RERANK_METHODS",
    "check_method_params",
    "check_precompute_method",
    "label",
    "make_reranker",
    "precompute_rerank",
    "prepared_store",
    "reranker_component",
    "reranker_components",
]

#: The gallery-preparation parameter names of the ``prepared`` methods.
_PREPARE_PARAMS = tuple(param.name for param in PREPARATION_PARAMS)


def _with_preparation(component: Component) -> Component:
    """A ``prepared`` method's declaration with the preparation parameters appended."""
    if not component.prepared or set(_PREPARE_PARAMS) <= set(component.names):
        return component
    own = component.constraints

    def constraints(params: dict[str, Any]) -> dict[str, Any]:
        amended = own(params) if own is not None else None
        return preparation_constraint(params if amended is None else amended)

    return replace(component, params=(*component.params, *PREPARATION_PARAMS), constraints=constraints)


def _builtin_components() -> list[Component]:
    """Every ``COMPONENT`` declared by a module of this package (found by scanning it)."""
    return builtin_components(_package, "reranker", ("registry", "adaptive"))


_COMPONENTS: dict[str, Component] = {
    component.name: _with_preparation(component)
    for component in merge_components("reranker", _builtin_components())
}


def reranker_components() -> tuple[Component, ...]:
    """Every re-ranking method's declaration (built-in, then plugins), the default first."""
    return tuple(_COMPONENTS.values())


def reranker_component(method: Any) -> Component:
    """The declaration of ``method`` (TypeError / ValueError naming ``method`` when unknown)."""
    return _COMPONENTS[check_choice("method", method, RERANK_METHODS)]


#: The methods that can re-rank on the DBA-augmented gallery (``dba_neighbors``, ``dba_alpha``).
AUGMENTABLE_METHODS: tuple[str, ...] = tuple(name for name, c in _COMPONENTS.items() if c.prepared)
#: The re-ranking methods :func:`make_reranker` knows, the default first.
RERANK_METHODS: tuple[str, ...] = tuple(_COMPONENTS)
#: The method used when none is named.
DEFAULT_METHOD = RERANK_METHODS[0]
#: The keyword parameters each method takes (besides the store).
METHOD_PARAMS: dict[str, tuple[str, ...]] = {name: c.names for name, c in _COMPONENTS.items()}


#: The preparation step alone, declared as a component so that its check is the same code.
_PREPARATION = Component(
    "reranker",
    "preparation",
    PREPARATION_PARAMS,
    build=normalised_store,
    constraints=preparation_constraint,
)


def _check_preparation(params: Mapping[str, Any]) -> dict[str, Any]:
    """The preparation parameters of ``params``, checked, each left out at its no-op value."""
    return _PREPARATION.check({key: params[key] for key in _PREPARE_PARAMS if key in params})


def prepared_store(
    store: InMemoryImageEmbeddingStore, preparation: Mapping[str, Any]
) -> InMemoryImageEmbeddingStore:
    """``store`` prepared as :func:`_check_preparation`'s ``preparation`` says: normalised (a
    read-only view) when asked, then DBA-augmented when asked. A store already prepared so (a saved
    augmented store, a caller's normalised view) is used as it is.

    The prepared store is built once per state of ``store``'s gallery and preparation, and reused
    while the gallery stays the same (:mod:`galleria.rerank._prepared`): what is computed on it (the
    diffusion graph, the offline table) is then computed once too."""
    wanted = {
        "vector_power": preparation.get("vector_power", 1.0),
        "centre": preparation.get("centre", False),
    }
    if wanted == {"vector_power": 1.0, "centre": False} and "dba_neighbors" not in preparation:
        return store
    key = tuple(sorted(preparation.items()))
    return cached_preparation(store, key, lambda: _prepare(store, preparation))  # type: ignore[no-any-return]


def _prepare(
    store: InMemoryImageEmbeddingStore, preparation: Mapping[str, Any]
) -> InMemoryImageEmbeddingStore:
    """``store`` prepared as ``preparation`` says (see :func:`prepared_store`), built anew."""
    wanted = {
        "vector_power": preparation.get("vector_power", 1.0),
        "centre": preparation.get("centre", False),
    }
    if wanted != {"vector_power": 1.0, "centre": False} and store.vector_transform != wanted:
        store = normalised_store(store, **wanted)
    if "dba_neighbors" in preparation:
        store = augmented_store_for(
            store, preparation["dba_neighbors"], preparation["dba_alpha"], "database-side augmentation"
        )
    return store


def make_reranker(method: str, store: InMemoryImageEmbeddingStore, **params: Any) -> Reranker:
    """Build the re-ranker named ``method`` (one of :data:`RERANK_METHODS`) on ``store``.

    ``params`` are the re-ranker's keyword arguments as its declaration names them
    (``METHOD_PARAMS[method]``; ``galleria methods`` prints them with their ranges), and for the
    :data:`AUGMENTABLE_METHODS` also the gallery preparation's (``vector_power``, ``centre``,
    ``dba_neighbors``, ``dba_alpha``), which then re-rank on the normalised and/or DBA-augmented copy
    of ``store``: retrieve the candidates from the re-ranker's ``store``.

    Raises
    ------
    TypeError, ValueError
        An unknown method, and whatever the re-ranker's constructor raises for its parameters.

    Examples
    --------
    >>> import numpy as np
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c"], np.eye(3))
    >>> type(make_reranker("diffusion", store, k=2)).__name__
    'DiffusionReranker'
    """
    component = reranker_component(method)
    if component.prepared:
        extra = sorted(set(params) - set(component.names))
        if extra:
            raise TypeError(
                f"unknown {component.name} parameter(s) {extra}; it takes {list(component.names)}"
            )
        preparation = _check_preparation(params)
        params = {key: value for key, value in params.items() if key not in _PREPARE_PARAMS}
        store = prepared_store(store, preparation)
    built: Reranker = component.build(store, **params)
    return built


def check_method_params(method: Any, params: Any, *, pool: int | None = None) -> dict[str, Any]:
    """Validate a method name and its parameters without a store; return all of them, defaults filled in.

    Raises TypeError / ValueError naming the method, an unknown parameter, or a bad value; with
    ``pool`` (the candidates re-ranked per query), also work per query over the method's bound.
    This is the one validator of re-ranking parameters (:meth:`galleria._declare.Component.check`):
    the command line, the API, settings files and store files all reach it.

    Examples
    --------
    >>> check_method_params("gnn", {"k1": 10})
    {'k1': 10, 'k2': 7, 'lambda_value': 0.3}
    """
    return reranker_component(method).check(params, pool=pool)


def label(method: Any, params: Mapping[str, Any] | None = None, *, pool: int | None = None) -> str:
    """How reports name ``method`` with ``params`` (its declared label, the values in declared order).

    Examples
    --------
    >>> label("gnn", {"k1": 26, "k2": 7, "lambda_value": 0.3}, pool=200)
    'GNN (k1=26, k2=7, λ=0.3, pool=200)'
    >>> label("dba")
    'DBA + αQE'
    """
    component = reranker_component(method)
    parts = [component.describe(params or {})]
    if pool is not None:
        parts.append(f"pool={format_value(pool)}")
    shown = ", ".join(part for part in parts if part)
    return f"{component.title} ({shown})" if shown else component.title


#: The methods whose offline part a store can keep, computed at build time (``--precompute-rerank``):
#: those whose declaration carries ``extra["precompute"]`` (and ``extra["offline"]``, its parameters).
PRECOMPUTED_METHODS: tuple[str, ...] = tuple(
    name for name, c in _COMPONENTS.items() if "precompute" in c.extra
)


def check_precompute_method(method: Any) -> str:
    """The one check of ``--precompute-rerank`` / :func:`precompute_rerank`'s method (a name of
    :data:`PRECOMPUTED_METHODS`); raises TypeError / ValueError naming ``precompute_rerank``."""
    return check_choice("precompute_rerank", method, PRECOMPUTED_METHODS)


def precompute_rerank(
    store: InMemoryImageEmbeddingStore, method: str = "decoupled-diffusion", preset: str = "adaptive"
) -> dict[str, Any]:
    """Compute ``method``'s offline part over ``store`` now and keep it there (and in its saved file).

    The parameters are the ones a later ``--rerank --rerank-method METHOD`` (or
    :func:`galleria.rerank.adaptive.default_rerank_params` with the same ``preset``) hands the
    re-ranker, so that re-ranking finds the part ready and does not compute it again. Returns those
    parameters.

    Raises
    ------
    TypeError, ValueError
        A method without an offline part, an unknown preset, a store the method cannot use.
    RuntimeError
        The store is not built.

    Examples
    --------
    >>> import numpy as np
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c"], np.eye(3))
    >>> params = precompute_rerank(store)
    >>> params["query_k"], params["truncation"]
    (1, 1000)
    """
    from galleria.rerank.adaptive import default_rerank_params

    name = check_precompute_method(method)
    params = check_method_params(name, default_rerank_params(store, name, preset))
    extra = _COMPONENTS[name].extra
    extra["precompute"](store, **{key: params[key] for key in extra["offline"]})
    return params
