"""Options shared by ``build``, ``search``, ``evaluate`` and ``demo``, and their checks.

Numbers are taken as text by argparse and converted here, so a bad value is reported as one line
naming the option (a :class:`CliError`, exit code 2) rather than argparse's usage dump.
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from galleria.cli._common import CliError
from galleria.embedders.base import Embedder
from galleria.index.base import SPACES

#: The values of ``--rerank-method`` (galleria.rerank.RERANK_METHODS, without importing the re-rankers).
RERANK_METHOD_CHOICES: tuple[str, ...] = ("k-reciprocal", "diffusion", "gnn", "dba")

__all__ = [
    "EMBEDDER_HELP",
    "add_expand_options",
    "add_report_options",
    "add_rerank_options",
    "add_settings_option",
    "add_store_options",
    "check_existing_file",
    "check_existing_folder",
    "expand_settings",
    "make_embedder",
    "parse_embedder_spec",
    "parse_float",
    "parse_int",
    "rerank_settings",
    "settings_config",
]

EMBEDDER_HELP = "pixel | clip[:MODEL[:PRETRAINED]] | timm:MODEL[:PRETRAINED] (default: %(default)s)"


def parse_int(option: str, text: Any, *, minimum: int = 1) -> int:
    """``text`` as an int ≥ ``minimum``, else a CliError naming ``option``."""
    try:
        value = int(str(text), 10)
    except ValueError:
        raise CliError(f"{option} must be an integer, got {text!r}") from None
    if value < minimum:
        raise CliError(f"{option} must be at least {minimum}, got {value}")
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
    """``path`` if it exists and is not a folder, else a CliError naming ``what`` (e.g. ``"store file"``)."""
    if not os.path.exists(path):
        raise CliError(f"{what} {path!r} does not exist")
    if os.path.isdir(path):
        raise CliError(f"{what} {path!r} is a directory")
    return path


def parse_embedder_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Check ``pixel`` | ``clip[:MODEL[:PRETRAINED]]`` | ``timm:MODEL[:PRETRAINED]``; return kind and kwargs.

    PRETRAINED is a weights tag or a local checkpoint path (which may itself hold colons). A timm
    model without PRETRAINED has seeded random weights.
    """
    parts = spec.split(":", 2)
    if parts == ["pixel"]:
        return "pixel", {}
    if parts[0] == "clip":
        if not all(parts[1:]):
            raise CliError(f"--embedder {spec!r} is malformed: expected clip[:MODEL[:PRETRAINED]]")
        options = {"model_name": "ViT-B-32", "pretrained": "openai"}
        if len(parts) > 1:
            options["model_name"] = parts[1]
        if len(parts) > 2:
            options["pretrained"] = parts[2]
        return "clip", options
    if parts[0] == "timm":
        # timm:MODEL[:PRETRAINED] — PRETRAINED is a timm tag or a local checkpoint path (colons allowed).
        if len(parts) < 2 or not all(parts[1:]):
            raise CliError(f"--embedder {spec!r} is malformed: expected timm:MODEL[:PRETRAINED]")
        timm_options = {"model_name": parts[1]}
        if len(parts) > 2:
            timm_options["pretrained"] = parts[2]
        return "timm", timm_options
    raise CliError(
        f"unknown embedder {spec!r}: expected pixel, clip[:MODEL[:PRETRAINED]] or timm:MODEL[:PRETRAINED]"
    )


def make_embedder(spec: str) -> Embedder:
    """Build the embedder named by ``pixel``, ``clip[:MODEL[:PRETRAINED]]`` or ``timm:MODEL[:PRETRAINED]``."""
    from galleria.embedders import ClipEmbedder, PixelEmbedder

    kind, options = parse_embedder_spec(spec)
    if kind == "pixel":
        return PixelEmbedder()
    if kind == "timm":
        from galleria.embedders import TimmEmbedder

        return TimmEmbedder(options["model_name"], pretrained=options.get("pretrained"), progress=True)
    embedder: Embedder = ClipEmbedder(model_name=options["model_name"], pretrained=options["pretrained"])
    return embedder


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """``--embedder``, ``--index``, ``--space``, ``--workers``, ``--skip-errors``."""
    group = parser.add_argument_group("gallery options")
    group.add_argument("--embedder", default="pixel", metavar="SPEC", help=EMBEDDER_HELP)
    group.add_argument(
        "--index", default="exact", choices=("exact", "hnsw"), help="search index (default: %(default)s)"
    )
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


