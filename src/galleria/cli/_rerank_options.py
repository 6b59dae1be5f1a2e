"""The re-ranking, αQE, report and settings-file options of the commands, and their settings."""

from __future__ import annotations

import argparse
from typing import Any

from galleria._plugins import LazyNames
from galleria.cli._common import CliError
from galleria.cli._parse import add_deprecated_alias, check_existing_file, parse_float, parse_int
from galleria.expansion import EXPANSION, MAX_EXPANSION_ALPHA
from galleria.rerank.registry import (
    DEFAULT_COMPONENT,
    DEFAULT_METHOD,
    PRECOMPUTED_METHODS,
    RERANK_METHODS,
    reranker_component,
    reranker_components,
)
from galleria.retrieval.config import DEFAULT_POOL, POOL
from galleria.viewer.text import shorten_middle

#: The values of ``--rerank-method``: every declared method (built-in and plugins), the default first.
RERANK_METHOD_CHOICES: LazyNames[str] = RERANK_METHODS
#: The values of ``build --precompute-rerank``: the methods whose declaration has an offline part.
PRECOMPUTE_RERANK_CHOICES: LazyNames[str] = PRECOMPUTED_METHODS
#: ``--k1``, ``--k2``, ``--lambda``: the flags the default method's parameters declare (``Param.flag``),
#: for the methods that declare parameters of all these names (k-reciprocal and the GNN among the built-ins).
#: The methods are computed on first use, so that importing the CLI discovers no plugin.
_SHORTCUTS = {param.name: param.flag for param in DEFAULT_COMPONENT.params if param.flag}
_SHORTCUT_METHODS: LazyNames[str] = LazyNames(
    lambda: tuple(c.name for c in reranker_components() if set(_SHORTCUTS) <= set(c.names))
)


def _paper_text(method: str) -> str:
    """A method's paper values for ``--help`` (``k1 20, k2 6, λ 0.3``)."""
    return _paper_text_of(reranker_component(method))


def _paper_text_of(component: Any) -> str:
    """A declaration's paper values for ``--help`` (``expansion_alpha 3, expansion_neighbors 50``)."""
    return str(component.describe(component.paper_params())).replace("=", " ")


def rerank_param_help() -> str:
    """``--rerank-param``'s help: every method's declared parameter names."""
    methods = "; ".join(f"{c.name}: {', '.join(c.names)}" for c in reranker_components() if c.names)
    return (
        "a parameter of --rerank-method by its declared name, repeatable (e.g. --rerank-method diffusion "
        f"--rerank-param k=30); {methods}. `galleria methods` lists ranges and defaults"
    )


def add_rerank_options(parser: argparse.ArgumentParser, *, pool_default: int = DEFAULT_POOL) -> None:
    """``--rerank`` and its ``--rerank-method``, ``--rerank-preset``, ``--rerank-param``, ``--k1``,
    ``--k2``, ``--lambda``, ``--pool`` (choices and help derived from the declarations)."""
    group = parser.add_argument_group("re-ranking")
    group.add_argument("--rerank", action="store_true", help="re-rank a pool of candidates")
    others = ", ".join(name for name in RERANK_METHOD_CHOICES if name != DEFAULT_METHOD)
    group.add_argument(
        "--rerank-method",
        default=None,
        choices=RERANK_METHOD_CHOICES,
        metavar="METHOD",
        help=f"re-ranking method: {DEFAULT_METHOD} (default), {others}; --k1/--k2/--lambda set "
        f"{' and '.join(_SHORTCUT_METHODS)}'s, --rerank-param any method's",
    )
    group.add_argument(
        "--rerank-preset",
        default=None,
        choices=("adaptive", "paper"),
        help="where parameters not given come from: adaptive (default: read from the gallery's "
        "reciprocal-neighbor statistics) or paper (the published values: "
        f"{_paper_text(DEFAULT_METHOD)} for {DEFAULT_METHOD}; αQE's {_paper_text_of(EXPANSION)})",
    )
    group.add_argument(
        "--rerank-param",
        dest="rerank_param",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help=rerank_param_help(),
    )
    declared = reranker_component(DEFAULT_METHOD)
    for name, option in _SHORTCUTS.items():
        param = declared.param(name)
        group.add_argument(
            option,
            dest=name,
            default=None,
            metavar="X" if param.type is float else "N",
            help=f"{param.help}, in {param.range_text()} (paper: {param.paper}; else from the gallery)",
        )
    group.add_argument(
        str(POOL.flag), dest="pool", default=None, metavar="N", help=f"{POOL.help} (default: {pool_default})"
    )
    parser.set_defaults(pool_default=pool_default)


