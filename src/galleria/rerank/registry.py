"""The registry of re-ranking methods: every method by name, its parameters, their validation.

It sits above the implementations (it imports them; none of them imports it), so a new method is
one entry in :data:`_METHODS` — its parameter names, its constructor and its store-free check.

* :data:`RERANK_METHODS` — the names :func:`make_reranker` knows, the default first;
* :data:`METHOD_PARAMS` — the keyword parameters each method takes (besides the store);
* :func:`make_reranker` — build a method's re-ranker on a store;
* :func:`check_method_params` — validate a method's parameters without a store, defaults filled in;
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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from galleria._validation import check_bool, check_choice, check_positive_int, is_int
from galleria.expansion import check_expansion_alpha
from galleria.rerank._common import check_hyperparameters
from galleria.rerank._prepared import cached_preparation
from galleria.rerank.base import Reranker
from galleria.rerank.dba import DBAReranker, augmented_store_for
from galleria.rerank.decoupled import (
    OFFLINE_PARAMS,
    DecoupledDiffusionReranker,
    check_decoupled_params,
    prepare_offline_diffusion,
)
from galleria.rerank.diffusion import GRAPHS as DIFFUSION_GRAPHS
from galleria.rerank.diffusion import DiffusionReranker, check_diffusion_params
from galleria.rerank.gnn import DEFAULT_LAMBDA as DEFAULT_GNN_LAMBDA
from galleria.rerank.gnn import GnnReranker, check_gnn_params
from galleria.rerank.normalise import check_vector_power, normalised_store
from galleria.rerank.reranker import KReciprocalReranker
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = [
    "AUGMENTABLE_METHODS",
    "DEFAULT_METHOD",
    "METHOD_PARAMS",
    "PRECOMPUTED_METHODS",
    "RERANK_METHODS",
    "check_method_params",
    "check_precompute_method",
    "make_reranker",
    "precompute_rerank",
    "prepared_store",
]


@dataclass(frozen=True)
class _Method:
    """One method: its parameter names, its re-ranker's constructor, its store-free check."""

    params: tuple[str, ...]
    build: Callable[..., Reranker]
    check: Callable[[Mapping[str, Any]], dict[str, Any]]


def _check_k_reciprocal(params: Mapping[str, Any]) -> dict[str, Any]:
    k1, k2, lam = check_hyperparameters(
        params.get("k1", 20), params.get("k2", 6), params.get("lambda_value", 0.3)
    )
    return {"k1": k1, "k2": k2, "lambda_value": lam}


#: The parameters of a method that can run on a prepared gallery (normalised, then augmented).
_PREPARE_PARAMS = ("vector_power", "centre", "dba_neighbors", "dba_alpha")


def _check_preparation(params: Mapping[str, Any]) -> dict[str, Any]:
    """``vector_power`` (in (0, 1]; 1: none), ``centre`` (bool), ``dba_neighbors`` (a non-negative
    int; 0: no augmentation) and ``dba_alpha`` — each left out at its no-op value, so that a
    setting without them reads as before."""
    result: dict[str, Any] = {}
    power = check_vector_power(params.get("vector_power", 1.0))
    if power != 1.0:
        result["vector_power"] = power
    if check_bool("centre", params.get("centre", False)):
        result["centre"] = True
    neighbors = params.get("dba_neighbors", 0)
    if not is_int(neighbors):
        raise TypeError(f"dba_neighbors must be an int, got {neighbors!r} ({type(neighbors).__name__})")
    if neighbors < 0:
        raise ValueError(f"dba_neighbors must be >= 0 (0: no augmentation), got {neighbors!r}")
    alpha = check_expansion_alpha("dba_alpha", params.get("dba_alpha", 3.0))
    if neighbors:
        result.update(dba_neighbors=int(neighbors), dba_alpha=alpha)
    return result


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


_DIFFUSION_PARAMS = ("k", "query_k", "alpha", "gamma", "tol", "maxiter", "count_self", "graph")


def _check_diffusion(params: Mapping[str, Any]) -> dict[str, Any]:
    values = check_diffusion_params(
        params.get("k", 50),
        params.get("query_k", 10),
        params.get("alpha", 0.99),
        params.get("gamma", 3.0),
        params.get("tol", 1e-6),
        params.get("maxiter", 20),
    )
    count_self = check_bool("count_self", params.get("count_self", True))
    graph = check_choice("graph", params.get("graph", "gallery"), DIFFUSION_GRAPHS)
    return {
        **dict(zip(_DIFFUSION_PARAMS, (*values, count_self, graph), strict=True)),
        **_check_preparation(params),
    }


def _check_gnn(params: Mapping[str, Any]) -> dict[str, Any]:
    k1, k2, lam = check_gnn_params(
        params.get("k1", 26), params.get("k2", 7), params.get("lambda_value", DEFAULT_GNN_LAMBDA)
    )
    return {"k1": k1, "k2": k2, "lambda_value": lam}


