"""``galleria evaluate``: the demo's evaluation on any labelled ``root/<label>/<image>`` folder."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from galleria._moved import moved_names
from galleria.cli._common import CliError, add_command
from galleria.cli._embedder_options import embedder_settings, make_embedder, parse_embedder_spec
from galleria.cli._labelled import add_labels_root_option
from galleria.cli._parse import add_deprecated_alias, check_existing_folder, parse_int
from galleria.cli._rerank_options import (
    add_expand_options,
    add_report_options,
    add_rerank_options,
    add_settings_option,
    settings_config,
)
from galleria.cli._store_options import add_store_options, index_params

if TYPE_CHECKING:
    from galleria.datasets import QueryGallerySplit

__all__ = ["add_parser", "run", "run_evaluation"]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(__name__, {"LOWERING_TOLERANCE": "galleria.cli._evaluation_run"})

# Moved to galleria.cli._evaluation_run (galleria 0.3); importable from here as before.
from galleria.cli._evaluation_run import lowering_warnings
from galleria.cli._evaluation_run import run_evaluation as run_evaluation

_lowering_warnings = lowering_warnings

_EXAMPLES = """\
  galleria evaluate animals/                                   # plain retrieval, 10% of images as queries
  galleria evaluate animals/ --n-queries 200 --expand --rerank # the demo's three configurations
  galleria evaluate animals/ --query-fraction 0.2 --rerank --k1 30 --lambda 0.2 --report report/
  galleria evaluate animals/ --embedder clip --index hnsw --expand --json
  galleria evaluate animals/ --protocol metric-learning --per-query queries.csv --report report/
  galleria evaluate animals/ --settings tuned.json             # plain vs the settings `galleria tune` chose
  galleria evaluate animals.safetensors --expand --rerank      # a built store: its vectors, no re-embedding
"""

#: Share of images used as queries when neither --n-queries nor --query-fraction is given.
DEFAULT_QUERY_FRACTION = 0.1


def add_parser(subparsers: Any) -> None:
    """Register ``galleria evaluate``."""
    parser = add_command(
        subparsers,
        "evaluate",
        help="measure retrieval quality on a labelled image folder",
        description=(
            "Split a labelled folder (IMAGE_DIR/<label>/<image>), or a store file built from one, into "
            "queries and gallery, stratified by label and seeded; index the gallery; and report "
            " Recall@1, Recall@5, mAP@100, MRR and ms per "
            "query for plain retrieval, plus alpha query expansion with --expand and k-reciprocal "
            "re-ranking with --rerank (on the expanded query's pool when both are given). A result is "
            "relevant when it has the query's label. A store file is evaluated on its stored vectors "
            "(nothing is embedded again); an image's label is its first folder under the paths' common "
            "root. With --settings, the split must be the one the settings were tuned beside."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument(
        "image_dir",
        metavar="IMAGE_DIR|STORE",
        help="labelled image folder IMAGE_DIR/<label>/<image>, or a store file built from one",
    )
    split = parser.add_mutually_exclusive_group()
    split.add_argument("--n-queries", default=None, metavar="N", help="number of query images")
    add_deprecated_alias(split, "--queries", dest="n_queries", replacement="--n-queries N")
    split.add_argument(
        "--query-fraction",
        default=None,
        metavar="F",
        help=f"share of images used as queries, in (0, 1) (default: {DEFAULT_QUERY_FRACTION})",
    )
    parser.add_argument(
        "--seed", default="0", metavar="N", help="seed of the query split (default: %(default)s)"
    )
    add_store_options(parser)
    add_expand_options(parser)
    add_rerank_options(parser)
    add_report_options(parser)
    add_settings_option(parser)
    add_labels_root_option(parser)
    parser.add_argument(
        "--protocol",
        default="retrieval",
        choices=("retrieval", "metric-learning"),
        help="retrieval (queries vs gallery, the default) or metric-learning (every image queries the rest: "
        "Precision@1, R-precision, MAP@R)",
    )
    parser.add_argument(
        "--per-query",
        default=None,
        metavar="FILE.csv",
        help="metric-learning: write per-query detail (positives, first-positive rank, AP, top-10) as CSV",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Evaluate the folder (or the store file's vectors) with the chosen configurations."""
    from galleria.cli._labelled import open_source, split_of, split_option
    from galleria.cli._retrieval import config_from_args
    from galleria.evaluation import RetrievalConfig

    seed = parse_int("--seed", args.seed, minimum=0)
    workers = parse_int("--workers", args.workers)
    params = index_params(args)
    given = args.image_dir
    if os.path.isdir(given) or not os.path.exists(given):
        check_existing_folder("IMAGE_DIR|STORE", given)
        parse_embedder_spec(args.embedder)
    if args.protocol == "metric-learning":
        from galleria.cli._metric_learning import run_metric_learning

        meta = {"dataset": {"root": given}, "embedder": {"spec": args.embedder}}
        return run_metric_learning(args, given, workers, meta)
    if args.per_query is not None:
        raise CliError("--per-query needs --protocol metric-learning (for scores: galleria evaluate-scores)")
    tuned = settings_config(args)
    chosen = tuned if tuned is not None else config_from_args(args, "options")
    option = split_option(args, DEFAULT_QUERY_FRACTION)
    source = open_source(args, given, "IMAGE_DIR|STORE")
    split = split_of(source, option, seed)
    if tuned is not None:
        _check_settings_split(args.settings, seed, option, split)
        configs = [RetrievalConfig("plain"), tuned]
    else:  # the values left out are read from the split's gallery, by the Searcher, as everywhere
        configs = _standard_configs(chosen)
    dataset = {
        "root": given,
        "n_images": len(source.paths),
        "n_labels": len(set(source.labels)),
        "labels": source.summary().to_dict(),
        "seed": seed,
        **option,
    }
    space, embedder, embedder_meta, extra = _embedding_side(args, source, split, params)
    if source.kind == "store":
        dataset["store"] = given
    meta = {
        "dataset": dataset,
        "embedder": embedder_meta,
        "index": {"name": args.index, "space": space, "params": params or {}},
    }
    return run_evaluation(
        split=split,
        embedder=embedder,
        index=args.index,
        space=space,
        index_params=params,
        configs=configs,
        num_workers=workers,
        skip_errors=args.skip_errors,
        meta=meta,
        out=args.out,
        as_json=args.json,
        title=f"galleria evaluate {given}",
        tuned=tuned is not None,
        unreadable=source.unreadable,
        **extra,
    )


