"""How to answer a query: a re-ranking method by name with its parameters, αQE, a pool and its tail.

:class:`RetrievalConfig` is the one description of a retrieval recipe that every caller hands to
:class:`~galleria.retrieval.Searcher`: the Python API, ``galleria search`` / ``evaluate`` / ``demo``,
the page and ``/api/search``, and the tuner. A value left as None (αQE's exponent and match count)
or a re-ranking parameter left out is filled in when the configuration meets a gallery
(:meth:`RetrievalConfig.resolve`): by the method's adaptive rule (the default preset) or by the
paper's values (``rerank_preset="paper"``). Settings (a ``galleria tune`` file) become a configuration
in :meth:`RetrievalConfig.from_settings` only, and :meth:`settings` writes them."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from galleria._params import Param, format_value
from galleria._validation import check_bool, check_choice, check_positive_int
from galleria.expansion import EXPANSION
from galleria.rerank.base import PRESETS
from galleria.rerank.registry import (
    DEFAULT_METHOD,
    METHOD_PARAMS,
    check_method_params,
    label,
    reranker_component,
)

__all__ = ["DEFAULT_POOL", "POOL", "PRESETS", "RetrievalConfig", "standard_configs"]

#: The pool stage: candidates re-ranked per query, declared once (its default is every command's
#: ``--pool`` and ``galleria serve``'s: the pool of the README's benchmark table). Each method
#: declares the pools the tuner searches (``Component.pools``).
POOL = Param(
    "pool",
    int,
    200,
    1,
    2**63 - 1,
    flag="--pool",
    help="candidates re-ranked per query",
)
#: Candidates re-ranked per query when nothing says otherwise (:data:`POOL`'s default).
DEFAULT_POOL: int = POOL.default
#: The paper's αQE (Radenović et al.): exponent 3, 50 matches (``rerank_preset="paper"``), as declared.
PAPER_EXPANSION_ALPHA, PAPER_EXPANSION_NEIGHBORS = (
    EXPANSION.param("expansion_alpha").paper,
    EXPANSION.param("expansion_neighbors").paper,
)
#: The old k-reciprocal fields, now parameters of the method (``rerank_params``).
_LEGACY = ("k1", "k2", "lambda_value")
#: The keys of a settings mapping that are not a method's parameter.
_COMMON = {
    "query_expansion",
    "expansion_alpha",
    "expansion_neighbors",
    "rerank",
    "rerank_method",
    "rerank_preset",
    "pool",
}


@dataclass(frozen=True, init=False)
class RetrievalConfig:
    """How to answer one query: search, optionally with αQE, optionally re-ranked by a named method.

    Parameters
    ----------
    name : str
        Short identifier used in ``metrics.json`` (``"plain"``, ``"aqe"``, ``"aqe+rerank"``...).
    query_expansion : bool
        Search with alpha query expansion.
    expansion_alpha, expansion_neighbors : float or None, int or None
        αQE's exponent and the number of matches it averages; None (the default) takes the preset's
        value: the adaptive rule's (α 3, n 2 on a gallery with reciprocal neighbours, n 1 without)
        or the paper's (α 3, n 50).
    rerank : bool
        Re-rank the first ``pool`` candidates (of the expanded query when ``query_expansion`` is on)
        with the method ``rerank_method``.
    pool : int
        How many candidates are re-ranked.
    rerank_method : str
        One of :data:`galleria.rerank.RERANK_METHODS` (default ``"k-reciprocal"``).
    rerank_params : dict
        The method's parameters by their declared names; one left out takes the preset's value.
    rerank_preset : {"adaptive", "paper"}
        Where the values left out come from: ``"adaptive"`` (the default) reads them from the
        gallery the configuration searches (:meth:`resolve`); ``"paper"`` takes the published ones.
    tail : bool
        Whether the candidates beyond the pool follow the re-ranked ones in search order (default),
        so a pool smaller than the list's length still gives a full list.
    k1, k2, lambda_value
        Deprecated keywords: k-reciprocal's (or the GNN's) parameters, now ``rerank_params``.

    Examples
    --------
    >>> RetrievalConfig("aqe", query_expansion=True).settings()
    {'query_expansion': True, 'rerank': False, 'rerank_preset': 'adaptive'}
    >>> RetrievalConfig("r", rerank=True, rerank_params={"k1": 9}, rerank_preset="paper").rerank_params
    {'k1': 9, 'k2': 6, 'lambda_value': 0.3}
    """

    name: str
    query_expansion: bool
    expansion_alpha: float | None
    expansion_neighbors: int | None
    rerank: bool
    pool: int
    rerank_method: str
    rerank_params: dict[str, Any] = field(hash=False)
    rerank_preset: str
    tail: bool

    def __init__(
        self,
        name: str,
        query_expansion: bool = False,
        expansion_alpha: float | None = None,
        expansion_neighbors: int | None = None,
        rerank: bool = False,
        *,
        pool: int = DEFAULT_POOL,
        rerank_method: str = DEFAULT_METHOD,
        rerank_params: Mapping[str, Any] | None = None,
        rerank_preset: str = "adaptive",
        tail: bool = True,
        **legacy: Any,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        unknown = sorted(set(legacy) - set(_LEGACY))
        if unknown:
            raise TypeError(f"RetrievalConfig got unexpected keyword argument(s) {unknown}")
        method = check_choice("rerank_method", rerank_method, tuple(METHOD_PARAMS))
        if rerank_params is not None and not isinstance(rerank_params, Mapping):
            raise TypeError(f"rerank_params must be a dict, got {type(rerank_params).__name__}")
        params = dict(rerank_params or {})
        given = {key: value for key, value in legacy.items() if value is not None}
        if given:
            warnings.warn(
                f"RetrievalConfig's {', '.join(sorted(given))} are deprecated; give them in "
                f"rerank_params={{...}} (galleria 0.2.0)",
                DeprecationWarning,
                stacklevel=2,
            )
            taken = set(METHOD_PARAMS[method])
            params.update({key: value for key, value in given.items() if key in taken and key not in params})
        preset = check_choice("rerank_preset", rerank_preset, PRESETS)
        # every value checked, defaults filled in; the work of one request is bounded too
        checked = check_method_params(
            method, params, pool=check_positive_int("pool", pool) if rerank else None
        )
        # adaptive: the values the method's adaptive rule gives are left out until a gallery is met
        rule = _rule_keys(method)
        kept = (
            checked
            if preset == "paper"
            else {k: v for k, v in checked.items() if k in params or k not in rule}
        )
        if preset == "paper":
            if expansion_alpha is None:
                expansion_alpha = PAPER_EXPANSION_ALPHA
            if expansion_neighbors is None:
                expansion_neighbors = PAPER_EXPANSION_NEIGHBORS
        values = {
            "name": name,
            "query_expansion": check_bool("query_expansion", query_expansion),
            **EXPANSION.check(
                {"expansion_alpha": expansion_alpha, "expansion_neighbors": expansion_neighbors}
            ),
            "rerank": check_bool("rerank", rerank),
            "pool": check_positive_int("pool", pool),
            "rerank_method": method,
            "rerank_params": kept,
            "rerank_preset": preset,
            "tail": check_bool("tail", tail),
        }
        for key, value in values.items():
            object.__setattr__(self, key, value)

    # ------------------------------------------------------------------ deprecated k-reciprocal fields

    @property
    def k1(self) -> Any:
        """Deprecated: ``rerank_params["k1"]`` (None while it is still to be read from a gallery)."""
        return self.rerank_params.get("k1")

    @property
    def k2(self) -> Any:
        """Deprecated: ``rerank_params["k2"]``."""
        return self.rerank_params.get("k2")

    @property
    def lambda_value(self) -> Any:
        """Deprecated: ``rerank_params["lambda_value"]``."""
        return self.rerank_params.get("lambda_value")

    # ------------------------------------------------------------------ resolution

    @property
    def adaptive(self) -> bool:
        """Whether a value this configuration uses is still to be read from a gallery (:meth:`resolve`)."""
        expansion = self.query_expansion and None in (self.expansion_alpha, self.expansion_neighbors)
        return self.rerank_preset == "adaptive" and (expansion or (self.rerank and bool(self.open_params())))

    def open_params(self) -> set[str]:
        """The method's parameters still to be read from a gallery (empty once resolved or "paper")."""
        if self.rerank_preset != "adaptive":
            return set()
        return _rule_keys(self.rerank_method) - set(self.rerank_params)

    def resolve(self, store: Any) -> RetrievalConfig:
        """This configuration with every value left out read from ``store``'s gallery (adaptive preset).

        The result holds every value it uses (its preset is ``"paper"``: nothing is left to read).
        A configuration with nothing left out is returned as it is. The values depend on the gallery:
        the page (the whole store) and ``evaluate`` (its split's gallery) may differ.
        """
        if not self.adaptive:
            return self
        from galleria.expansion import fill_expansion
        from galleria.rerank.base import resolved_params

        alpha, neighbors = self.expansion_alpha, self.expansion_neighbors
        if self.query_expansion and None in (alpha, neighbors):
            rule = resolved_params(EXPANSION, store, reranked=self.rerank)
            alpha, neighbors = fill_expansion(rule, alpha, neighbors)
        params = dict(self.rerank_params)
        if self.rerank:
            params = {**resolved_params(reranker_component(self.rerank_method), store), **params}
        return replace(
            self,
            expansion_alpha=alpha,
            expansion_neighbors=neighbors,
            rerank_params=params,
            rerank_preset="paper",
        )

    def reranker_params(self) -> dict[str, Any]:
        """The keyword arguments of :func:`galleria.rerank.make_reranker` (after :meth:`resolve`)."""
        return dict(self.rerank_params)

    # ------------------------------------------------------------------ settings

    def settings(self) -> dict[str, Any]:
        """The JSON-able settings of this configuration (αQE and re-ranking keys only when they are on).

        A value still to be read from a gallery is left out, and ``"rerank_preset": "adaptive"`` says
        so; :meth:`from_settings` reads the result back as this configuration.
        """
        result: dict[str, Any] = {"query_expansion": self.query_expansion}
        if self.query_expansion:
            if self.expansion_alpha is not None:
                result["expansion_alpha"] = self.expansion_alpha
            if self.expansion_neighbors is not None:
                result["expansion_neighbors"] = self.expansion_neighbors
        result["rerank"] = self.rerank
        if self.rerank and self.rerank_method != DEFAULT_METHOD:
            result["rerank_method"] = self.rerank_method
        if self.adaptive:
            result["rerank_preset"] = "adaptive"
        if self.rerank:
            result.update(self.rerank_params, pool=self.pool)
        return result

    @classmethod
    def from_settings(cls, settings: Any, name: str = "tuned", where: str = "settings") -> RetrievalConfig:
        """The configuration of a ``settings`` mapping (the keys of :meth:`settings`).

        The one place a settings file (``galleria tune``), a store's or a caller's settings become a
        configuration. A mapping without ``rerank_preset`` means the paper's values for whatever it
        leaves out, as it always has, so an older file keeps its meaning.

        Raises
        ------
        TypeError, ValueError
            A non-mapping, an unknown key, a key of another method, or a bad value (named, prefixed
            with ``where``).

        Examples
        --------
        >>> RetrievalConfig.from_settings({"rerank": True, "rerank_method": "gnn", "k1": 9}).title
        'GNN (k1=9, k2=7, λ=0.3, pool=200)'
        """
        if not isinstance(settings, Mapping):
            raise TypeError(f"{where} must be a JSON object, got {type(settings).__name__}")
        method = settings.get("rerank_method", DEFAULT_METHOD)
        if not isinstance(method, str) or method not in METHOD_PARAMS:
            raise ValueError(f"{where}: rerank_method must be one of {tuple(METHOD_PARAMS)}, got {method!r}")
        unknown = sorted(map(str, set(settings) - _COMMON - set(METHOD_PARAMS[method])))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown} for rerank_method {method!r}")
        for flag in ("query_expansion", "rerank"):
            if flag in settings and not isinstance(settings[flag], bool):
                raise TypeError(f"{where}: {flag} must be true or false, got {settings[flag]!r}")
        options = {key: settings[key] for key in _COMMON - {"rerank_method"} if key in settings}
        options.setdefault("rerank_preset", "paper")
        params = {key: settings[key] for key in METHOD_PARAMS[method] if key in settings}
        try:
            return cls(name, rerank_method=method, rerank_params=params, **options)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{where}: {error}") from error

    @property
    def title(self) -> str:
        """A human-readable name with the settings, for tables and legends."""
        parts: list[str] = []
        if self.query_expansion:
            alpha, neighbors = self.expansion_alpha, self.expansion_neighbors
            if alpha is None and neighbors is None:
                parts.append("αQE (adaptive)")
            else:
                shown_alpha = "adaptive" if alpha is None else format_value(alpha)
                shown_n = "adaptive" if neighbors is None else str(neighbors)
                parts.append(f"αQE (α={shown_alpha}, n={shown_n})")
        if self.rerank:  # the method's declared label and values (galleria.rerank.registry.label)
            described = label(self.rerank_method, self.rerank_params)
            title = reranker_component(self.rerank_method).title
            values = [described[len(title) + 2 : -1]] if described != title else []
            if self.open_params():
                values.insert(0, "adaptive")
            parts.append(f"{title} ({', '.join([*values, f'pool={self.pool}'])})")
        return " + ".join(parts) if parts else "plain retrieval"


