"""Options shared by ``build``, ``search``, ``evaluate`` and ``demo``, and their checks.

Numbers are taken as text by argparse and converted here, so a bad value is reported as one line
naming the option (a :class:`CliError`, exit code 2) rather than argparse's usage dump.
"""

from __future__ import annotations

import argparse
import math
import os
import stat
import sys
from typing import Any

from galleria._validation import MAX_COUNT
from galleria.cli._common import CliError
from galleria.embedders.base import Embedder
from galleria.embedders.registry import embedder_component, embedder_components
from galleria.evaluation.configs import DEFAULT_POOL
from galleria.expansion import MAX_EXPANSION_ALPHA
from galleria.index.base import SPACES
from galleria.index.registry import INDEX_NAMES, index_components
from galleria.rerank.registry import (
    DEFAULT_METHOD,
    PRECOMPUTED_METHODS,
    RERANK_METHODS,
    reranker_component,
    reranker_components,
)
from galleria.viewer.text import shorten_middle

#: The values of ``--rerank-method``: every declared method (built-in and plugins), the default first.
RERANK_METHOD_CHOICES: tuple[str, ...] = RERANK_METHODS
#: The values of ``build --precompute-rerank``: the methods whose declaration has an offline part.
PRECOMPUTE_RERANK_CHOICES: tuple[str, ...] = PRECOMPUTED_METHODS
#: ``--k1``, ``--k2``, ``--lambda``: shortcuts of the parameters of these names, for the methods
#: that declare all three (k-reciprocal and the GNN among the built-ins).
_SHORTCUTS = {"k1": "--k1", "k2": "--k2", "lambda_value": "--lambda"}
_SHORTCUT_METHODS = tuple(c.name for c in reranker_components() if set(_SHORTCUTS) <= set(c.names))

__all__ = [
    "DEFAULT_POOL",
    "EMBEDDER_HELP",
    "add_deprecated_alias",
    "add_embedder_options",
    "add_expand_options",
    "add_index_param_option",
    "add_load_options",
    "add_report_options",
    "add_rerank_options",
    "add_settings_option",
    "add_store_options",
    "check_existing_file",
    "check_existing_folder",
    "embedder_settings",
    "expand_settings",
    "index_params",
    "load_store",
    "make_embedder",
    "parse_embedder_spec",
    "parse_float",
    "parse_index_param",
    "parse_int",
    "rerank_settings",
    "say",
    "settings_config",
    "shorten_middle",
]


