"""The evaluation ``galleria evaluate`` and ``galleria demo`` run: build the gallery, run the
configurations, print the table or JSON, and write the report folder."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from galleria.cli._common import CliError, print_json

if TYPE_CHECKING:
    from galleria.datasets import QueryGallerySplit
    from galleria.embedders.base import Embedder
    from galleria.evaluation import RetrievalConfig

__all__ = ["LOWERING_TOLERANCE", "lowering_warnings", "run_evaluation"]


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


def _gallery_store(split: QueryGallerySplit, embedder: Embedder, options: dict[str, Any], store: Any) -> Any:
    """The gallery store: ``store`` when given (built from a store file), else the gallery embedded now."""
    from galleria.store import InMemoryImageEmbeddingStore

    if store is None:
        store = InMemoryImageEmbeddingStore(split.gallery_paths, embedder, **options)
        store.build_store(progress=True)
    if len(store) == 0:
        raise CliError("no gallery image could be read; nothing to evaluate")
    return store


def _write_report(
    out: str, results: Any, meta: dict[str, Any], shown: dict[str, list[list[str]]], queries: Any, title: str
) -> Any:
    """The report folder: contact sheets of plain against the re-ranked (else the last) configuration,
    the per-query results, the metrics; returns the files written."""
    from galleria.evaluation import write_report
    from galleria.evaluation.per_query import query_results
    from galleria.evaluation.sheets import contact_sheets

    query_paths, query_labels, gallery_labels, configs = queries
    sheets: list[Any] = []
    compared = ("plain", "plain")
    names = [config.name for config in configs]
    if len(names) > 1:
        # Plain against the re-ranked configuration (the last one), else against αQE.
        other = next((c for c in reversed(configs) if c.rerank), configs[-1])
        compared = ("plain", "re-ranked" if other.rerank else other.name)
        sheets = contact_sheets(query_paths, query_labels, shown[names[0]], shown[other.name], gallery_labels)
    before_after = (names[0], other.name) if len(names) > 1 else (names[0], names[0])
    per_query = query_results(
        query_paths,
        query_labels,
        shown,
        results,
        gallery_labels,
        compared=before_after,
        title=title,
        warnings=meta.get("warnings", ()),
    )
    return write_report(
        out, results, meta, title=title, sheets=sheets, compared=compared, per_query=per_query
    )


def _print_summary(
    title: str, results: Any, meta: dict[str, Any], out: str | None, files: Any, build_seconds: float
) -> None:
    """The text output: sizes and times, the labels, the table, and where the report went."""
    from galleria.evaluation import FILE_NAME, format_table

    print(
        f"{title}: {meta['n_queries']} queries, {meta['n_gallery']} gallery images "
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
    from galleria.evaluation import evaluate_retrieval, results_payload

    if out is not None and os.path.exists(out) and not os.path.isdir(out):
        raise CliError(f"--report {out!r} is a file; give a folder for report.html and the other files")
    started = time.perf_counter()
    params = dict(index_params) if index_params is not None else None
    options = {"search_index": index, "space": space, "index_params": params}
    store = _gallery_store(
        split, embedder, {**options, "skip_errors": skip_errors, "num_workers": num_workers}, store
    )
    build_seconds = time.perf_counter() - started
    labels = split.gallery_label_of
    gallery_labels = {path: labels[path] for path in store.paths}
    bad_queries: list[str] = []
    if query_vectors is not None:
        query_paths, query_labels = split.query_paths, split.query_labels
    else:
        query_paths, query_labels, bad_queries = _readable_queries(split, skip_errors)
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
    warnings = lowering_warnings(results, hint=not tuned)
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
    files = None
    if out is not None:
        answered = (query_paths, query_labels, gallery_labels, configs)
        files = _write_report(out, results, meta, shown, answered, title)
    if as_json:
        print_json(results_payload(results, meta))
    else:
        _print_summary(title, results, meta, out, files, build_seconds)
    for warning in warnings:
        print(f"galleria {title.split()[1]}: warning: {warning}", file=sys.stderr)
    return 0


#: A configuration is reported as lowering a metric when it is below plain retrieval by more than this
#: (the margin issue 11 allows Recall@1 to dip; ties of rounding are not a warning).
LOWERING_TOLERANCE = 0.01 + 1e-9


def lowering_warnings(results: Sequence[Any], *, hint: bool = True) -> list[str]:
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
