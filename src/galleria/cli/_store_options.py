"""The store options of the commands: loading a store, ``--index`` and its parameters."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from galleria.cli._common import CliError
from galleria.cli._embedder_options import RUNTIME_HELP, add_embedder_options, remember_checkpoint_of, say

#: The values of ``--rerank-method``: every declared method (built-in and plugins), the default first.
from galleria.cli._parse import check_existing_file, check_existing_folder
from galleria.embedders.registry import embedder_components
from galleria.index.base import SPACES
from galleria.index.registry import INDEX_NAMES, index_components


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
    import galleria.rerank  # noqa: F401  (registers the codecs of the records re-rankers keep in store files)
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
        from galleria.store.persistence import read_store_header

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
