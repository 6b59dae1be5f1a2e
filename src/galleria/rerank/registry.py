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
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from galleria._declare import Component
from galleria._params import format_value
from galleria._plugins import LazyMapping, LazyNames, builtin_components, merge_components
from galleria._validation import check_choice
from galleria.rerank._dba_core import augmented_store_for
from galleria.rerank._prepared import cached_preparation
from galleria.rerank.base import Reranker, resolved_params
from galleria.rerank.normalise import PREPARATION_PARAMS, normalised_store, preparation_constraint
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = [
    "AUGMENTABLE_METHODS",
    "DEFAULT_COMPONENT",
    "DEFAULT_METHOD",
    "METHOD_PARAMS",
    "PRECOMPUTED_METHODS",
    "RERANK_METHODS",
    "SETTINGS_KEYS",
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


#: Settings keys every method shares (a settings file, a request, :class:`RetrievalConfig`): no
#: plugin parameter may be spelled so, nor like a gallery-preparation parameter.
SETTINGS_KEYS: tuple[str, ...] = (
    "name",
    "method",
    "params",
    "preset",
    "query_expansion",
    "expansion_alpha",
    "expansion_neighbors",
    "rerank",
    "rerank_method",
    "rerank_preset",
    "rerank_params",
    "pool",
    "tail",
    *_PREPARE_PARAMS,
)

#: The built-in methods' declarations, in declared order (found by scanning this package).
#: The package's folder, scanned for the built-in components (the package itself, which imports this
#: module, is not imported here: no circle between the two).
_package = SimpleNamespace(__name__=__name__.rpartition(".")[0], __path__=[str(Path(__file__).parent)])

_BUILTINS: tuple[Component, ...] = tuple(
    _with_preparation(component)
    for component in builtin_components(_package, "reranker", ("registry", "adaptive"))
)


def _merged() -> dict[str, Component]:
    """Every method's declaration: the built-ins, then the plugins' (discovered on first use)."""
    from galleria.rerank._plugin import PluginReranker

    merged = merge_components("reranker", _BUILTINS, reserved=SETTINGS_KEYS, wrap=PluginReranker)
    return {component.name: _with_preparation(component) for component in merged}


#: Every method's declaration by name, plugins included (computed on first use).
_COMPONENTS: LazyMapping[str, Component] = LazyMapping(_merged)


def reranker_components() -> tuple[Component, ...]:
    """Every re-ranking method's declaration (built-in, then plugins), the default first."""
    return tuple(_COMPONENTS.values())


def reranker_component(method: Any) -> Component:
    """The declaration of ``method`` (TypeError / ValueError naming ``method`` when unknown)."""
    return _COMPONENTS[check_choice("method", method, RERANK_METHODS)]


#: The methods that can re-rank on the DBA-augmented gallery (``dba_neighbors``, ``dba_alpha``).
AUGMENTABLE_METHODS: LazyNames[str] = LazyNames(
    lambda: tuple(name for name, c in _COMPONENTS.items() if c.prepared)
)
#: The re-ranking methods :func:`make_reranker` knows, the default first (plugins included: a
#: view computed on first use).
RERANK_METHODS: LazyNames[str] = LazyNames(lambda: tuple(_COMPONENTS))
#: The method used when none is named: the first built-in (a plugin never takes its place).
DEFAULT_METHOD: str = _BUILTINS[0].name
#: The declaration of :data:`DEFAULT_METHOD` (read without discovering plugins).
DEFAULT_COMPONENT: Component = _BUILTINS[0]
#: The keyword parameters each method takes (besides the store).
METHOD_PARAMS: LazyMapping[str, tuple[str, ...]] = LazyMapping(
    lambda: {name: c.names for name, c in _COMPONENTS.items()}
)


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

    ``params`` are the method's declared parameters (:data:`METHOD_PARAMS`; ``galleria methods`` and
    docs/components.md list them with their ranges), checked by its declaration first, as every
    entry point checks them; the values left out keep the constructor's choice (the declared
    default, or, for the methods that read them from the gallery, the adaptive rule's). The
    :data:`AUGMENTABLE_METHODS` also take the preparation parameters and re-rank on the normalised
    and/or DBA-augmented copy of ``store``: retrieve the candidates from the re-ranker's ``store``.

    Raises
    ------
    TypeError, ValueError
        An unknown method, an unknown parameter or a value its declaration refuses (the message
        names ``make_reranker``, the parameter and its range), and whatever the constructor raises.

    Examples
    --------
    >>> import numpy as np
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c"], np.eye(3))
    >>> type(make_reranker("diffusion", store, k=2)).__name__
    'DiffusionReranker'
    """
    component = reranker_component(method)
    # the declaration's check, always (the values left out stay out: a re-ranker that reads them
    # from the gallery, k-reciprocal's and ECN's, still does)
    checked = component.check_given(params, where=f"make_reranker({component.name!r})")
    if component.prepared:
        preparation = _check_preparation(params)
        checked = {key: value for key, value in checked.items() if key not in _PREPARE_PARAMS}
        store = prepared_store(store, preparation)
    built: Reranker = component.build(store, **checked)
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
PRECOMPUTED_METHODS: LazyNames[str] = LazyNames(
    lambda: tuple(name for name, c in _COMPONENTS.items() if "precompute" in c.extra)
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
    name = check_precompute_method(method)
    params = check_method_params(name, resolved_params(_COMPONENTS[name], store, preset))
    extra = _COMPONENTS[name].extra
    extra["precompute"](store, **{key: params[key] for key in extra["offline"]})
    return params
