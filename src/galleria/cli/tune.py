"""``galleria tune``: choose αQE and re-ranking settings on a validation split of the user's own gallery."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._options import (
    add_store_options,
    check_existing_file,
    make_embedder,
    parse_embedder_spec,
    parse_float,
    parse_int,
)

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria tune animals/ --out tuned.json              # holds out evaluate's test queries, tunes on the rest
  galleria tune animals/ --out tuned.json --trials 80 --timeout 600 --metric recall@1
  galleria tune photos.safetensors --out tuned.json            # a built store of root/<label>/<image> paths
  galleria evaluate animals/ --settings tuned.json             # then measure it on the test queries
"""

#: The test split ``galleria evaluate`` draws by default (held out here so tuning never sees it).
DEFAULT_QUERY_FRACTION = 0.1


def add_parser(subparsers: Any) -> None:
    """Register ``galleria tune``."""
    parser = add_command(
        subparsers,
        "tune",
        help="choose αQE and re-ranking settings on your own labelled gallery",
        description=(
            "Search plain retrieval, alpha query expansion and the re-ranking methods (k-reciprocal, "
            "diffusion, GNN, DBA + αQE) with their parameters, using Optuna's seeded TPE sampler, on a "
            "validation split of a labelled gallery, and write the best settings to --out (a JSON file "
            "that evaluate / search / serve take with --settings). With a folder (SOURCE/<label>/<image>), "
            "the test queries `galleria evaluate` would draw with the same --seed and --query-fraction "
            "are held out first, so tuning never sees them. With a store file, its images are the gallery "
            "and each image's label is the name of its parent folder. The lift over plain retrieval is "
            "reported on --splits validation splits; when nothing beats plain retrieval, it says so and "
            "the file recommends plain retrieval. Needs galleria[tune]."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("source", metavar="FOLDER|STORE", help="labelled image folder or store file")
    parser.add_argument("--out", required=True, metavar="FILE", help="settings file to write (JSON)")
    parser.add_argument("--trials", default="40", metavar="N", help="trial budget (default: %(default)s)")
    parser.add_argument(
        "--timeout", default=None, metavar="SECONDS", help="stop proposing trials after this long"
    )
    parser.add_argument(
        "--metric",
        default="map@100",
        choices=("map@100", "recall@1", "recall@5", "mrr", "map@r"),
        help="metric to maximise (default: %(default)s)",
    )
    parser.add_argument(
        "--guard",
        default="recall@1",
        choices=("recall@1", "none"),
        help="a setting must not lower this metric on the validation splits (mean - spread of its change "
        "at least -0.005), else plain retrieval wins; none: maximise --metric alone (default: %(default)s)",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        default=None,
        choices=("plain", "aqe", "k-reciprocal", "diffusion", "gnn", "dba"),
        help="settings families to search (default: all)",
    )
    parser.add_argument(
        "--validation-queries",
        default="0.1",
        metavar="N|F",
        help="validation queries per split: a count or a share of the gallery (default: %(default)s)",
    )
    parser.add_argument(
        "--splits", default="3", metavar="N", help="validation splits the lift is measured on (default: 3)"
    )
    parser.add_argument(
        "--seed", default="0", metavar="N", help="seed of the splits and the sampler (default: %(default)s)"
    )
    parser.add_argument(
        "--query-fraction",
        default=None,
        metavar="F",
        help=f"(folder) share held out as evaluate's test queries (default: {DEFAULT_QUERY_FRACTION})",
    )
    add_store_options(parser)
    parser.add_argument("--json", action="store_true", help="print the settings file's content as JSON")
    parser.set_defaults(run=run)


def _validation_queries(text: str) -> int | float:
    if "." in text:
        value = parse_float("--validation-queries", text, maximum=1.0)
        if not 0.0 < value < 1.0:
            raise CliError(f"--validation-queries as a share must lie strictly between 0 and 1, got {text!r}")
        return value
    return parse_int("--validation-queries", text)


def _folder_gallery(args: argparse.Namespace, seed: int) -> tuple[Any, dict[str, str], dict[str, Any]]:
    from galleria.datasets import load_image_folder
    from galleria.store import InMemoryImageEmbeddingStore

    fraction_text = DEFAULT_QUERY_FRACTION if args.query_fraction is None else args.query_fraction
    fraction = parse_float("--query-fraction", fraction_text, maximum=1.0)
    if not 0.0 < fraction < 1.0:
        raise CliError(f"--query-fraction must lie strictly between 0 and 1, got {fraction_text!r}")
    dataset = load_image_folder(args.source)
    try:
        split = dataset.split(query_fraction=fraction, seed=seed)
    except ValueError as error:
        raise CliError(f"cannot split {args.source!r} into test queries and gallery: {error}") from None
    parse_embedder_spec(args.embedder)
    store = InMemoryImageEmbeddingStore(
        split.gallery_paths,
        make_embedder(args.embedder),
        args.index,
        space=args.space,
        skip_errors=args.skip_errors,
        num_workers=parse_int("--workers", args.workers),
    )
    store.build_store(progress=True)
    labels = split.gallery_label_of
    held_out = {"seed": seed, "query_fraction": fraction, "n_test_queries": len(split.query_paths)}
    return store, {path: labels[path] for path in store.paths}, held_out


def run(args: argparse.Namespace) -> int:
    """Tune on the gallery and write the settings file."""
    from galleria.store import InMemoryImageEmbeddingStore
    from galleria.tune import tune

    trials = parse_int("--trials", args.trials)
    timeout = None if args.timeout is None else parse_float("--timeout", args.timeout)
    if timeout is not None and timeout <= 0:
        raise CliError(f"--timeout must be a positive number of seconds, got {args.timeout!r}")
    splits = parse_int("--splits", args.splits)
    if splits > 10:
        raise CliError(f"--splits must be at most 10, got {splits}")
    seed = parse_int("--seed", args.seed, minimum=0)
    validation = _validation_queries(str(args.validation_queries))
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if os.path.isdir(args.out) or not os.path.isdir(out_dir):
        raise CliError(f"--out {args.out!r} must be a file in an existing folder")
    if not os.path.exists(args.source):
        raise CliError(f"FOLDER|STORE {args.source!r} does not exist")
    if os.path.isdir(args.source):
        store, labels, held_out = _folder_gallery(args, seed)
        source = {"kind": "folder", "root": args.source, "test_split": held_out}
    else:
        if args.query_fraction is not None:
            raise CliError("--query-fraction applies to a folder; a store file is all gallery")
        check_existing_file("store file", args.source)
        store = InMemoryImageEmbeddingStore.load_from_disk(args.source)
        labels = {path: os.path.basename(os.path.dirname(path)) for path in store.paths}
        source = {"kind": "store", "path": args.source, "labels": "parent folder name of each path"}
    if len(store) == 0:
        raise CliError("the gallery holds no image; nothing to tune")

    def report(number: int, title: str, value: float) -> None:
        if not args.json:
            print(f"  trial {number:>3}: {value:.4f}  {title}", file=sys.stderr)

    try:
        result = tune(
            store,
            labels,
            metric=args.metric,
            n_trials=trials,
            timeout=timeout,
            methods=args.methods,
            validation_queries=validation,
            n_splits=splits,
            seed=seed,
            on_trial=report,
            guard=None if args.guard == "none" else args.guard,
        )
    except ValueError as error:
        raise CliError(f"cannot tune on {args.source!r}: {error}") from None
    record = {**result.record(), "source": source}
    from galleria.tune.settings import read_settings_file, write_settings

    write_settings(args.out, result.config, record)
    if args.json:
        print_json(read_settings_file(args.out))
        return 0
    print(result.summary())
    print(f"settings: {args.out}")
    return 0