class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option: stores into the new option's destination and prints one warning."""

    def __init__(self, option_strings: list[str], dest: str, *, replacement: str, **kwargs: Any) -> None:
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(
            f"{parser.prog}: warning: {option_string} is deprecated; use {self.replacement}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, True if self.nargs == 0 else values)


def add_deprecated_alias(group: Any, old: str, *, dest: str, replacement: str, **kwargs: Any) -> None:
    """Register ``old`` as a hidden, warning spelling of the option that stores into ``dest``.

    ``replacement`` is the spelling the warning points to (e.g. ``"--n-queries N"``).
    """
    group.add_argument(
        old,
        dest=dest,
        action=_DeprecatedAlias,
        replacement=replacement,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
        **kwargs,
    )


#: ``--embedder``'s help: every declared embedder's spelling (plugins included).
EMBEDDER_HELP = (
    " | ".join(c.extra["spec"] for c in embedder_components() if "spec" in c.extra)
    + ", PRETRAINED a weights tag, a local checkpoint file or 'random'; `galleria models` lists them "
    "(default: %(default)s)"
)


def parse_int(option: str, text: Any, *, minimum: int = 1) -> int:
    """``text`` as an int ≥ ``minimum``, else a CliError naming ``option``."""
    try:
        value = int(str(text), 10)
    except ValueError:  # not a number, or more than 4300 digits
        raise CliError(f"{option} must be an integer, got {shorten_middle(str(text), 40)!r}") from None
    if value < minimum:
        raise CliError(f"{option} must be at least {minimum}, got {value}")
    if value > MAX_COUNT:  # numpy's int64: larger counts overflow in the numeric cores
        raise CliError(f"{option} must be at most 2**63 - 1, got {shorten_middle(str(text), 40)!r}")
    return value


def parse_float(option: str, text: Any, *, minimum: float = 0.0, maximum: float | None = None) -> float:
    """``text`` as a finite float in [minimum, maximum], else a CliError naming ``option``."""
    try:
        value = float(str(text))
    except ValueError:
        raise CliError(f"{option} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise CliError(f"{option} must be a finite number, got {text!r}")
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and at most {maximum:g}" if maximum is not None else ""
        raise CliError(f"{option} must be at least {minimum:g}{upper}, got {text!r}")
    return value


def check_existing_folder(option: str, path: str) -> str:
    """``path`` if it is an existing folder, else a CliError naming ``option``."""
    if not os.path.exists(path):
        raise CliError(f"{option} {path!r} does not exist")
    if not os.path.isdir(path):
        raise CliError(f"{option} {path!r} is not a directory")
    return path


def check_existing_file(what: str, path: str) -> str:
    """``path`` if it is a regular file, else a CliError naming ``what`` (e.g. ``"store file"``).

    A folder, FIFO or device is refused at once: opening a FIFO would wait forever for a writer.
    """
    if not os.path.exists(path):
        raise CliError(f"{what} {path!r} does not exist")
    if os.path.isdir(path):
        raise CliError(f"{what} {path!r} is a directory")
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = "FIFO" if stat.S_ISFIFO(mode) else "device or other special file"
        raise CliError(f"{what} {path!r} is a {kind}, not a regular file")
    return path


def parse_embedder_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Check an embedder spec; return the kind and its keyword arguments.

    ``NAME[:...]``: NAME is a declared embedder and the rest is read by its declaration's
    ``parse_spec``. ``pixel``, ``pixel:16``, ``pixel:16:gray`` or ``pixel:gray`` (thumbnail side, one
    gray channel); ``clip``, ``clip:MODEL``, ``clip:MODEL:PRETRAINED`` where PRETRAINED is an open_clip
    weights tag, a local checkpoint path (which may itself hold colons) or ``random`` (seeded random
    weights); ``timm:MODEL:PRETRAINED`` likewise.

    Examples
    --------
    >>> parse_embedder_spec("pixel:16:gray")
    ('pixel', {'size': 16, 'grayscale': True})
    >>> parse_embedder_spec("clip:ViT-B-32:random")
    ('clip', {'model_name': 'ViT-B-32', 'pretrained': None})
    """
    kind, _, rest = spec.partition(":")
    for component in embedder_components():
        parse = component.extra.get("parse_spec")
        if component.name == kind and parse is not None:
            try:
                return kind, dict(parse(rest))
            except ValueError as error:
                raise CliError(f"--embedder {spec!r} {error}") from None
    forms = ", ".join(c.extra["spec"] for c in embedder_components() if "spec" in c.extra)
    raise CliError(f"unknown embedder {spec!r}: expected {forms}")


def _embedder(kind: str) -> Any:
    return embedder_component(kind)


def embedder_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The checked ``--device``, ``--batch-size`` and ``--runtime`` of a command that makes an embedder."""
    settings: dict[str, Any] = {}
    if getattr(args, "runtime", None) is not None:
        settings["runtime"] = args.runtime
    if getattr(args, "batch_size", None) is not None:
        settings["batch_size"] = parse_int("--batch-size", args.batch_size)
    if getattr(args, "device", None) is not None:
        if "device" not in _embedder(parse_embedder_spec(args.embedder)[0]).names:
            takers = " and ".join(c.name for c in embedder_components() if "device" in c.names)
            raise CliError(f"--device applies to {takers} embedders, not --embedder {args.embedder!r}")
        settings["device"] = args.device
    return settings


def say(message: str) -> None:
    """Print what is happening (a slow import or model load) on stderr, on a terminal only.

    Off a terminal the line is left out, so that a failure stays one line for a log or a script.
    """
    if sys.stderr.isatty():
        print(message, file=sys.stderr, flush=True)


def make_embedder(
    spec: str, *, device: str | None = None, batch_size: int | None = None, runtime: str | None = None
) -> Embedder:
    """Build the embedder named by a spec (see :func:`parse_embedder_spec`) with its declared constructor.

    ``runtime`` (``--runtime``) forces where a timm network (or a CLIP image side) runs; a checkpoint
    path in the spec is remembered in the user's checkpoint registry, so that later commands find it
    by its digest.
    """
    kind, options = parse_embedder_spec(spec)
    component = _embedder(kind)
    extra: dict[str, Any] = {} if batch_size is None else {"batch_size": batch_size}
    if device is not None and "device" in component.names:
        extra["device"] = device
    if runtime is not None:
        if "runtime" not in component.names:
            raise CliError(f"--runtime applies to the timm and clip embedders, not {kind}")
        extra["runtime"] = runtime
    loading = component.extra.get("loading")
    if loading:
        say(f"loading {loading}, then the {kind} model {options.get('model_name')} ...")
    embedder: Embedder = component.build(**options, **extra, **component.extra.get("cli_options", {}))
    config = getattr(embedder, "config", None)
    if callable(config):
        remember_checkpoint_of(options.get("pretrained"), config())
    return embedder


def remember_checkpoint_of(path: Any, config: dict[str, Any]) -> None:
    """Keep a checkpoint path the user gave in the per-user registry, keyed by its recorded digest."""
    digest = config.get("checkpoint_sha256")
    if isinstance(path, str) and isinstance(digest, str) and os.path.isfile(path):
        from galleria.embedders._cache import remember_checkpoint

        remember_checkpoint(path, digest)


RUNTIME_HELP = (
    "where a timm network (or a clip image side) runs: onnx (ONNX Runtime, galleria[onnx]) or torch; by "
    "default a timm network runs on onnx when onnxruntime is installed, clip on torch, and a store's "
    "queries use the runtime it was built with"
)


def add_embedder_options(parser: argparse.ArgumentParser, group: Any = None) -> None:
    """``--embedder``, ``--device``, ``--batch-size``."""
    group = group or parser.add_argument_group("embedder options")
    group.add_argument("--embedder", default="pixel", metavar="SPEC", help=EMBEDDER_HELP)
    group.add_argument(
        "--device", default=None, metavar="DEVICE", help="torch device of a clip embedder (default: auto)"
    )
    group.add_argument(
        "--batch-size", default=None, metavar="N", help="images embedded per batch (default: the embedder's)"
    )
    group.add_argument("--runtime", default=None, choices=("torch", "onnx"), help=RUNTIME_HELP)


def add_load_options(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint`` and ``--root`` of the commands that load a store file."""
    group = parser.add_argument_group("loading the store")
    group.add_argument(
        "--checkpoint",
        default=None,
        metavar="PATH",
        help=(
            "local model file of a store built from one (checked against the digest it recorded); needed "
            "only when galleria cannot find it (installed package, or a path given before)"
        ),
    )
    group.add_argument("--runtime", default=None, choices=("torch", "onnx"), help=RUNTIME_HELP)
    group.add_argument(
        "--root",
        default=None,
        metavar="DIR",
        help="the gallery folder's new place, for a store whose images were moved",
    )
    group.add_argument(
        "--connect",
        action="store_true",
        help="let a Milvus-backed store reconnect to the uri and collection its file records",
    )


def load_store(args: argparse.Namespace, path: str, embedder: Any = None) -> Any:
    """Load the store file ``path`` with the ``--checkpoint`` and ``--root`` options when they are given.

    ``embedder`` replaces the saved one (which is then not rebuilt).
    """
    from galleria.store import InMemoryImageEmbeddingStore

    check_existing_file("store file", path)
    options: dict[str, Any] = {}
    if getattr(args, "checkpoint", None) is not None:
        options["checkpoint"] = check_existing_file("--checkpoint", args.checkpoint)
    if getattr(args, "runtime", None) is not None:
        options["runtime"] = args.runtime
    if getattr(args, "root", None) is not None:
        options["root"] = check_existing_folder("--root", args.root)
    if getattr(args, "connect", False):
        options["connect"] = True
    if embedder is not None:
        options.pop("checkpoint", None)  # the saved model is not rebuilt
        options.pop("runtime", None)
    elif sys.stderr.isatty():  # a model can take a while to load: say so, on a terminal only
        from galleria.cli._storefile import read_store_header

        entry = read_store_header(path).get("embedder")
        config = entry.get("config") if isinstance(entry, dict) else None
        kind = config.get("type") if isinstance(config, dict) else None
        loading = {c.name: c.extra.get("loading") for c in embedder_components()}
        if isinstance(config, dict) and isinstance(kind, str) and loading.get(kind):
            say(f"loading {loading[kind]}, then the {kind} model {config.get('model_name')} ...")
    store = InMemoryImageEmbeddingStore.load_from_disk(path, embedder, **options)
    if "checkpoint" in options and store.embedder is not None and hasattr(store.embedder, "config"):
        remember_checkpoint_of(os.path.abspath(options["checkpoint"]), store.embedder.config())
    from galleria.store.graph import remember_graph_file

    remember_graph_file(store, path)  # the graph beside it (STORE.graph) is read when first needed
    from galleria.store.gallery_map import remember_map_file

    remember_map_file(store, path)  # and its map (STORE.map), for the page's /map
    return store


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """The gallery options: the embedder's, ``--index``, ``--space``, ``--workers``, ``--skip-errors``."""
    group = parser.add_argument_group("gallery options")
    add_embedder_options(parser, group)
    group.add_argument(
        "--index",
        default="exact",
        choices=INDEX_NAMES,
        help="search index: "
        + "; ".join(f"{c.name}, {c.summary}" for c in index_components() if c.name in INDEX_NAMES)
        + " (default: %(default)s)",
    )
    add_index_param_option(group)
    group.add_argument(
        "--space", default="cosine", choices=SPACES, help="distance space (default: %(default)s)"
    )
    group.add_argument(
        "--workers", default="4", metavar="N", help="threads decoding images (default: %(default)s)"
    )
    group.add_argument(
        "--skip-errors",
        action="store_true",
        help="skip unreadable images instead of stopping at the first one",
    )


def add_index_param_option(group: Any) -> None:
    """``--index-param KEY=VALUE`` (repeatable): one parameter of the ``--index`` chosen."""
    group.add_argument(
        "--index-param",
        dest="index_param",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="a parameter of the index, repeatable (e.g. --index ivfpq --index-param lists=16 "
        "--index-param bits=6); "
        + "; ".join(
            f"{c.name}: {', '.join(c.names)}" for c in index_components() if c.name in INDEX_NAMES and c.names
        )
        + ". `galleria methods --kind index` lists ranges and defaults",
    )


def parse_index_param(text: str) -> tuple[str, Any]:
    """One ``KEY=VALUE`` of ``--index-param``: VALUE read as an int, true/false, none, or else text.

    Examples
    --------
    >>> parse_index_param("lists=16"), parse_index_param("opq=true"), parse_index_param("x=none")
    (('lists', 16), ('opq', True), ('x', None))
    """
    key, equals, value = text.partition("=")
    key = key.strip()
    if not equals or not key or not value.strip():
        raise CliError(f"--index-param must be KEY=VALUE (e.g. lists=16), got {text!r}")
    value = value.strip()
    lowered = value.lower()
    if lowered in ("true", "false"):
        return key, lowered == "true"
    if lowered == "none":
        return key, None
    try:
        return key, int(value, 10)
    except ValueError:
        return key, value


def index_params(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``--index-param`` values, checked by the chosen index's own validator; None when none given.

    The returned mapping holds only the keys given (the index fills in its defaults, which may depend on
    the data); a bad name or value is a one-line CliError naming the option.
    """
    given = getattr(args, "index_param", None)
    if not given:
        return None
    from galleria.index.registry import validate_index_params

    params: dict[str, Any] = {}
    for text in given:
        key, value = parse_index_param(text)
        if key in params:
            raise CliError(f"--index-param {key} is given twice")
        params[key] = value
    try:
        validate_index_params(args.index, params)
    except (TypeError, ValueError) as error:
        raise CliError(f"--index-param (--index {args.index}): {error}") from None
    return params


def _paper_text(method: str) -> str:
    """A method's paper values for ``--help`` (``k1 20, k2 6, λ 0.3``)."""
    component = reranker_component(method)
    return component.describe(component.paper_params()).replace("=", " ")


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
        f"{_paper_text(DEFAULT_METHOD)} for {DEFAULT_METHOD}; αQE's α 3, n 50)",
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
        "--pool", default=None, metavar="N", help=f"candidates re-ranked per query (default: {pool_default})"
    )
    parser.set_defaults(pool_default=pool_default)


def add_expand_options(parser: argparse.ArgumentParser) -> None:
    """``--expand`` and its ``--alpha``, ``--neighbors``."""
    group = parser.add_argument_group("alpha query expansion")
    group.add_argument("--expand", action="store_true", help="search again with the alpha-expanded query")
    group.add_argument(
        "--alpha", default=None, metavar="X", help="αQE exponent (default: adaptive, 3; paper preset: 3)"
    )
    group.add_argument(
        "--neighbors",
        default=None,
        metavar="N",
        help="matches averaged into the query (default: adaptive, read from the gallery: 2, or 1 without "
        "reciprocal neighbours; --rerank-preset paper: 50)",
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
        raise CliError(f"--rerank-method {method}: {error}") from None
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