def _check_dba(params: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "neighbors": check_positive_int("neighbors", params.get("neighbors", 10)),
        "alpha": check_expansion_alpha("alpha", params.get("alpha", 3.0)),
        "aqe_neighbors": check_positive_int("aqe_neighbors", params.get("aqe_neighbors", 10)),
        "aqe_alpha": check_expansion_alpha("aqe_alpha", params.get("aqe_alpha", 3.0)),
    }


_DECOUPLED_PARAMS = ("k", "truncation", "query_k", "alpha", "gamma", "tol", "maxiter")


def _check_decoupled(params: Mapping[str, Any]) -> dict[str, Any]:
    values = check_decoupled_params(
        params.get("k", 50),
        params.get("truncation", 1000),
        params.get("query_k", 10),
        params.get("alpha", 0.99),
        params.get("gamma", 3.0),
        params.get("tol", 1e-6),
        params.get("maxiter", 20),
    )
    return {**dict(zip(_DECOUPLED_PARAMS, values, strict=True)), **_check_preparation(params)}


#: Every method by name, the default first.
_METHODS: dict[str, _Method] = {
    "k-reciprocal": _Method(("k1", "k2", "lambda_value"), KReciprocalReranker, _check_k_reciprocal),
    "diffusion": _Method(_DIFFUSION_PARAMS + _PREPARE_PARAMS, DiffusionReranker, _check_diffusion),
    "gnn": _Method(("k1", "k2", "lambda_value"), GnnReranker, _check_gnn),
    "dba": _Method(("neighbors", "alpha", "aqe_neighbors", "aqe_alpha"), DBAReranker, _check_dba),
    "decoupled-diffusion": _Method(
        _DECOUPLED_PARAMS + _PREPARE_PARAMS, DecoupledDiffusionReranker, _check_decoupled
    ),
}

#: The methods that can re-rank on the DBA-augmented gallery (``dba_neighbors``, ``dba_alpha``).
AUGMENTABLE_METHODS: tuple[str, ...] = tuple(
    name for name, method in _METHODS.items() if "dba_neighbors" in method.params
)

#: The re-ranking methods :func:`make_reranker` knows, the default first.
RERANK_METHODS: tuple[str, ...] = tuple(_METHODS)
#: The method used when none is named.
DEFAULT_METHOD = RERANK_METHODS[0]
#: The keyword parameters each method takes (besides the store).
METHOD_PARAMS: dict[str, tuple[str, ...]] = {name: method.params for name, method in _METHODS.items()}


def make_reranker(method: str, store: InMemoryImageEmbeddingStore, **params: Any) -> Reranker:
    """Build the re-ranker named ``method`` (one of :data:`RERANK_METHODS`) on ``store``.

    ``params`` are the re-ranker's keyword arguments (:data:`METHOD_PARAMS`: ``k1``, ``k2``,
    ``lambda_value`` for k-reciprocal; ``k``, ``query_k``, ``alpha``, ``gamma``, ``tol``,
    ``maxiter``, ``count_self``, ``graph`` for diffusion; ``k1``, ``k2``, ``lambda_value`` for gnn;
    ``neighbors``, ``alpha``, ``aqe_neighbors``, ``aqe_alpha`` for dba; ``k``, ``truncation``,
    ``query_k``, ``alpha``, ``gamma``, ``tol``, ``maxiter`` for decoupled-diffusion; and
    ``vector_power``, ``centre``, ``dba_neighbors``, ``dba_alpha`` for the
    :data:`AUGMENTABLE_METHODS`, which then re-rank on the normalised and/or DBA-augmented copy of
    ``store``: retrieve the candidates from the re-ranker's ``store``).

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
    name = check_choice("method", method, RERANK_METHODS)
    if name in AUGMENTABLE_METHODS:
        extra = sorted(set(params) - set(_METHODS[name].params))
        if extra:
            raise TypeError(f"unknown {name} parameter(s) {extra}; it takes {list(_METHODS[name].params)}")
        preparation = _check_preparation(params)
        params = {key: value for key, value in params.items() if key not in _PREPARE_PARAMS}
        store = prepared_store(store, preparation)
    return _METHODS[name].build(store, **params)


def check_method_params(method: Any, params: Any) -> dict[str, Any]:
    """Validate a method name and its parameters without a store; return all of them, defaults filled in.

    Raises TypeError / ValueError naming the method, an unknown parameter, or a bad value.

    Examples
    --------
    >>> check_method_params("gnn", {"k1": 10})
    {'k1': 10, 'k2': 7, 'lambda_value': 0.3}
    """
    name = check_choice("method", method, RERANK_METHODS)
    if not isinstance(params, dict):
        raise TypeError(f"the {name} parameters must be a dict, got {type(params).__name__}")
    entry = _METHODS[name]
    unknown = sorted(set(params) - set(entry.params))
    if unknown:
        raise ValueError(f"unknown {name} parameter(s) {unknown}; it takes {list(entry.params)}")
    return entry.check(params)


#: The methods whose offline part a store can keep, computed at build time (``--precompute-rerank``).
PRECOMPUTED_METHODS: tuple[str, ...] = ("decoupled-diffusion",)


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
    prepare_offline_diffusion(store, **{key: params[key] for key in OFFLINE_PARAMS})
    return params
