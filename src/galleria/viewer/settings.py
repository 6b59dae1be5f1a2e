"""The settings of one side-by-side search, read from a request or a settings file and checked."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from galleria.expansion import EXPANSION
from galleria.rerank.registry import DEFAULT_COMPONENT, DEFAULT_METHOD, reranker_component
from galleria.retrieval import DEFAULT_POOL, RetrievalConfig

__all__ = [
    "DEFAULT_K",
    "MAX_RESULTS",
    "PARAM_PREFIX",
    "SearchSettings",
    "read_flag",
    "search_defaults",
    "sent_names",
    "setting_keys",
]

#: Largest ``k`` and ``pool`` a :class:`SearchSettings` accepts (a bound on one request's work).
MAX_RESULTS = 1000


#: Results shown, and candidates re-ranked, when a request does not say.
DEFAULT_K = 10


def _number(settings: Mapping[str, Any], key: str, default: Any, kind: type) -> Any:
    value = settings.get(key, default)
    if value is None or value == "":
        return default
    if isinstance(value, bool) or (kind is int and isinstance(value, float)):
        raise ValueError(f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    try:
        return kind(value)
    except (TypeError, ValueError, OverflowError):  # float(10**400) overflows
        raise ValueError(
            f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}"
        ) from None


def read_flag(settings: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = settings.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"1", "true", "on", "yes", "0", "false", "off", "no"}:
        return value.lower() in {"1", "true", "on", "yes"}
    if value == "":
        return default
    raise ValueError(f"{key} must be true or false, got {value!r}")


#: The page's and the API's short names (``Param.key``) of αQE's settings and of λ, by the
#: RetrievalConfig field or parameter they set: read from the declarations.
_FIELD_NAMES = {
    param.name: param.key
    for param in (*EXPANSION.params, DEFAULT_COMPONENT.param("lambda_value"))
    if param.key
}


#: The field or parameter each short name sets (``alpha`` → ``expansion_alpha``).
_SHORT_NAMES = {short: name for name, short in _FIELD_NAMES.items()}


#: Method parameters given flat under these names are αQE's old names instead: give them as
#: ``param.NAME`` (form, address) or in the ``params`` object (JSON).
_TAKEN = frozenset({"alpha", "neighbors", "k", "pool"})


#: The prefix of a method's parameter in a form or an address (``param.alpha=0.9``).
PARAM_PREFIX = "param."


def setting_keys() -> tuple[str, ...]:
    """Every name a request may give a setting by (the declared parameter names of every method)."""
    from galleria.rerank.registry import METHOD_PARAMS

    names = {name for params in METHOD_PARAMS.values() for name in params}
    fixed: tuple[str, ...] = ("k", "expand", "alpha", "neighbors", "expansion_alpha", "expansion_neighbors")
    fixed += ("rerank", "method", "rerank_method", "preset", "rerank_preset", "params", "lambda", "pool")
    flat = sorted(names - _TAKEN - set(fixed))
    return fixed + tuple(flat) + tuple(PARAM_PREFIX + name for name in sorted(names))


def _as_sent(message: str, lambda_name: str) -> str:
    """``message`` of RetrievalConfig's validation with its field names replaced by the names sent."""
    names = {**_FIELD_NAMES, "lambda_value": lambda_name}
    return re.sub(r"\b(expansion_alpha|expansion_neighbors|lambda_value)\b", lambda m: names[m[1]], message)


def _first(settings: Mapping[str, Any], *names: str) -> tuple[str, Any]:
    """The one of ``names`` given a value (not None nor empty) and its value; else (names[0], None).

    ValueError when two spellings of the one setting are given (``alpha`` and ``expansion_alpha``)."""
    given = [name for name in names if settings.get(name) not in (None, "")]
    if len(given) > 1:
        raise ValueError(f"{' and '.join(given)} are one setting; give it once")
    return (given[0], settings[given[0]]) if given else (names[0], None)


def sent_names(settings: Mapping[str, Any]) -> set[str]:
    """The settings a request gives, by their declared names whatever the spelling: ``k1``,
    ``param.k1`` and ``params: {"k1": ...}`` are ``k1``; ``lambda`` is ``lambda_value``; ``alpha`` and
    ``neighbors`` (flat) are αQE's ``expansion_alpha`` and ``expansion_neighbors``."""
    names: set[str] = set()
    for key, value in settings.items():
        if value in (None, ""):
            continue
        if key == "params" and isinstance(value, Mapping):
            names.update(str(name) for name in value)
        elif isinstance(key, str) and key.startswith(PARAM_PREFIX):
            names.add(key[len(PARAM_PREFIX) :])
        else:
            names.add(_SHORT_NAMES.get(key, key))
    return names


