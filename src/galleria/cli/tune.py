"""``galleria tune``: choose αQE and re-ranking settings on a validation split of the user's own gallery."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._embedder_options import embedder_settings, make_embedder, parse_embedder_spec
from galleria.cli._labelled import add_labels_root_option
from galleria.cli._parse import add_deprecated_alias, parse_float, parse_int
from galleria.cli._store_options import add_store_options, index_params
from galleria.rerank.registry import RERANK_METHODS

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria tune animals/ --out tuned.json              # holds out evaluate's test queries, tunes on the rest
  galleria tune animals/ --out tuned.json --trials 80 --timeout 600 --metric recall@1
  galleria tune animals.safetensors --out tuned.json   # a store built from animals/: no re-embedding
  galleria evaluate animals/ --settings tuned.json     # then measure it on the held-out test queries
  galleria evaluate animals.safetensors --settings tuned.json
"""

#: The test split ``galleria evaluate`` draws by default (held out here so tuning never sees it).
DEFAULT_QUERY_FRACTION = 0.1
#: Validation queries per split, as a share of the tuning gallery, when none is given.
DEFAULT_VALIDATION = 0.1


def add_parser(subparsers: Any) -> None:
    """Register ``galleria tune``."""
    parser = add_command(
        subparsers,
        "tune",
        help="choose αQE and re-ranking settings on your own labelled gallery",
        description=(
            "Search plain retrieval, alpha query expansion and the re-ranking methods "
            f"({', '.join(RERANK_METHODS)}; `galleria methods` describes them) with their parameters, "
            "using Optuna's seeded TPE sampler, on a validation split of a labelled gallery, and write the "
            "best settings to --out (a JSON file "
            "that evaluate / search / serve take with --settings). FOLDER|STORE is a labelled folder "
            "(FOLDER/<label>/<image>) or a store file built from one (its stored vectors are used, nothing "
            "is embedded again; each image's label is its first folder under the paths' common root). The "
            "test queries `galleria evaluate` draws with the same --seed and --n-queries / --query-fraction "
            "are held out first, so tuning never sees them, and the settings file records that split so "
            "that `evaluate --settings` refuses another one. The lift over plain retrieval is "
            "reported on --splits validation splits; when nothing beats plain retrieval, it says so and "
            "the file recommends plain retrieval. Needs the tune extra (pip install -e '.[tune]')."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("source", metavar="FOLDER|STORE", help="labelled image folder or store file")
    parser.add_argument("--out", required=True, metavar="FILE", help="settings file to write (JSON)")
    _add_search_options(parser)
    _add_split_options(parser)
    add_store_options(parser)
    add_labels_root_option(parser)
    parser.add_argument("--json", action="store_true", help="print the settings file's content as JSON")
    parser.set_defaults(run=run)


def _add_search_options(parser: argparse.ArgumentParser) -> None:
    """What is searched and maximised: --trials, --timeout, --metric, --guard and --methods."""
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
        choices=("plain", "aqe", *RERANK_METHODS),  # every declared method, plugins included
        help="settings families to search (default: all)",
    )


def _add_split_options(parser: argparse.ArgumentParser) -> None:
    """The validation splits, the seed and the test queries held out."""
    validation = parser.add_mutually_exclusive_group()
    validation.add_argument(
        "--n-validation-queries",
        default=None,
        metavar="N",
        help="validation queries per split, a count (default: a share, --validation-fraction)",
    )
    validation.add_argument(
        "--validation-fraction",
        default=None,
        metavar="F",
        help=f"validation queries per split, a share of the gallery in (0, 1) "
        f"(default: {DEFAULT_VALIDATION})",
    )
    add_deprecated_alias(
        validation,
        "--validation-queries",
        dest="validation_queries",
        replacement="--n-validation-queries N or --validation-fraction F",
    )
    parser.add_argument(
        "--splits", default="3", metavar="N", help="validation splits the lift is measured on (default: 3)"
    )
    parser.add_argument(
        "--seed",
        default="0",
        metavar="N",
        help="seed of the test split, the validation splits and the sampler (default: %(default)s)",
    )
    held_out = parser.add_mutually_exclusive_group()
    held_out.add_argument(
        "--n-queries", default=None, metavar="N", help="test queries held out (as evaluate --n-queries draws)"
    )
    held_out.add_argument(
        "--query-fraction",
        default=None,
        metavar="F",
        help=f"share held out as evaluate's test queries (default: {DEFAULT_QUERY_FRACTION})",
    )


def _validation_queries(args: argparse.Namespace) -> int | float:
    """The validation queries per split: ``--n-validation-queries`` N, ``--validation-fraction`` F,
    or the deprecated ``--validation-queries N|F``."""
    old = getattr(args, "validation_queries", None)
    if args.n_validation_queries is not None:
        return parse_int("--n-validation-queries", args.n_validation_queries)
    if old is not None and "." not in str(old):
        return parse_int("--validation-queries", old)
    option = "--validation-fraction" if old is None else "--validation-queries"
    text = str(DEFAULT_VALIDATION if args.validation_fraction is None else args.validation_fraction)
    text = text if old is None else str(old)
    try:
        value = parse_float(option, text, maximum=1.0)
    except CliError:
        value = 0.0
    if not 0.0 < value < 1.0:
        raise CliError(f"{option} must be a share strictly between 0 and 1, got {text!r}")
    return value


def _numbers(args: argparse.Namespace) -> tuple[int, float | None, int, int, int | float]:
    """The checked ``--trials``, ``--timeout``, ``--splits``, ``--seed`` and validation queries."""
    trials = parse_int("--trials", args.trials)
    timeout = None if args.timeout is None else parse_float("--timeout", args.timeout)
    if timeout is not None and timeout <= 0:
        raise CliError(f"--timeout must be a positive number of seconds, got {args.timeout!r}")
    splits = parse_int("--splits", args.splits)
    if splits > 10:
        raise CliError(f"--splits must be at most 10, got {splits}")
    seed = parse_int("--seed", args.seed, minimum=0)
    return trials, timeout, splits, seed, _validation_queries(args)


def _check_out(args: argparse.Namespace) -> None:
    from galleria._files import check_output_path

    out_dir = os.path.dirname(os.path.abspath(args.out))
    if os.path.isdir(args.out) or not os.path.isdir(out_dir):
        raise CliError(f"--out {args.out!r} must be a file in an existing folder")
    check_output_path(args.out, "--out")  # a device, FIFO, socket or symbolic link is never replaced


def _tuning_gallery(args: argparse.Namespace, source: Any, split: Any, params: Any) -> Any:
    """The gallery tuned on: the store's vectors of the gallery paths, or the folder's images embedded."""
    from galleria.cli._labelled import gallery_of_store
    from galleria.store import InMemoryImageEmbeddingStore

    if source.kind == "store":
        store = gallery_of_store(source, split.gallery_paths, args.index, params)
    else:
        store = InMemoryImageEmbeddingStore(
            split.gallery_paths,
            make_embedder(args.embedder, **embedder_settings(args)),
            args.index,
            space=args.space,
            index_params=params,
            skip_errors=args.skip_errors,
            num_workers=parse_int("--workers", args.workers),
        )
        store.build_store(progress=True)
    if len(store) == 0:
        raise CliError("the gallery holds no image; nothing to tune")
    return store


def _source_record(
    args: argparse.Namespace, source: Any, summary: Any, held_out: dict[str, Any]
) -> dict[str, Any]:
    """What the settings file records of the source: its kind and place, its labels, the test split."""
    where = {"root": args.source} if source.kind == "folder" else {"path": args.source}
    return {
        "kind": source.kind,
        **where,
        "labels": f"first folder under {source.root}",
        "label_summary": summary.to_dict(),
        "test_split": held_out,
    }


def run(args: argparse.Namespace) -> int:
    """Tune on the gallery (the test queries held out) and write the settings file."""
    from galleria.cli._labelled import open_source, split_of, split_option
    from galleria.tune import tune_gallery
    from galleria.tune.provenance import split_record
    from galleria.tune.settings import read_settings_file, write_settings

    trials, timeout, splits, seed, validation = _numbers(args)
    params = index_params(args)
    _check_out(args)
    if os.path.isdir(args.source):
        parse_embedder_spec(args.embedder)
    option = split_option(args, DEFAULT_QUERY_FRACTION)
    source = open_source(args, args.source, "FOLDER|STORE")
    split = split_of(source, option, seed)
    store = _tuning_gallery(args, source, split, params)
    labels = {path: split.gallery_label_of[path] for path in store.paths}
    held_out = {"seed": seed, **option, "n_test_queries": len(split.query_paths)}
    summary = source.summary()
    record_source = _source_record(args, source, summary, held_out)
    if not args.json:
        print(f"labels: {summary.line()}", file=sys.stderr)

    def report(number: int, title: str, value: float) -> None:
        if not args.json:
            print(f"  trial {number:>3}: {value:.4f}  {rounded_for_reading(title)}", file=sys.stderr)

    try:
        result = tune_gallery(
            store, labels, metric=args.metric, n_trials=trials, timeout=timeout, methods=args.methods,
            validation_queries=validation, n_splits=splits, seed=seed, on_trial=report,
            guard=None if args.guard == "none" else args.guard,
        )  # fmt: skip
    except ValueError as error:
        raise CliError(f"cannot tune on {args.source!r}: {error}") from None
    tuned_on = split_record(
        seed=seed, split_option=option, test_paths=split.query_paths, tuned_paths=list(store.paths)
    )
    write_settings(
        args.out, result.config, {**result.record(), "source": record_source, "tuned_on": tuned_on}
    )
    if args.json:
        print_json(read_settings_file(args.out))
        return 0
    print(rounded_for_reading(result.summary()))
    print(
        f"settings: {args.out} (tuned on {len(store)} images; {len(split.query_paths)} test queries "
        f"held out: evaluate with the same --seed {seed} and {_split_words(option)})"
    )
    return 0


#: A decimal number with more digits than a reader needs (the settings file keeps them all).
_LONG_NUMBER = re.compile(r"(?<![\w.])\d+\.\d{5,}(?:e[-+]?\d+)?")


def rounded_for_reading(text: str) -> str:
    """``text`` with every number of more than four decimals rounded to four significant digits.

    Examples
    --------
    >>> rounded_for_reading("diffusion (alpha=0.9876543210123, k=50, pool=200): 0.6125")
    'diffusion (alpha=0.9877, k=50, pool=200): 0.6125'
    """
    return _LONG_NUMBER.sub(lambda match: f"{float(match.group()):.4g}", text)


def _split_words(option: dict[str, Any]) -> str:
    if "n_queries" in option:
        return f"--n-queries {option['n_queries']}"
    return f"--query-fraction {option['query_fraction']:g}"