def add_expand_options(parser: argparse.ArgumentParser) -> None:
    """``--expand`` and its ``--alpha``, ``--neighbors``."""
    group = parser.add_argument_group("alpha query expansion")
    group.add_argument("--expand", action="store_true", help="search again with the alpha-expanded query")
    alpha, neighbors = EXPANSION.params  # their flags, ranges, paper values and help: declared
    group.add_argument(
        str(alpha.flag),
        dest="alpha",
        default=None,
        metavar="X",
        help=f"{alpha.help}, in {alpha.range_text()} (default: adaptive, 3; paper preset: {alpha.paper:g})",
    )
    group.add_argument(
        str(neighbors.flag),
        dest="neighbors",
        default=None,
        metavar="N",
        help=f"{neighbors.help}, in {neighbors.range_text()} (default: adaptive, read from the gallery: 2, "
        f"or 1 without reciprocal neighbours; --rerank-preset paper: {neighbors.paper})",
    )


def add_report_options(parser: argparse.ArgumentParser) -> None:
    """``--report DIR`` (report folder) and ``--json`` of the evaluating commands, ``evaluate`` and ``demo``.

    ``--out`` names a single file a command writes (build: the store, tune: the settings), so the report
    folder has its own option; ``--out DIR`` is kept here as a deprecated spelling.
    """
    parser.add_argument(
        "--report",
        dest="out",
        default=None,
        metavar="DIR",
        help="write report.html (with thumbs/), report.md, metrics.json, pr_curve.png into DIR",
    )
    add_deprecated_alias(parser, "--out", dest="out", replacement="--report DIR")
    parser.add_argument(
        "--json", action="store_true", help="print the metrics as JSON (the metrics.json layout)"
    )


def _require(args: argparse.Namespace, flag: str, names: dict[str, str]) -> None:
    for dest, option in names.items():
        if getattr(args, dest) is not None:
            raise CliError(f"{option} needs {flag}")


def _rerank_params_given(args: argparse.Namespace, method: str) -> dict[str, Any]:
    """The ``--rerank-param NAME=VALUE`` values, each read as its declared type and checked."""
    component = reranker_component(method)
    params: dict[str, Any] = {}
    for text in getattr(args, "rerank_param", None) or ():
        name, equals, value = str(text).partition("=")
        name = name.strip()
        if not equals or not name or not value.strip():
            raise CliError(
                f"--rerank-param must be NAME=VALUE (e.g. k1=20), got {shorten_middle(text, 40)!r}"
            )
        if name not in component.names:
            raise CliError(
                f"--rerank-param: {method} has no parameter {name!r}; it takes {list(component.names)}"
            )
        if name in params:
            raise CliError(f"--rerank-param {name} is given twice")
        try:
            params[name] = component.param(name).parse(value)
        except (TypeError, ValueError) as error:
            raise CliError(f"--rerank-param: {error}") from None
    return params


