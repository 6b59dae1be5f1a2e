"""The protocols of ``galleria evaluate-scores``: Recall@K, re-identification, revisited, metric learning."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from galleria.cli._common import CliError
from galleria.cli._parse import parse_int
from galleria.cli._score_files import (
    _JSON_BYTES_PER_CELL,
    _JSON_FLOOR,
    _METRIC_OF_SPACE,
    _as_similarities,
    _format_rows,
    _fraction,
    _load_json,
    _load_npy,
    _matrix,
    _option_names,
    _table,
    evaluate,
)


def _run_recall(args: argparse.Namespace, detail: bool) -> tuple[dict[str, Any], list[list[Any]], str]:
    from galleria.metrics import as_positives

    ks = [parse_int("--ks", text) for text in (args.ks or ["1", "5", "10"])]
    raw, option, higher = _matrix(args)
    ground_truth = _load_npy("--ground-truth", args.ground_truth)
    if higher:
        figures = evaluate(raw, np.asarray(ground_truth), ks)
        matrix = raw
    else:
        matrix = _as_similarities(raw, option, higher)
        figures = evaluate(matrix, np.asarray(ground_truth), ks)
    rows: list[list[Any]] = []
    extra: dict[str, Any] = {}
    if detail:
        from galleria.evaluation.protocols import recall_detail

        positives = as_positives("--ground-truth", np.asarray(ground_truth), *matrix.shape)
        extra, rows = recall_detail(np.asarray(matrix), positives)
    return {**figures, **extra}, rows, _table(figures)


def _run_reid(args: argparse.Namespace, detail: bool) -> tuple[dict[str, Any], list[list[Any]], str]:
    from galleria.evaluation.protocols import TOP, reid_report
    from galleria.metrics.reid import reid_evaluate

    raw, option, higher = _matrix(args)
    labels = [
        np.asarray(_load_npy(f"--{name}", getattr(args, name.replace("-", "_"))))
        for name in ("query-ids", "gallery-ids", "query-cameras", "gallery-cameras")
    ]
    max_rank = parse_int("--max-rank", 50 if args.max_rank is None else args.max_rank)
    ignore = (
        [-1]
        if args.ignore_ids is None
        else [parse_int("--ignore-ids", x, minimum=-(2**63)) for x in args.ignore_ids]
    )
    try:
        result = reid_evaluate(
            raw,
            *labels,
            max_rank=max_rank,
            ignore_ids=ignore,
            higher_is_better=higher,
            top_k=TOP if detail else 0,
        )
    except (TypeError, ValueError) as error:
        raise type(error)(_option_names(str(error), option)) from None
    figures, rows = reid_report(result)
    payload = {"n_queries": len(result.ap), "n_gallery": int(np.asarray(labels[1]).shape[0]), **figures}
    lines = [("queries (evaluated / skipped)", f"{result.valid_queries} / {result.skipped_queries}")]
    lines += [("mAP", _fraction(result.mAP)), ("mINP", _fraction(result.mINP))]
    lines += [(f"CMC@{k}", _fraction(float(result.cmc[k - 1]))) for k in (1, 5, 10, 20) if k <= max_rank]
    return payload, rows, _format_rows(lines)


def _run_revisited(args: argparse.Namespace, detail: bool) -> tuple[dict[str, Any], list[list[Any]], str]:
    from galleria.evaluation.protocols import revisited_report
    from galleria.metrics import as_ks
    from galleria.metrics.revisited import check_revisited_ground_truth

    raw, option, higher = _matrix(args)
    matrix = _as_similarities(raw, option, higher)
    n, m = matrix.shape
    document = _load_json("--ground-truth", args.ground_truth, _JSON_FLOOR + _JSON_BYTES_PER_CELL * n * m)
    if isinstance(document, dict) and "gnd" in document:
        document = document["gnd"]
    truth = check_revisited_ground_truth("--ground-truth", document, n, m)
    kappas = as_ks("--kappas", [parse_int("--kappas", k) for k in (args.kappas or ["1", "5", "10"])])
    figures, rows = revisited_report(matrix, truth, kappas)
    payload = {"n_queries": n, "n_gallery": m, "kappas": kappas, **figures}
    lines = []
    for setting in ("easy", "medium", "hard"):
        cells = [f"mAP {_fraction(figures[setting]['mAP'])}"]
        cells += [f"mP@{k} {_fraction(figures[setting][f'mP@{k}'])}" for k in kappas]
        lines.append((setting, "  ".join(cells) + f"  ({figures[setting]['valid_queries']} queries)"))
    return payload, rows, _format_rows(lines)


def _run_metric_learning(
    args: argparse.Namespace, detail: bool
) -> tuple[dict[str, Any], list[list[Any]], str]:
    from galleria.evaluation.protocols import TOP, metric_learning_report
    from galleria.metrics.metric_learning import metric_learning_evaluate

    embeddings = _load_npy("--embeddings", args.embeddings)
    labels = np.asarray(_load_npy("--labels", args.labels))
    if (args.reference is None) != (args.reference_labels is None):
        raise CliError("--reference and --reference-labels go together")
    reference = None if args.reference is None else _load_npy("--reference", args.reference)
    reference_labels = (
        None
        if args.reference_labels is None
        else np.asarray(_load_npy("--reference-labels", args.reference_labels))
    )
    result = metric_learning_evaluate(
        embeddings,
        labels,
        reference=reference,
        reference_labels=reference_labels,
        metric=_METRIC_OF_SPACE[args.metric or "cosine"],
        full_ranking=detail,
        top_k=TOP if detail else 0,
    )
    figures, rows = metric_learning_report(result)
    if not detail:
        figures.pop("pr_curve")
    metric = _METRIC_OF_SPACE[args.metric or "cosine"]
    payload = {"n_queries": len(result.n_positives), "metric": metric, **figures}
    lines = [
        ("queries (evaluated / skipped)", f"{result.valid_queries} / {result.skipped_queries}"),
        ("Precision@1", _fraction(result.precision_at_1)),
        ("R-precision", _fraction(result.r_precision)),
        ("MAP@R", _fraction(result.map_at_r)),
    ]
    return payload, rows, _format_rows(lines)