def add_rerank_options(parser: argparse.ArgumentParser, *, pool_default: int) -> None:
    """``--rerank`` and its ``--k1``, ``--k2``, ``--lambda``, ``--pool``."""
    group = parser.add_argument_group("re-ranking")
    group.add_argument("--rerank", action="store_true", help="re-rank a pool of candidates (k-reciprocal)")
    group.add_argument(
        "--rerank-method",
        default=None,
        choices=RERANK_METHOD_CHOICES,
        help="re-ranking method (default: k-reciprocal); --k1/--k2 also set gnn's, other methods take "
        "their defaults or --settings",
    )
    group.add_argument("--k1", default=None, metavar="N", help="k1, the neighbourhood size (default: 20)")
    group.add_argument("--k2", default=None, metavar="N", help="k2, local query expansion (default: 6)")
    group.add_argument(
        "--lambda",
        dest="lambda_value",
        default=None,
        metavar="X",
        help="weight of the original distance, in [0, 1] (default: 0.3)",
    )
    group.add_argument(
        "--pool", default=None, metavar="N", help=f"candidates re-ranked per query (default: {pool_default})"
    )
    parser.set_defaults(pool_default=pool_default)


def add_expand_options(parser: argparse.ArgumentParser) -> None:
    """``--expand`` and its ``--alpha``, ``--neighbors``."""
    group = parser.add_argument_group("alpha query expansion")
    group.add_argument("--expand", action="store_true", help="search again with the alpha-expanded query")
    group.add_argument("--alpha", default=None, metavar="X", help="αQE exponent (default: 3.0)")
    group.add_argument(
        "--neighbors", default=None, metavar="N", help="matches averaged into the query (default: 50)"
    )


def add_report_options(parser: argparse.ArgumentParser) -> None:
    """``--out`` (report folder) and ``--json`` of the evaluating commands, ``evaluate`` and ``demo``."""
    parser.add_argument(
        "--out", default=None, metavar="DIR", help="write report.md, metrics.json, pr_curve.png"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the metrics as JSON (the metrics.json layout)"
    )


def _require(args: argparse.Namespace, flag: str, names: dict[str, str]) -> None:
    for dest, option in names.items():
        if getattr(args, dest) is not None:
            raise CliError(f"{option} needs {flag}")


def rerank_settings(args: argparse.Namespace) -> dict[str, Any] | None:
    """The checked re-ranking settings (``k1``, ``k2``, ``lambda_value``, ``pool``); None without --rerank."""
    options = {"k1": "--k1", "k2": "--k2", "lambda_value": "--lambda", "pool": "--pool"}
    method = getattr(args, "rerank_method", None)
    if not args.rerank:
        _require(args, "--rerank", {**options, "rerank_method": "--rerank-method"})
        return None
    method = method or "k-reciprocal"
    if method not in ("k-reciprocal", "gnn"):
        _require(args, "--rerank-method k-reciprocal or gnn", {"k1": "--k1", "k2": "--k2"})
    if method != "k-reciprocal":
        _require(args, "--rerank-method k-reciprocal", {"lambda_value": "--lambda"})
    defaults = (26, 7) if method == "gnn" else (20, 6)
    k1 = parse_int("--k1", defaults[0] if args.k1 is None else args.k1)
    k2 = parse_int("--k2", defaults[1] if args.k2 is None else args.k2)
    if k2 > k1:
        raise CliError(f"--k2 must not exceed --k1, got --k2 {k2} > --k1 {k1}")
    lambda_value = parse_float(
        "--lambda", 0.3 if args.lambda_value is None else args.lambda_value, maximum=1.0
    )
    pool = parse_int("--pool", args.pool_default if args.pool is None else args.pool)
    if method == "k-reciprocal":
        return {"k1": k1, "k2": k2, "lambda_value": lambda_value, "pool": pool}
    params = {"k1": k1, "k2": k2} if method == "gnn" else {}
    return {"rerank_method": method, "rerank_params": params, "pool": pool}


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
        )
        if getattr(args, dest, None) not in (None, False)
    ]
    if clashing:
        raise CliError(f"--settings replaces {', '.join(clashing)}; give one or the other")
    check_existing_file("settings file", path)
    from galleria.tune.settings import read_settings

    return read_settings(path)


def expand_settings(args: argparse.Namespace) -> dict[str, Any] | None:
    """The checked αQE settings (``expansion_alpha``, ``expansion_neighbors``), or None without --expand."""
    options = {"alpha": "--alpha", "neighbors": "--neighbors"}
    if not args.expand:
        _require(args, "--expand", options)
        return None
    alpha = parse_float("--alpha", 3.0 if args.alpha is None else args.alpha)
    neighbors = parse_int("--neighbors", 50 if args.neighbors is None else args.neighbors)
    return {"expansion_alpha": alpha, "expansion_neighbors": neighbors}
