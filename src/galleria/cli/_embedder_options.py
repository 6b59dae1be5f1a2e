"""The embedder options of the commands: ``--embedder``, ``--runtime``, and making the embedder."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from galleria.cli._common import CliError
from galleria.cli._parse import parse_int
from galleria.embedders.base import Embedder
from galleria.embedders.registry import embedder_component, embedder_components


def embedder_help() -> str:
    """``--embedder``'s help: every declared embedder's spelling (plugins included)."""
    return (
        " | ".join(c.extra["spec"] for c in embedder_components() if "spec" in c.extra)
        + ", PRETRAINED a weights tag, a local checkpoint file or 'random'; `galleria models` lists them "
        "(default: %(default)s)"
    )


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
        from galleria.embedders import remember_checkpoint

        remember_checkpoint(path, digest)


RUNTIME_HELP = (
    "where a timm network (or a clip image side) runs: onnx (ONNX Runtime, galleria[onnx]) or torch; by "
    "default a timm network runs on onnx when onnxruntime is installed, clip on torch, and a store's "
    "queries use the runtime it was built with"
)


def add_embedder_options(parser: argparse.ArgumentParser, group: Any = None) -> None:
    """``--embedder``, ``--device``, ``--batch-size``."""
    group = group or parser.add_argument_group("embedder options")
    group.add_argument("--embedder", default="pixel", metavar="SPEC", help=embedder_help())
    group.add_argument(
        "--device", default=None, metavar="DEVICE", help="torch device of a clip embedder (default: auto)"
    )
    group.add_argument(
        "--batch-size", default=None, metavar="N", help="images embedded per batch (default: the embedder's)"
    )
    group.add_argument("--runtime", default=None, choices=("torch", "onnx"), help=RUNTIME_HELP)