def rerank_settings(args: argparse.Namespace) -> dict[str, Any] | None:
    """The checked re-ranking settings (``k1``, ``k2``, ``lambda_value``, ``pool``; or ``rerank_method``
    and ``rerank_params``); None without --rerank."""
    options = {**_SHORTCUTS, "pool": "--pool"}
    method = getattr(args, "rerank_method", None)
    preset = getattr(args, "rerank_preset", None)
    if not args.rerank:
        needed = {**options, "rerank_method": "--rerank-method"}
        if not getattr(args, "expand", False):  # the preset also sets αQE's values
            needed["rerank_preset"] = "--rerank-preset"
        _require(args, "--rerank", needed)
        if getattr(args, "rerank_param", None):
            raise CliError("--rerank-param needs --rerank")
        return None
    method = method or DEFAULT_METHOD
    given = _rerank_params_given(args, method)
    explicit = any(getattr(args, dest) is not None for dest in _SHORTCUTS) or bool(given)
    if preset == "adaptive" and explicit:
        raise CliError(
            "--rerank-preset adaptive reads the parameters from the gallery; drop --k1/--k2/--lambda "
            "and --rerank-param, or use --rerank-preset paper"
        )
    pool = parse_int("--pool", args.pool_default if args.pool is None else args.pool)
    if preset != "paper" and not explicit:  # the default: parameters read from the gallery
        adaptive: dict[str, Any] = {"rerank_preset": "adaptive", "pool": pool}
        return adaptive if method == DEFAULT_METHOD else {"rerank_method": method, **adaptive}
    shortcut = " or ".join(_SHORTCUT_METHODS)
    if method not in _SHORTCUT_METHODS:
        _require(args, f"--rerank-method {shortcut}", {"k1": "--k1", "k2": "--k2"})
        _require(args, f"--rerank-method {shortcut}", {"lambda_value": "--lambda"})
    component = reranker_component(method)
    params = component.paper_params()
    if method in _SHORTCUT_METHODS:
        k1 = parse_int("--k1", params["k1"] if args.k1 is None else args.k1)
        k2 = parse_int("--k2", params["k2"] if args.k2 is None else args.k2)
        if k2 > k1:
            raise CliError(f"--k2 must not exceed --k1, got --k2 {k2} > --k1 {k1}")
        lam = params["lambda_value"] if args.lambda_value is None else args.lambda_value
        params.update(k1=k1, k2=k2, lambda_value=parse_float("--lambda", lam, maximum=1.0))
    params.update(given)
    try:
        component.check(params, pool=pool)  # the one validator (same message as the API's)
    except (TypeError, ValueError) as error:
        # named by where the value came from: its flag (--k1) when it was given so, else the method
        named = str(error).split(" ", 1)[0]
        flag = _SHORTCUTS.get(named) if getattr(args, named, None) is not None else None
        raise CliError(f"{flag or f'--rerank-method {method}'}: {error}") from None
    if method == DEFAULT_METHOD:
        return {**params, "pool": pool}
    return {"rerank_method": method, "rerank_params": params, "pool": pool}


def expand_settings(args: argparse.Namespace) -> dict[str, Any] | None:
    """The checked αQE settings (``expansion_alpha``, ``expansion_neighbors``; None where not given:
    the preset's value), or None without --expand."""
    options = {"alpha": "--alpha", "neighbors": "--neighbors"}
    if not args.expand:
        _require(args, "--expand", options)
        return None
    # Not given: None, the preset's value (adaptive: read from the gallery; paper: α 3, n 50).
    alpha = None if args.alpha is None else parse_float("--alpha", args.alpha, maximum=MAX_EXPANSION_ALPHA)
    neighbors = None if args.neighbors is None else parse_int("--neighbors", args.neighbors)
    return {"expansion_alpha": alpha, "expansion_neighbors": neighbors}


def add_settings_option(parser: argparse.ArgumentParser) -> None:
    """``--settings FILE``: αQE and re-ranking settings chosen by ``galleria tune``."""
    parser.add_argument(
        "--settings",
        default=None,
        metavar="FILE",
        help="use the settings in FILE (written by `galleria tune`) instead of --expand/--rerank options",
    )


def settings_config(args: argparse.Namespace) -> Any:
    """The ``RetrievalConfig`` of ``--settings`` (None without it); CliError beside --expand / --rerank."""
    path = getattr(args, "settings", None)
    if path is None:
        return None
    clashing = [
        option
        for dest, option in (
            ("expand", "--expand"),
            ("rerank", "--rerank"),
            ("alpha", "--alpha"),
            ("neighbors", "--neighbors"),
            ("k1", "--k1"),
            ("k2", "--k2"),
            ("lambda_value", "--lambda"),
            ("pool", "--pool"),
            ("rerank_method", "--rerank-method"),
            ("rerank_preset", "--rerank-preset"),
            ("rerank_param", "--rerank-param"),
        )
        if getattr(args, dest, None) not in (None, False)
    ]
    if clashing:
        raise CliError(f"--settings replaces {', '.join(clashing)}; give one or the other")
    check_existing_file("settings file", path)
    from galleria.tune.settings import read_settings

    return read_settings(path)
