"""Components that declare themselves: a re-ranker, an index or an embedder states its parameters once.

A :class:`Param` is one parameter: its name, type, default, range (or choices), the paper's value,
a one-line help, the space the tuner searches and whether it counts toward the cost of a request.
A :class:`Component` is one re-ranker, index or embedder: its kind, name, parameters, constructor,
adaptive rule (re-rankers), and the bound on the work of one request. Everything else is derived
from these: the registries, the command line's choices and ``--help``, the tuner's search space and
first trials, report labels, ``galleria methods`` and the parameter tables in ``docs/``.

:meth:`Component.check` is the one validator of a component's parameters: the command line, the
HTTP API, settings files and store files all pass their values through it, so a bad value gives
the same message wherever it comes from. A declaration is itself checked when it is made (a
parameter without a type or range, a default outside its range, a duplicate name, another plugin
API version): built-in ones fail at import, a plugin's is refused at discovery with one warning.

This module is on the ground floor: it imports nothing from galleria but :mod:`galleria._validation`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from galleria._params import DeclarationError, Param, Space, format_value
from galleria._validation import is_int

__all__ = [
    "KINDS",
    "MAX_WORK",
    "PLUGIN_API_VERSION",
    "STAGE",
    "Component",
    "DeclarationError",
    "Param",
    "Space",
    "format_value",
]

#: The version of the declaration API a component states (``api_version``); plugins built for
#: another version are refused at discovery.
PLUGIN_API_VERSION = 1
#: The kinds of component, and the entry-point group of each (``galleria.<group>``).
KINDS: dict[str, str] = {"reranker": "rerankers", "index": "indexes", "embedder": "embedders"}
#: A stage of the retrieval path declared as a component is (αQE): not a plugin kind.
STAGE = "stage"
#: The default bound on one request's work: the product of the pool (when there is one) and every
#: parameter declared with ``cost=True`` (neighbourhood sizes, iterations). 2·10⁹ steps is seconds
#: of numpy, not minutes; a component may declare a lower bound.
MAX_WORK = 2_000_000_000


@dataclass(frozen=True)
class Component:
    """One declared re-ranker, index or embedder.

    Parameters
    ----------
    kind : {"reranker", "index", "embedder"}
    name : str
        The name it is chosen by (``--rerank-method NAME``, ``--index NAME``...).
    params : sequence of Param
        Its parameters, in the order they are shown.
    build : callable
        Its constructor: ``build(store, **params)`` for a re-ranker, ``build(space, **params)`` for
        an index, ``build(**params)`` for an embedder.
    summary : str
        One line: what it does (``galleria methods``, the docs tables).
    label : str
        How reports name it (default: ``name``).
    adaptive : callable or None
        Re-rankers: ``adaptive(stats)`` maps a gallery's reciprocal-neighbour statistics
        (:class:`galleria.rerank.adaptive.GalleryStatistics`) to parameters. None: the defaults.
    constraints : callable or None
        ``constraints(params)`` checks what no single parameter can (``k2 <= k1``) and may return
        the parameters amended (None: unchanged); raises ValueError naming the parameters.
    max_work : int
        The bound on the product of the pool (to the power ``pool_power``: 2 for a method that
        compares every pair in the pool) and every ``cost`` parameter, per request.
    with_aqe : bool
        Re-rankers: whether it may follow αQE (the tuner tries both).
    prepared : bool
        Re-rankers: whether it takes the gallery-preparation parameters (power normalisation,
        centring, DBA before it) and re-ranks on the prepared gallery.
    pools : tuple of int
        Re-rankers: the pools the tuner searches.
    order : int
        Where it is listed (built-ins first; a plugin keeps the default and follows, by name).
    api_version : int
        The declaration API it was written for (:data:`PLUGIN_API_VERSION`).
    extra : mapping
        Kind-specific hooks (an index's ``from_bytes``, an embedder's ``from_config``...).
    origin : str
        Empty for a built-in; for a plugin, set at discovery: its package and entry point (what
        warnings and :class:`~galleria._plugins.PluginError` name).
    """

    kind: str
    name: str
    params: Sequence[Param]
    build: Callable[..., Any]
    summary: str = ""
    label: str = ""
    adaptive: Callable[[Any], dict[str, Any]] | None = None
    constraints: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
    max_work: int = MAX_WORK
    pool_power: int = 1
    with_aqe: bool = True
    prepared: bool = False
    pools: tuple[int, ...] = (100, 200, 400)
    order: int = 1000
    api_version: int = PLUGIN_API_VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)
    origin: str = ""

    def __post_init__(self) -> None:
        if self.api_version != PLUGIN_API_VERSION or isinstance(self.api_version, bool):
            raise DeclarationError(
                f"component {self.name!r} declares plugin API version {self.api_version!r}; "
                f"this galleria reads version {PLUGIN_API_VERSION}"
            )
        if self.kind not in KINDS and self.kind != STAGE:
            raise DeclarationError(
                f"component {self.name!r}: kind must be one of {list(KINDS)}, got {self.kind!r}"
            )
        if not isinstance(self.name, str) or not self.name or not self.name.replace("-", "_").isidentifier():
            raise DeclarationError(
                f"a component's name must be a word (letters, digits, - or _), got {self.name!r}"
            )
        if not callable(self.build):
            raise DeclarationError(f"component {self.name!r}: build must be callable")
        object.__setattr__(self, "params", tuple(self.params))
        seen: set[str] = set()
        for param in self.params:
            if not isinstance(param, Param):
                raise DeclarationError(f"component {self.name!r}: {param!r} is not a Param")
            for spelled in (param.name, *param.aliases):
                if spelled in seen:
                    raise DeclarationError(f"component {self.name!r} declares parameter {spelled!r} twice")
                seen.add(spelled)
        for param in self.params:
            if param.at_most is not None and param.at_most not in seen:
                raise DeclarationError(
                    f"component {self.name!r}: {param.name} is bounded by an unknown {param.at_most!r}"
                )
        if not is_int(self.max_work) or self.max_work < 1:
            raise DeclarationError(f"component {self.name!r}: max_work must be a positive int")
        if self.pool_power not in (1, 2, 3):
            raise DeclarationError(f"component {self.name!r}: pool_power must be 1, 2 or 3")
        try:
            self.check({})
        except (TypeError, ValueError) as error:
            raise DeclarationError(f"component {self.name!r}: its defaults are invalid: {error}") from None

    @property
    def names(self) -> tuple[str, ...]:
        """Its parameter names, in order."""
        return tuple(param.name for param in self.params)

    @property
    def title(self) -> str:
        """How reports name it."""
        return self.label or self.name

    def param(self, name: str) -> Param:
        """The declared parameter ``name`` (KeyError when it has none)."""
        for param in self.params:
            if param.name == name:
                return param
        raise KeyError(name)

    def defaults(self) -> dict[str, Any]:
        """Every parameter at its default."""
        return {param.name: param.default for param in self.params}

    def paper_params(self) -> dict[str, Any]:
        """The paper preset: the parameters with a published value."""
        return {param.name: param.paper for param in self.params if param.has_paper}

    def resolve(
        self, statistics: Callable[[], Any], preset: str = "adaptive", **context: Any
    ) -> dict[str, Any]:
        """The values its preset gives: ``"adaptive"``, its rule applied to a gallery's statistics
        (``statistics()``, called only then; ``context`` goes to the rule, e.g. αQE's ``reranked``);
        ``"paper"`` (or a component without a rule), its paper preset, else its defaults.

        The one place adaptive values are resolved: every re-ranker without parameters, αQE in the
        store's search, :meth:`galleria.retrieval.RetrievalConfig.resolve`, the page and the tuner
        reach it.

        Examples
        --------
        >>> component = Component("reranker", "demo", (Param("k", int, 3, 1, 9, paper=5),), build=dict,
        ...                       adaptive=lambda stats: {"k": stats})
        >>> component.resolve(lambda: 7), component.resolve(lambda: 7, "paper")
        ({'k': 7}, {'k': 5})
        """
        if preset == "paper" or self.adaptive is None:
            return dict(self.paper_params() or self.defaults())
        return dict(self.adaptive(statistics(), **context))

    def check(self, params: Any, *, pool: int | None = None, where: str | None = None) -> dict[str, Any]:
        """Validate ``params`` (a dict); return them complete, defaults filled in, aliases renamed.

        The one validator of this component's parameters: every source of values calls it.
        ``pool`` (the candidates re-ranked per request) enters the work bound when given.
        ``where`` (the entry point the values came from: ``"KReciprocalReranker"``, ``"--k1"``, a
        settings file) prefixes the message, which is otherwise the same from every entry point.

        Raises
        ------
        TypeError
            ``params`` is not a dict, or a value of the wrong type.
        ValueError
            An unknown parameter, a value outside its range, a broken constraint, or work over
            :attr:`max_work`.
        """
        if where is None:
            return self._check(params, pool)
        try:
            return self._check(params, pool)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{where}: {error}") from None

    def check_given(self, params: Any, *, where: str | None = None) -> dict[str, Any]:
        """Only the parameters ``params`` gives, checked as :meth:`check` checks them (the others at
        their defaults for the constraints between them), aliases renamed.

        A constructor whose omitted values are chosen later (from the gallery) checks with this.

        Examples
        --------
        >>> component = Component("reranker", "demo", (Param("k", int, 3, 1, 9),), build=dict)
        >>> component.check_given({}), component.check_given({"k": 4})
        ({}, {'k': 4})
        """
        checked = self.check(params, where=where)
        spelled = {old: param.name for param in self.params for old in param.aliases}
        names = {spelled.get(key, key) for key in params}
        return {key: checked[key] for key in self.names if key in names and key in checked}

    def _check(self, params: Any, pool: int | None) -> dict[str, Any]:
        if not isinstance(params, dict):
            raise TypeError(f"the {self.name} parameters must be a dict, got {type(params).__name__}")
        given = dict(params)
        for param in self.params:
            for old in param.aliases:
                if old in given:
                    if param.name in given:
                        raise ValueError(f"{self.name}: give {param.name} or its old name {old}, not both")
                    given[param.name] = given.pop(old)
        unknown = sorted(set(given) - set(self.names))
        if unknown:
            raise ValueError(f"unknown {self.name} parameter(s) {unknown}; it takes {list(self.names)}")
        result = {p.name: p.check(given[p.name]) if p.name in given else p.default for p in self.params}
        for p in self.params:
            other = p.at_most
            if other is None or result[other] is None or result[p.name] is None:
                continue
            if result[p.name] > result[other]:
                raise ValueError(
                    f"{p.name} must not exceed {other}, got {p.name}={result[p.name]!r} > "
                    f"{other}={result[other]!r}"
                )
        if self.constraints is not None:
            amended = self.constraints(result)
            if amended is not None:
                result = amended
        self.check_work(result, pool)
        return {
            key: value
            for key, value in result.items()
            if not (key in self.names and self.param(key).omit_default and value == self.param(key).default)
        }

    def check_work(self, params: Mapping[str, Any], pool: int | None = None) -> int:
        """The work of one request with ``params`` (and ``pool``); ValueError above :attr:`max_work`."""
        work = 1 if pool is None else int(pool) ** self.pool_power
        power = "" if self.pool_power == 1 else "²" if self.pool_power == 2 else f"^{self.pool_power}"
        factors = [f"pool {pool}{power}"] if pool is not None else []
        for param in self.params:
            if param.cost and params.get(param.name) is not None:
                work *= max(1, int(params[param.name]))
                factors.append(f"{param.name} {params[param.name]}")
        if work > self.max_work:
            raise ValueError(
                f"{self.name}: {' × '.join(factors)} is {work:,} steps per query, over the bound of "
                f"{self.max_work:,}; lower one of them"
            )
        return work

    def describe(self, params: Mapping[str, Any]) -> str:
        """``params`` as a report shows them, in declared order (``k1=20, k2=6, λ=0.3``)."""
        shown = {"lambda_value": "λ"}
        order = [name for name in self.names if name in params] + [k for k in params if k not in self.names]
        return ", ".join(f"{shown.get(key, key)}={format_value(params[key])}" for key in order)