def _rule_keys(method: str) -> set[str]:
    """The parameters of ``method`` its adaptive rule (or the paper preset) sets."""
    from galleria.rerank.adaptive import PAPER_PARAMS

    return set(PAPER_PARAMS.get(method, METHOD_PARAMS.get(method, ())))


def standard_configs(
    *,
    expand: bool = True,
    rerank: bool = True,
    expansion_alpha: float | None = None,
    expansion_neighbors: int | None = None,
    pool: int = DEFAULT_POOL,
    rerank_method: str = DEFAULT_METHOD,
    rerank_params: Mapping[str, Any] | None = None,
    rerank_preset: str = "adaptive",
    **legacy: Any,
) -> list[RetrievalConfig]:
    """The configurations of the benchmark table: plain, then αQE, then re-ranking.

    Plain retrieval is always first. ``expand`` adds ``"aqe"``; ``rerank`` adds the re-ranked
    configuration, on the expanded query's pool (``"aqe+rerank"``) when ``expand`` is on and on
    the plain query's pool (``"rerank"``) otherwise. Values left out follow ``rerank_preset``:
    the gallery's adaptive rules (the default) or the paper's. ``k1``, ``k2``, ``lambda_value`` are
    deprecated keywords for ``rerank_params``.

    Examples
    --------
    >>> [config.name for config in standard_configs()]
    ['plain', 'aqe', 'aqe+rerank']
    >>> [config.name for config in standard_configs(expand=False)]
    ['plain', 'rerank']
    """
    common: dict[str, Any] = {
        "expansion_alpha": expansion_alpha,
        "expansion_neighbors": expansion_neighbors,
        "rerank_preset": rerank_preset,
    }
    configs = [RetrievalConfig("plain", **common)]
    if expand:
        configs.append(RetrievalConfig("aqe", query_expansion=True, **common))
    if rerank:
        params = dict(rerank_params or {})
        given = {key: value for key, value in legacy.items() if value is not None}
        if set(legacy) - set(_LEGACY):
            raise TypeError(
                f"standard_configs got unexpected keyword(s) {sorted(set(legacy) - set(_LEGACY))}"
            )
        if given:
            warnings.warn(
                "standard_configs' k1, k2, lambda_value are deprecated; give rerank_params={...}",
                DeprecationWarning,
                stacklevel=2,
            )
            taken = set(METHOD_PARAMS[rerank_method])
            params.update({key: value for key, value in given.items() if key in taken and key not in params})
        configs.append(
            RetrievalConfig(
                "aqe+rerank" if expand else "rerank",
                query_expansion=expand,
                rerank=True,
                pool=pool,
                rerank_method=rerank_method,
                rerank_params=params,
                **common,
            )
        )
    return configs