def _method_params(settings: Mapping[str, Any], method: str) -> tuple[dict[str, Any], str]:
    """The method's parameters a request gives (typed by their defaults), and the name λ was sent by."""
    from galleria.rerank.registry import METHOD_PARAMS

    declared = METHOD_PARAMS[method]
    nested = settings.get("params")
    if nested is not None and not isinstance(nested, Mapping):
        raise ValueError(f"params must be an object of {method} parameters, got {nested!r}")
    sent: dict[str, Any] = {}
    spelled: dict[str, str] = {}  # name → the spelling it was sent by
    for name, value in (nested or {}).items():
        if value not in (None, ""):
            sent[name], spelled[name] = value, f"params.{name}"
    lambda_name = "lambda" if "lambda" in settings or "lambda_value" not in settings else "lambda_value"
    for name in declared:
        flat = ("lambda", "lambda_value") if name == "lambda_value" else (() if name in _TAKEN else (name,))
        for given in (PARAM_PREFIX + name, *flat):
            if settings.get(given) not in (None, ""):
                if name in sent:  # one parameter, two spellings: which one was meant?
                    raise ValueError(f"{spelled[name]} and {given} are one parameter; give it once")
                sent[name], spelled[name] = settings[given], given
    unknown = sorted(set(sent) - set(declared))
    if unknown:
        raise ValueError(f"unknown {method} parameter(s) {unknown}; it takes {list(declared)}")
    component = reranker_component(method)
    typed: dict[str, Any] = {}
    for name, value in sent.items():
        # read as the declaration types it (text from a form or an address, JSON as sent) and
        # checked by it: a declared bool is a bool, a number keeps its range, whatever the spelling
        param = component.param(name)
        typed[name] = param.parse(value) if isinstance(value, str) else param.check(value)
    return typed, lambda_name


