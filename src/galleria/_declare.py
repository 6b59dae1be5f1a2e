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

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from galleria._validation import is_int

__all__ = [
    "KINDS",
    "MAX_WORK",
    "PLUGIN_API_VERSION",
    "Component",
    "DeclarationError",
    "Param",
    "Space",
    "format_value",
    "markdown_table",
]

#: The version of the declaration API a component states (``api_version``); plugins built for
#: another version are refused at discovery.
PLUGIN_API_VERSION = 1
#: The kinds of component, and the entry-point group of each (``galleria.<group>``).
KINDS: dict[str, str] = {"reranker": "rerankers", "index": "indexes", "embedder": "embedders"}
#: The default bound on one request's work: the product of the pool (when there is one) and every
#: parameter declared with ``cost=True`` (neighbourhood sizes, iterations). 2·10⁹ steps is seconds
#: of numpy, not minutes; a component may declare a lower bound.
MAX_WORK = 2_000_000_000


class DeclarationError(ValueError):
    """A malformed declaration: a parameter without a type or range, a default outside it, a
    duplicate name, another plugin API version."""


_TYPES: tuple[type, ...] = (int, float, bool, str)
_MISSING: Any = object()


@dataclass(frozen=True)
class Space:
    """The values the tuner searches for one parameter.

    ``kind`` is ``"int"`` or ``"float"`` (between ``low`` and ``high``, on a log scale when ``log``)
    or ``"categorical"`` (one of ``choices``).
    """

    kind: str
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("int", "float", "categorical"):
            raise DeclarationError(
                f"a tuner space's kind must be int, float or categorical, got {self.kind!r}"
            )
        if self.kind == "categorical" and not self.choices:
            raise DeclarationError("a categorical tuner space needs choices")
        if self.kind != "categorical" and not self.low <= self.high:
            raise DeclarationError(f"a tuner space needs low <= high, got {self.low!r} > {self.high!r}")

    def suggest(self, trial: Any, key: str) -> Any:
        """Optuna's proposal for this space under ``key``."""
        if self.kind == "categorical":
            return trial.suggest_categorical(key, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(key, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(key, float(self.low), float(self.high), log=self.log)


@dataclass(frozen=True)
class Param:
    """One declared parameter of a component.

    Parameters
    ----------
    name : str
        Its keyword (a Python identifier; public names spell "neighbor").
    type : {int, float, bool, str}
        Its type; ints are accepted where a float belongs, bools never where a number does.
    default : Any
        The value used when it is not given (within the range).
    low, high : float or None
        The range of a number (both required for int and float parameters); ``low_open`` /
        ``high_open`` exclude the end.
    choices : tuple
        The values a ``str`` parameter may take (required for str parameters).
    paper : Any
        The published value (``--rerank-preset paper``); left out of the paper preset when not given.
    help : str
        One line for ``--help``, ``galleria methods`` and the docs tables.
    space : Space or None
        What the tuner searches (None: the parameter keeps its default in tuning).
    cost : bool
        Whether it multiplies the work of a request (a neighbourhood size, an iteration count).
    aliases : tuple of str
        Old names still accepted (renamed to ``name`` when checked).
    omit_default : bool
        Left out of the checked parameters at its default (a no-op preparation step).
    at_most : str or None
        Another parameter this one may not exceed (k-reciprocal's ``k2 <= k1``).
    optional : bool
        Whether None is accepted (a value the component chooses itself, e.g. from the data).
        A ``str`` parameter with ``optional`` and no choices takes any short text (a model name).
    """

    name: str
    type: type
    default: Any
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()
    paper: Any = _MISSING
    help: str = ""
    space: Space | None = None
    cost: bool = False
    low_open: bool = False
    high_open: bool = False
    aliases: tuple[str, ...] = ()
    omit_default: bool = False
    at_most: str | None = None
    optional: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise DeclarationError(f"parameter {self.name!r}: its name must be an identifier")
        if self.type not in _TYPES:
            raise DeclarationError(
                f"parameter {self.name!r} has no type (int, float, bool or str), got {self.type!r}"
            )
        if self.type in (int, float) and (self.low is None or self.high is None):
            raise DeclarationError(f"parameter {self.name!r} has no range: give low and high")
        if self.type is str and not self.choices and not self.optional:
            raise DeclarationError(f"parameter {self.name!r} has no choices")
        try:
            self.check(self.default)
        except (TypeError, ValueError) as error:
            raise DeclarationError(f"parameter {self.name!r}: its default is invalid: {error}") from None
        if self.has_paper:
            try:
                self.check(self.paper)
            except (TypeError, ValueError) as error:
                raise DeclarationError(
                    f"parameter {self.name!r}: its paper value is invalid: {error}"
                ) from None

    @property
    def has_paper(self) -> bool:
        """Whether the paper preset sets this parameter."""
        return self.paper is not _MISSING

    def range_text(self) -> str:
        """The accepted values, as the messages and tables show them (``[1, 1000]``, ``gallery | pool``)."""
        if self.type is bool:
            return "true | false"
        if self.type is str:
            return " | ".join(map(str, self.choices)) if self.choices else "text"
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        return f"{left}{format_value(self.low)}, {format_value(self.high)}{right}"

    def check(self, value: Any) -> Any:
        """``value`` converted to the declared type, else TypeError / ValueError naming the parameter."""
        name = self.name
        if value is None and self.optional:
            return None
        if self.type is bool:
            if type(value).__name__ not in ("bool", "bool_"):
                raise TypeError(f"{name} must be a bool, got {value!r} ({type(value).__name__})")
            return bool(value)
        if self.type is str:
            if not self.choices:  # free text (optional): a short, non-empty str
                if not isinstance(value, str) or not value or len(value) > 1000:
                    raise ValueError(
                        f"{name} must be a non-empty text of at most 1000 characters, got {value!r}"
                    )
                return value
            if not isinstance(value, str) or value not in self.choices:
                raise ValueError(f"{name} must be one of {self.range_text()}, got {value!r}")
            return value
        if self.type is int:
            if not is_int(value):
                raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
            number: Any = int(value)
        else:
            if isinstance(value, bool) or (not isinstance(value, (int, float)) and not _is_real(value)):
                raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
            number = float(value)
            if not math.isfinite(number):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        assert self.low is not None and self.high is not None
        below = number < self.low or (self.low_open and number == self.low)
        above = number > self.high or (self.high_open and number == self.high)
        if below or above:
            raise ValueError(f"{name} must lie in {self.range_text()}, got {value!r}")
        return number

    def parse(self, text: str) -> Any:
        """``text`` (from a command line or a query string) read as the declared type, then checked.

        Ints in base 10, floats as Python reads them, bools as true/false/1/0/yes/no, str as given;
        ``none`` for an ``optional`` parameter. Raises ValueError naming the parameter.

        Examples
        --------
        >>> Param("k", int, 3, 1, 10).parse("7"), Param("on", bool, False).parse("yes")
        (7, True)
        """
        raw = str(text).strip()
        if self.optional and raw.lower() == "none":
            return None
        if self.type is bool:
            lowered = raw.lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"{self.name} must be true or false, got {_short(raw)!r}")
            return lowered in ("true", "1", "yes")
        if self.type is int:
            try:
                value: Any = int(raw, 10)
            except ValueError:
                raise ValueError(f"{self.name} must be an integer, got {_short(raw)!r}") from None
        elif self.type is float:
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{self.name} must be a number, got {_short(raw)!r}") from None
        else:
            value = raw
        return self.check(value)


def _short(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:18]}...{text[-18:]}"


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def format_value(value: Any) -> str:
    """A value as tables and labels show it: short (``0.3``, ``1``), every digit when short would round.

    Examples
    --------
    >>> format_value(1.0), format_value(0.3), format_value(0.123456789), format_value(True)
    ('1', '0.3', '0.123456789', 'true')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, (int, float)):
        return str(value)
    short = format(value, "g")
    return short if float(short) == value else repr(value)


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

    def __post_init__(self) -> None:
        if self.api_version != PLUGIN_API_VERSION or isinstance(self.api_version, bool):
            raise DeclarationError(
                f"component {self.name!r} declares plugin API version {self.api_version!r}; "
                f"this galleria reads version {PLUGIN_API_VERSION}"
            )
        if self.kind not in KINDS:
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

    def check(self, params: Any, *, pool: int | None = None) -> dict[str, Any]:
        """Validate ``params`` (a dict); return them complete, defaults filled in, aliases renamed.

        The one validator of this component's parameters: every source of values calls it.
        ``pool`` (the candidates re-ranked per request) enters the work bound when given.

        Raises
        ------
        TypeError
            ``params`` is not a dict, or a value of the wrong type.
        ValueError
            An unknown parameter, a value outside its range, a broken constraint, or work over
            :attr:`max_work`.
        """
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


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(component: Component) -> str:
    """``component``'s parameters as a Markdown table (the docs tables are generated from this).

    Examples
    --------
    >>> demo = Component("reranker", "demo", (Param("k", int, 3, 1, 9, paper=5, help="size"),), build=dict)
    >>> print(markdown_table(demo))
    | parameter | type | default | range | paper | tuned over | help |
    |---|---|---|---|---|---|---|
    | `k` | int | 3 | [1, 9] | 5 | — | size |
    """
    lines = [
        "| parameter | type | default | range | paper | tuned over | help |",
        "|---|---|---|---|---|---|---|",
    ]
    for param in component.params:
        space = param.space
        if space is None:
            tuned = "—"
        elif space.kind == "categorical":
            tuned = ", ".join(format_value(value) for value in space.choices)
        else:
            tuned = f"{format_value(space.low)}–{format_value(space.high)}" + (" (log)" if space.log else "")
        default = "none" if param.default is None else format_value(param.default)
        paper = format_value(param.paper) if param.has_paper else "—"
        cells = [
            f"`{param.name}`",
            param.type.__name__,
            default,
            param.range_text(),
            paper,
            tuned,
            param.help,
        ]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)
