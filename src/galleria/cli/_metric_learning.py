"""``galleria evaluate --protocol metric-learning``: Precision@1, R-precision and MAP@R of a labelled folder.

Every image of the folder is embedded once and queries all the others (each is left out of its
own results): the metric-learning protocol of Musgrave et al. (ECCV 2020), exact search.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from galleria.cli._common import CliError, print_json

__all__ = ["check_not_given", "check_output_paths", "run_metric_learning"]

#: Options of the retrieval protocol that mean nothing here: option → argparse destination.
_RETRIEVAL_ONLY = {
    "--n-queries": "n_queries",
    "--query-fraction": "query_fraction",
    "--expand": "expand",
    "--rerank": "rerank",
    "--alpha": "alpha",
    "--neighbors": "neighbors",
    "--k1": "k1",
    "--k2": "k2",
    "--lambda": "lambda_value",
    "--pool": "pool",
    "--settings": "settings",
}


def check_not_given(args: argparse.Namespace) -> None:
    """Refuse the retrieval protocol's options (a split, αQE, re-ranking) rather than ignore them."""
    for option, dest in _RETRIEVAL_ONLY.items():
        value = getattr(args, dest, None)
        if value not in (None, False):
            raise CliError(
                f"{option} does not apply to --protocol metric-learning (every image queries the rest)"
            )
    if getattr(args, "index_param", None):
        raise CliError("--protocol metric-learning searches exactly; --index-param does not apply")
    if args.index != "exact":
        raise CliError("--protocol metric-learning searches exactly; --index does not apply")
    if args.space == "ip":
        raise CliError(
            "--protocol metric-learning compares by cosine or Euclidean distance: use --space cosine or l2"
        )


def check_output_paths(args: argparse.Namespace) -> None:
    """Refuse a ``--report`` that is a file or a ``--per-query`` that is a directory, before any work."""
    if args.out is not None and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise CliError(f"--report {args.out!r} is a file; give a folder for metrics.json")
    if args.per_query is not None and os.path.isdir(args.per_query):
        raise CliError(f"--per-query {args.per_query!r} is a directory; give a .csv file path")
    from galleria._files import check_output_path

    if args.per_query is not None:  # a device, FIFO, socket or symbolic link is never replaced
        check_output_path(args.per_query, "--per-query")
    if args.out is not None:
        check_output_path(os.path.join(args.out, "metrics.json"), "--report")


def _vectors(
    args: argparse.Namespace, source: Any, image_dir: str, workers: int
) -> tuple[str, list[str], Any, list[str]]:
    """The space, paths, vectors and unreadable images: a store file's vectors, or the images embedded."""
    from galleria.cli._embedder_options import make_embedder
    from galleria.store import InMemoryImageEmbeddingStore

    if source.kind == "store":
        space = source.store.space
        if space == "ip":
            raise CliError(
                f"--protocol metric-learning compares by cosine or Euclidean distance; the store "
                f"{image_dir!r} is in the ip space"
            )
        paths = list(source.paths)
        return space, paths, source.store.embeddings_of(paths), []
    store = InMemoryImageEmbeddingStore(
        source.paths,
        make_embedder(args.embedder),
        "exact",
        space=args.space,
        skip_errors=args.skip_errors,
        num_workers=workers,
    )
    store.build_store(progress=True)
    return args.space, store.paths, store.embeddings, [str(path) for path in store.skipped]


def _print_figures(image_dir: str, n_images: int, n_labels: int, metric: str, result: Any) -> None:
    print(
        f"galleria evaluate {image_dir} --protocol metric-learning: {n_images} images, "
        f"{n_labels} labels, {metric} (each image queries the others)"
    )
    for name, value in (
        ("queries evaluated / skipped", f"{result.valid_queries} / {result.skipped_queries}"),
        ("Precision@1", f"{result.precision_at_1:.4f}"),
        ("R-precision", f"{result.r_precision:.4f}"),
        ("MAP@R", f"{result.map_at_r:.4f}"),
    ):
        print(f"{name:<28} {value}")


def run_metric_learning(args: argparse.Namespace, image_dir: str, workers: int, meta: dict[str, Any]) -> int:
    """Embed every image (or take a store file's vectors), score them, print and write what was asked for."""
    from galleria.cli._labelled import open_source
    from galleria.evaluation.protocols import (
        TOP,
        json_ready,
        metric_learning_report,
        per_query_header,
        write_metrics_json,
        write_per_query_csv,
    )
    from galleria.metrics.metric_learning import metric_learning_evaluate

    check_not_given(args)
    check_output_paths(args)
    source = open_source(args, image_dir, "IMAGE_DIR|STORE")
    started = time.perf_counter()
    label_of = dict(zip(source.paths, source.labels, strict=True))
    space, paths, embeddings, skipped = _vectors(args, source, image_dir, workers)
    if len(paths) < 2:
        raise CliError("fewer than two images could be read; nothing to evaluate")
    labels = np.array([label_of[path] for path in paths])
    detail = args.out is not None or args.per_query is not None
    metric = "euclidean" if space == "l2" else "cosine"
    result = metric_learning_evaluate(
        embeddings, labels, metric=metric, full_ranking=detail, top_k=TOP if detail else 0
    )
    figures, rows = metric_learning_report(result)
    if not detail:
        figures.pop("pr_curve")
    payload = {
        **meta,
        "protocol": "metric-learning",
        "metric": metric,
        "n_images": len(paths),
        "skipped": skipped,
        "total_seconds": round(time.perf_counter() - started, 3),
        **figures,
    }
    if args.per_query is not None:
        header = per_query_header("metric-learning")
        header.insert(1, "path")
        write_per_query_csv(args.per_query, header, [[row[0], paths[row[0]], *row[1:]] for row in rows])
    if args.out is not None:
        write_metrics_json(args.out, payload)
    if args.json:
        print_json(json_ready(payload))
    else:
        _print_figures(image_dir, len(paths), len(set(labels.tolist())), metric, result)
    for path in skipped:
        print(f"skipped unreadable image: {path}", file=sys.stderr)
    return 0
