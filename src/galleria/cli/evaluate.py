"""``galleria evaluate``: the demo's evaluation on any labelled ``root/<label>/<image>`` folder."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._labelled import add_labels_root_option
from galleria.cli._options import (
    add_deprecated_alias,
    add_expand_options,
    add_report_options,
    add_rerank_options,
    add_settings_option,
    add_store_options,
    check_existing_folder,
    embedder_settings,
    index_params,
    make_embedder,
    parse_embedder_spec,
    parse_int,
    settings_config,
)

if TYPE_CHECKING:
    from galleria.datasets import QueryGallerySplit
    from galleria.embedders.base import Embedder
    from galleria.evaluation import RetrievalConfig

__all__ = ["add_parser", "run", "run_evaluation"]

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


def _readable_queries(split: QueryGallerySplit, skip_errors: bool) -> tuple[list[str], list[str], list[str]]:
    """The query paths and labels, without unreadable images when ``skip_errors`` (those are returned too)."""
    if not skip_errors:
        return split.query_paths, split.query_labels, []
    from galleria.images.reading import ImageReadError, read_rgb

    paths: list[str] = []
    labels: list[str] = []
    unreadable: list[str] = []
    for path, label in zip(split.query_paths, split.query_labels, strict=True):
        try:
            read_rgb(path)
        except ImageReadError as error:
            print(f"skipped {path}: {error.reason or error}", file=sys.stderr)
            unreadable.append(path)
            continue
        paths.append(path)
        labels.append(label)
    if not paths:
        raise CliError("no query image could be read; nothing to evaluate")
    return paths, labels, unreadable


def run_evaluation(
    *,
    split: QueryGallerySplit,
    embedder: Embedder,
    index: str,
    space: str,
    index_params: Mapping[str, Any] | None,
    configs: Sequence[RetrievalConfig],
    num_workers: int,
    skip_errors: bool,
    meta: dict[str, Any],
    out: str | None,
    as_json: bool,
    title: str,
    store: Any = None,
    query_vectors: Any = None,
    tuned: bool = False,
    unreadable: Sequence[str] = (),
) -> int:
    """Build the gallery store, run the configurations, print the table or JSON, write the report.

    A ``store`` already built over ``split.gallery_paths`` is used as it is, and ``query_vectors``
    (the stored vectors of ``split.query_paths``) then stand for the query images: nothing is embedded.
    ``tuned`` (settings from ``galleria tune`` are among ``configs``) drops the hint to run it.
    ``unreadable`` lists images left out before the split (reported as skipped).
    """
    from galleria.evaluation import evaluate_retrieval, format_table, results_payload, write_report
    from galleria.store import InMemoryImageEmbeddingStore

    if out is not None and os.path.exists(out) and not os.path.isdir(out):
        raise CliError(f"--report {out!r} is a file; give a folder for report.html and the other files")
    started = time.perf_counter()
    if store is None:
        store = InMemoryImageEmbeddingStore(
            split.gallery_paths,
            embedder,
            index,
            space=space,
            index_params=dict(index_params) if index_params is not None else None,
            skip_errors=skip_errors,
            num_workers=num_workers,
        )
        store.build_store(progress=True)
    if len(store) == 0:
        raise CliError("no gallery image could be read; nothing to evaluate")
    build_seconds = time.perf_counter() - started
    labels = split.gallery_label_of
    gallery_labels = {path: labels[path] for path in store.paths}
    bad_queries: list[str] = []
    if query_vectors is not None:
        query_paths, query_labels = split.query_paths, split.query_labels
    else:
        query_paths, query_labels, bad_queries = _readable_queries(split, skip_errors)
    from galleria.evaluation.report import contact_sheets

    shown: dict[str, list[list[str]]] = {}

    def announce(config: RetrievalConfig) -> None:
        print(f"running {config.title} on {len(query_paths)} queries ...", file=sys.stderr, flush=True)

    def keep(config: RetrievalConfig, lists: list[list[Any]]) -> None:
        if out is not None:
            shown[config.name] = [[candidate.path for candidate in ranked] for ranked in lists]

    queries: Any = query_vectors if query_vectors is not None else query_paths
    results = evaluate_retrieval(
        store, queries, query_labels, gallery_labels, configs, on_config=announce, on_lists=keep
    )
    warnings = _lowering_warnings(results, hint=not tuned)
    skipped = [*map(str, unreadable), *(str(path) for path in store.skipped), *bad_queries]
    meta = {
        **meta,
        "n_queries": len(query_paths),
        "n_gallery": len(store),
        "skipped": skipped,
        "build_seconds": round(build_seconds, 3),
        "total_seconds": round(time.perf_counter() - started, 3),
    }
    if warnings:
        meta["warnings"] = warnings
    if out is not None:
        sheets: list[Any] = []
        compared = ("plain", "plain")
        names = [config.name for config in configs]
        if len(names) > 1:
            # Plain against the re-ranked configuration (the last one), else against αQE.
            other = next((c for c in reversed(configs) if c.rerank), configs[-1])
            compared = ("plain", "re-ranked" if other.rerank else other.name)
            sheets = contact_sheets(
                query_paths, query_labels, shown[names[0]], shown[other.name], gallery_labels
            )
        from galleria.evaluation.per_query import FILE_NAME, query_results

        before_after = (names[0], other.name) if len(names) > 1 else (names[0], names[0])
        per_query = query_results(
            query_paths, query_labels, shown, results, gallery_labels, compared=before_after, title=title
        )
        files = write_report(
            out, results, meta, title=title, sheets=sheets, compared=compared, per_query=per_query
        )
    if as_json:
        print_json(results_payload(results, meta))
    else:
        print(
            f"{title}: {len(query_paths)} queries, {len(store)} gallery images "
            f"(built in {build_seconds:.1f} s, total {meta['total_seconds']:.1f} s)"
        )
        labels = meta.get("dataset", {}).get("labels")
        if labels is not None:
            from galleria.datasets.labels import LabelSummary

            per_label = labels["images_per_label"]
            summary = LabelSummary(labels["n_labels"], per_label["min"], per_label["median"], labels["root"])
            print(f"labels: {summary.line()}")
        print(format_table(results))
        if out is not None:
            print(
                f"report: {files.html} "
                f"(also {files.report.name}, {files.metrics.name}, {files.pr_curve.name}, "
                f"{FILE_NAME}: galleria serve STORE --eval {out})"
            )
    for warning in warnings:
        print(f"galleria {title.split()[1]}: warning: {warning}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    """Evaluate the folder (or the store file's vectors) with the chosen configurations."""
    from galleria.cli._labelled import gallery_of_store, open_source, split_of, split_option
    from galleria.cli._retrieval import config_from_args
    from galleria.embedders import embedder_config
    from galleria.evaluation import RetrievalConfig, standard_configs

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
        configs = standard_configs(
            expand=chosen.query_expansion,
            rerank=chosen.rerank,
            expansion_alpha=chosen.expansion_alpha,
            expansion_neighbors=chosen.expansion_neighbors,
            pool=chosen.pool,
            rerank_method=chosen.rerank_method,
            rerank_params=chosen.rerank_params,
            rerank_preset=chosen.rerank_preset,
        )
    dataset = {
        "root": given,
        "n_images": len(source.paths),
        "n_labels": len(set(source.labels)),
        "labels": source.summary().to_dict(),
        "seed": seed,
        **option,
    }
    extra: dict[str, Any] = {}
    if source.kind == "store":
        from galleria.cli._storefile import read_store_header

        saved = read_store_header(given).get("embedder")
        config = saved.get("config") if isinstance(saved, dict) else None
        space = source.store.space
        embedder_meta: dict[str, Any] = {"spec": f"stored vectors of {given}", **(config or {})}
        extra = {
            "store": gallery_of_store(source, split.gallery_paths, args.index, params),
            "query_vectors": source.store.embeddings_of(split.query_paths),
        }
        embedder: Any = None
        dataset["store"] = given
    else:
        space = args.space
        embedder = make_embedder(args.embedder, **embedder_settings(args))
        embedder_meta = {"spec": args.embedder, **(embedder_config(embedder) or {})}
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


#: A configuration is reported as lowering a metric when it is below plain retrieval by more than this
#: (the margin issue 11 allows Recall@1 to dip; ties of rounding are not a warning).
LOWERING_TOLERANCE = 0.01 + 1e-9


def _lowering_warnings(results: Sequence[Any], *, hint: bool = True) -> list[str]:
    """One line for every configuration whose mAP@100 or Recall@1 is more than 0.01 below plain's.

    With ``hint`` (no ``--settings`` given) a last line points to ``galleria tune``.
    """
    plain = next((result for result in results if result.config.name == "plain"), None)
    if plain is None:
        return []
    lines = []
    for result in results:
        if result is plain:
            continue
        for label, key in (("mAP@100", "map_at_100"), ("Recall@1", "recall_at_1")):
            ours, base = getattr(result, key), getattr(plain, key)
            if base - ours > LOWERING_TOLERANCE:
                lines.append(
                    f"{result.config.title} lowers {label} from {base:.4f} (plain retrieval) to "
                    f"{ours:.4f} on this gallery"
                )
    if lines and hint:
        lines.append("`galleria tune` chooses settings on a validation split of this gallery")
    return lines
