"""Declared parameters: :class:`Param` (one parameter of a component) and :class:`Space` (what the
tuner searches for it), with the checks of a value against its declaration.

Ground floor: imports nothing from galleria but :mod:`galleria._validation`. :mod:`galleria._declare`
builds components from these; plugin authors import both from :mod:`galleria.components`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from galleria._validation import is_int

__all__ = ["DeclarationError", "Param", "Space", "format_value"]


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
    flag : str or None
        Its own command-line option besides ``--rerank-param NAME=VALUE`` (``--lambda``), if any.
    key : str or None
        The short name a form, an address and the JSON API also accept (``lambda``), if any.
    trial : str or None
        Its name in the tuner's trials (``lambda``: ``k-reciprocal.lambda``; default: ``name``).

    Every spelling of a parameter is one of these (or ``name`` / ``aliases``): the command line, the
    page, the API and the tuner read them from the declaration, not from tables of their own.
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
    flag: str | None = None
    key: str | None = None
    trial: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise DeclarationError(f"parameter {self.name!r}: its name must be an identifier")
        if self.type not in _TYPES:
            raise DeclarationError(
                f"parameter {self.name!r} has no type (int, float, bool or str), got {self.type!r}"
            )
        if self.flag is not None and not (
            isinstance(self.flag, str)
            and self.flag.startswith("--")
            and self.flag[2:].replace("-", "_").isidentifier()
        ):
            raise DeclarationError(
                f"parameter {self.name!r}: its flag must look like --word, got {self.flag!r}"
            )
        for spelled in (self.key, self.trial):
            if spelled is not None and not (isinstance(spelled, str) and spelled.isidentifier()):
                raise DeclarationError(f"parameter {self.name!r}: {spelled!r} is not a name")
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

    @property
    def trial_name(self) -> str:
        """Its name in the tuner's trials."""
        return self.trial or self.name

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