def _standard_configs(chosen: Any) -> list[Any]:
    """Plain retrieval, then αQE and re-ranking as the options (or the preset) ask."""
    from galleria.evaluation import standard_configs

    return standard_configs(
        expand=chosen.query_expansion,
        rerank=chosen.rerank,
        expansion_alpha=chosen.expansion_alpha,
        expansion_neighbors=chosen.expansion_neighbors,
        pool=chosen.pool,
        rerank_method=chosen.rerank_method,
        rerank_params=chosen.rerank_params,
        rerank_preset=chosen.rerank_preset,
    )


def _embedding_side(
    args: argparse.Namespace, source: Any, split: Any, params: Any
) -> tuple[str, Any, dict[str, Any], dict[str, Any]]:
    """The space, the embedder, what the report records of it, and (for a store file) the gallery
    store and the queries' stored vectors: a store file's vectors are used, nothing is embedded."""
    from galleria.cli._labelled import gallery_of_store
    from galleria.embedders import embedder_config

    if source.kind != "store":
        embedder = make_embedder(args.embedder, **embedder_settings(args))
        return args.space, embedder, {"spec": args.embedder, **(embedder_config(embedder) or {})}, {}
    from galleria.store.persistence import read_store_header

    given = args.image_dir
    saved = read_store_header(given).get("embedder")
    config = saved.get("config") if isinstance(saved, dict) else None
    extra = {
        "store": gallery_of_store(source, split.gallery_paths, args.index, params),
        "query_vectors": source.store.embeddings_of(split.query_paths),
    }
    return source.store.space, None, {"spec": f"stored vectors of {given}", **(config or {})}, extra


def _check_settings_split(path: str, seed: int, option: dict[str, Any], split: QueryGallerySplit) -> None:
    """CliError when the settings file was tuned on these test queries, another split or gallery."""
    from galleria.tune.provenance import check_tuned_split
    from galleria.tune.settings import read_settings_file

    record = read_settings_file(path).get("tuned_on")
    if record is None:
        print(
            f"galleria evaluate: warning: settings file {path!r} does not record the split it was tuned on "
            "(written by an older galleria), so it cannot be checked for test queries it was tuned on",
            file=sys.stderr,
        )
        return
    try:
        check_tuned_split(
            record,
            seed=seed,
            split_option=option,
            test_paths=split.query_paths,
            gallery_paths=split.gallery_paths,
            where=f"settings file {path!r}",
        )
    except ValueError as error:
        raise CliError(str(error)) from None