@dataclass(frozen=True)
class SearchSettings:
    """How many results, and whether and how to expand (αQE) and re-rank (any method, by name).

    Examples
    --------
    >>> SearchSettings.from_mapping({"k": "5", "rerank": "on", "k1": "10"}).config.rerank_params["k1"]
    10
    >>> SearchSettings.from_mapping({"k": 0})
    Traceback (most recent call last):
    ...
    ValueError: k must be between 1 and 1000, got 0
    """

    k: int = 10
    config: RetrievalConfig = field(default_factory=lambda: RetrievalConfig("search", pool=DEFAULT_POOL))
    #: The re-ranking parameters read from the gallery (the adaptive values of the method) when a
    #: ``store`` was given and the preset is adaptive; None otherwise.
    gallery_params: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # The one bound on a request's work, wherever the settings come from (a form, the JSON API,
        # a tuned settings file used for the first page): checked here, on every construction.
        if not isinstance(self.config, RetrievalConfig):
            raise TypeError(f"config must be a RetrievalConfig, got {type(self.config).__name__}")
        for name, value in (("k", self.k), ("pool", self.config.pool)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RESULTS:
                raise ValueError(f"{name} must be between 1 and {MAX_RESULTS}, got {value!r}")
        if self.config.rerank and self.config.pool < self.k:
            raise ValueError(f"pool must be at least k ({self.k}), got {self.config.pool}")

    @classmethod
    def from_mapping(
        cls,
        settings: Mapping[str, Any],
        defaults: RetrievalConfig | None = None,
        *,
        store: Any = None,
    ) -> SearchSettings:
        """Read the settings of a form, an address or a JSON request (see :func:`setting_keys`).

        ``k``, ``pool``; ``expand`` with ``expansion_alpha`` / ``expansion_neighbors`` (old names
        ``alpha``, ``neighbors``); ``rerank`` with ``method`` (``rerank_method``), ``preset``, and the
        method's parameters by their declared names — flat (``k1``, ``lambda_value`` or ``lambda``,
        ``query_k``...), as ``param.NAME`` or in a ``params`` object (needed for ``alpha`` and
        ``neighbors``, which flat are αQE's). Values may be text or JSON numbers and booleans;
        ValueError names the setting as it was sent and the value.

        ``defaults`` (a settings file written by ``galleria tune``) gives every absent setting, the
        switches and the method included. ``store`` (the served store) fills in every value still
        left out as :class:`~galleria.retrieval.Searcher` does on that store — the adaptive rules
        read from its gallery — so the settings hold the exact values a search uses (the address
        carries them); :attr:`gallery_params` then holds the method's values read from the gallery.
        """
        base = defaults if defaults is not None else RetrievalConfig("search", pool=DEFAULT_POOL)
        k = _number(settings, "k", DEFAULT_K, int)
        pool = _number(settings, "pool", base.pool, int)
        for name, value in (("k", k), ("pool", pool)):
            if not 1 <= value <= MAX_RESULTS:
                raise ValueError(f"{name} must be between 1 and {MAX_RESULTS}, got {value!r}")
        rerank = read_flag(settings, "rerank", base.rerank)
        if rerank and pool < k:
            raise ValueError(f"pool must be at least k ({k}), got {pool}")
        _, method = _first(settings, "method", "rerank_method")
        method = base.rerank_method if method is None else method
        _, preset = _first(settings, "preset", "rerank_preset")
        preset = base.rerank_preset if preset is None else preset
        alpha_name, alpha = _first(settings, "alpha", "expansion_alpha")
        neighbors_name, neighbors = _first(settings, "neighbors", "expansion_neighbors")
        lambda_name = "lambda" if "lambda" in settings or "lambda_value" not in settings else "lambda_value"
        try:
            from galleria.rerank.registry import check_method_params

            check_method_params(method, {})  # the method's name, checked
            params, lambda_name = _method_params(settings, method)
            if method == base.rerank_method:
                params = {**base.rerank_params, **params}
            config = RetrievalConfig(
                "search",
                query_expansion=read_flag(settings, "expand", base.query_expansion),
                expansion_alpha=_number({alpha_name: alpha}, alpha_name, base.expansion_alpha, float),
                expansion_neighbors=_number(
                    {neighbors_name: neighbors}, neighbors_name, base.expansion_neighbors, int
                ),
                rerank=rerank,
                pool=pool,
                rerank_method=method,
                rerank_params=params,
                rerank_preset=preset,
            )
        except (TypeError, ValueError) as error:
            raise ValueError(_as_sent(str(error), lambda_name)) from None
        gallery_params = None
        if store is not None:
            # the note "read from this gallery" when the defaults leave the method's values to it
            if method != base.rerank_method:
                base = replace(base, rerank_method=method, rerank_params={})
            config, gallery_params = _resolved(config, store, bool(base.open_params()))
        return cls(k=k, config=config, gallery_params=gallery_params)

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON (what the page's form fields hold)."""
        config = self.config
        params = config.rerank_params
        return {
            "k": self.k,
            "expand": config.query_expansion,
            "alpha": config.expansion_alpha,
            "neighbors": config.expansion_neighbors,
            "rerank": config.rerank,
            "k1": params.get("k1"),
            "k2": params.get("k2"),
            "lambda": params.get("lambda_value"),
            "pool": config.pool,
            "method": config.rerank_method,
            "params": dict(params),
        }

    def to_query(self) -> dict[str, str]:
        """The settings as URL parameters: both switches always, the exact values of the parts switched on.

        Read back with :meth:`from_mapping` (with the same ``defaults``), they give these settings
        again, so a page's address reproduces its search. Numbers are written as Python writes them
        (the shortest text that reads back as the same number: ``0.3``, never ``0.30000000000000004``).
        k-reciprocal's parameters keep their old names (``k1``, ``k2``, ``lambda``); another method
        is named (``method``) with its parameters as ``param.NAME``.

        Examples
        --------
        >>> SearchSettings.from_mapping({"k": "5", "rerank": "1", "lambda": "0.25"}).to_query()
        {'k': '5', 'expand': '0', 'rerank': '1', 'lambda': '0.25', 'pool': '200'}
        """
        config = self.config
        query = {"k": str(self.k), "expand": "1" if config.query_expansion else "0"}
        if config.query_expansion:
            if config.expansion_alpha is not None:
                query["alpha"] = repr(config.expansion_alpha)
            if config.expansion_neighbors is not None:
                query["neighbors"] = str(config.expansion_neighbors)
        query["rerank"] = "1" if config.rerank else "0"
        if config.rerank:
            if config.rerank_method != DEFAULT_METHOD:
                query["method"] = config.rerank_method
            for name, value in config.rerank_params.items():
                if config.rerank_method == DEFAULT_METHOD:
                    key = "lambda" if name == "lambda_value" else name
                else:
                    key = PARAM_PREFIX + name
                query[key] = _text(value)
            query["pool"] = str(config.pool)
        return query


def _text(value: Any) -> str:
    """A parameter's value as an address writes it: the shortest text that reads back as it."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, float) else str(value)


def _resolved(
    config: RetrievalConfig, store: Any, note: bool
) -> tuple[RetrievalConfig, dict[str, Any] | None]:
    """``config`` with every value filled in as the Searcher fills it in on ``store`` (both switches
    on for the lookup, so the form shows values), and (``note``) the method's adaptive values."""
    full = replace(config, rerank=True, query_expansion=True).resolve(store)
    resolved = replace(full, rerank=config.rerank, query_expansion=config.query_expansion)
    gallery = None
    if note and config.rerank_preset == "adaptive":
        from galleria.rerank.adaptive import default_rerank_params

        gallery = default_rerank_params(store, config.rerank_method)
    return resolved, gallery


def search_defaults(store: Any, defaults: RetrievalConfig | None = None) -> RetrievalConfig:
    """The settings a search of ``store`` starts from: ``defaults`` with every value left out read.

    Without ``defaults`` (no settings file): plain search, re-ranking off, every value the adaptive
    rules read from ``store``'s gallery, as :class:`~galleria.retrieval.Searcher` reads them. With
    ``store`` None nothing is read.
    """
    return SearchSettings.from_mapping({}, defaults, store=store).config
