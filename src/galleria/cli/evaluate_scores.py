"""``galleria evaluate-scores``: the figures of a saved score matrix under one of four protocols.

``retrieval`` (the default; formerly ``recall``): Recall@K, MRR and median rank. ``reid``: CMC,
mAP and mINP with the camera and junk rules. ``revisited``: Easy / Medium / Hard mAP and mP@k.
``metric-learning``: Precision@1, R-precision and MAP@R from embeddings and labels.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._metric_learning import check_output_paths
from galleria.cli._options import add_deprecated_alias, check_existing_file, parse_int

__all__ = ["add_parser", "run"]

PROTOCOLS = ("retrieval", "reid", "revisited", "metric-learning")
#: Old protocol names, still accepted with a warning: old → new.
_DEPRECATED_PROTOCOLS = {"recall": "retrieval"}
#: ``--space`` → the metric-learning core's name of the distance.
_METRIC_OF_SPACE = {"cosine": "cosine", "l2": "euclidean"}

_EXAMPLES = """\
  galleria evaluate-scores --scores sims.npy --ground-truth gt.npy
  galleria evaluate-scores --scores sims.npy --ground-truth gt.npy --ks 1 5 10 50 --json
  galleria evaluate-scores --protocol reid --distances dist.npy --query-ids qid.npy \\
      --gallery-ids gid.npy --query-cameras qcam.npy --gallery-cameras gcam.npy --per-query q.csv
  galleria evaluate-scores --protocol revisited --scores sims.npy --ground-truth gnd_roxford5k.json
  galleria evaluate-scores --protocol metric-learning --embeddings emb.npy --labels labels.npy \\
      --report report/
"""

#: Bytes a ground-truth JSON file may hold per query × gallery cell (and a floor), so that the file
#: cannot make the command read more than the score matrix justifies.
_JSON_BYTES_PER_CELL = 16
_JSON_FLOOR = 1 << 20


def add_parser(subparsers: Any) -> None:
    """Register ``galleria evaluate-scores``."""
    parser = add_command(
        subparsers,
        "evaluate-scores",
        help="Recall@K, re-identification, revisited Oxford/Paris or metric-learning figures of saved scores",
        description=(
            "Score saved arrays (.npy, never unpickled) under one protocol (docs/metrics.md).\n\n"
            "retrieval: --scores/--distances and --ground-truth GT.npy. Recall@K (0-indexed ranks, ties to\n"
            "  the lower gallery index, rounded to 4 decimals), MRR, median and mean rank. The ground\n"
            "  truth is one gallery index per query (shape (n,)), a set of indices per query (shape\n"
            "  (n, p)), or an (n, m) boolean mask; with several positives a query counts its best one.\n"
            "reid: --scores/--distances, --query-ids, --gallery-ids, --query-cameras, --gallery-cameras\n"
            "  (integer .npy). CMC, mAP, mINP; the gallery items of the query's identity and camera,\n"
            "  and those of --ignore-ids, are removed.\n"
            "revisited: --scores/--distances and --ground-truth GND.json (a list of {easy, hard, junk}\n"
            '  mappings, or an object with that list under "gnd"). Easy/Medium/Hard mAP and mP@k.\n'
            "metric-learning: --embeddings, --labels [--reference, --reference-labels] [--space].\n"
            "  Precision@1, R-precision, MAP@R (each query is left out of its own results when there\n"
            "  is no reference).\n\n"
            "--scores are similarities (higher is better), --distances the opposite. --per-query writes\n"
            "one CSV row per query (positives, first-positive rank, AP, top-10 gallery indices) and\n"
            "--report a metrics.json with the figures and the precision-recall points."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument(
        "--protocol",
        default="retrieval",
        choices=PROTOCOLS + tuple(_DEPRECATED_PROTOCOLS),
        metavar="{" + ",".join(PROTOCOLS) + "}",
        help="what to measure (default: %(default)s)",
    )
    matrix = parser.add_mutually_exclusive_group()
    matrix.add_argument("--scores", default=None, metavar="S.npy", help="(n, m) similarity matrix")
    matrix.add_argument("--distances", default=None, metavar="D.npy", help="(n, m) distance matrix")
    parser.add_argument(
        "--ground-truth", default=None, metavar="GT", help="retrieval: GT.npy; revisited: GND.json"
    )
    parser.add_argument(
        "--ks", nargs="+", default=None, metavar="K", help="retrieval: Recall@K cut-offs (default: 1 5 10)"
    )
    reid = parser.add_argument_group("reid protocol")
    for option in ("--query-ids", "--gallery-ids", "--query-cameras", "--gallery-cameras"):
        reid.add_argument(option, default=None, metavar="X.npy", help="integer labels, one per row / column")
    reid.add_argument("--max-rank", default=None, metavar="N", help="length of the CMC curve (default: 50)")
    reid.add_argument(
        "--ignore-ids", nargs="*", default=None, metavar="ID", help="junk identities (default: -1)"
    )
    revisited = parser.add_argument_group("revisited protocol")
    revisited.add_argument(
        "--kappas", nargs="+", default=None, metavar="K", help="mP@k depths (default: 1 5 10)"
    )
    learning = parser.add_argument_group("metric-learning protocol")
    learning.add_argument("--embeddings", default=None, metavar="E.npy", help="(n, d) query embeddings")
    learning.add_argument("--labels", default=None, metavar="L.npy", help="(n,) labels (integers or strings)")
    learning.add_argument("--reference", default=None, metavar="R.npy", help="(m, d) reference embeddings")
    learning.add_argument("--reference-labels", default=None, metavar="RL.npy", help="(m,) reference labels")
    learning.add_argument(
        "--space",
        dest="metric",
        default=None,
        choices=("cosine", "l2"),
        help="how embeddings compare: cosine or l2 (Euclidean) distance, as --space elsewhere "
        "(default: cosine)",
    )
    add_deprecated_alias(
        learning, "--metric", dest="metric", replacement="--space cosine|l2", choices=("cosine", "euclidean")
    )
    parser.add_argument("--per-query", default=None, metavar="FILE.csv", help="write per-query detail as CSV")
    parser.add_argument(
        "--report",
        dest="out",
        default=None,
        metavar="DIR",
        help="write metrics.json (figures and PR-curve points) into DIR",
    )
    add_deprecated_alias(parser, "--out", dest="out", replacement="--report DIR")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.set_defaults(run=run)


def _load_npy(option: str, path: str) -> np.ndarray:
    """The array stored in a .npy file (memory-mapped, never unpickled), or a one-line CliError."""
    check_existing_file(f"{option} file", path)
    try:
        with open(path, "rb") as handle:
            magic = handle.read(6)
    except OSError as error:
        raise CliError(f"{option} file {path!r} cannot be read: {error.strerror or error}") from None
    if magic != b"\x93NUMPY":
        raise CliError(f"{option} file {path!r} is not a .npy file (no NumPy header)")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CliError(f"{option} file {path!r} is not a readable .npy array: {reason}") from None
    if not isinstance(array, np.ndarray):
        if hasattr(array, "close"):
            array.close()
        raise CliError(f"{option} file {path!r} is not a single .npy array (an .npz archive?)")
    return array


def evaluate(scores: Any, ground_truth: Any, ks: list[int]) -> dict[str, Any]:
    """The figures printed by the command, as a JSON-able dict (library errors name the options)."""
    from galleria.metrics._checks import as_positives, as_score_matrix
    from galleria.metrics.ranks import ranks_of_matrix
    from galleria.metrics.summary import mean_rank, median_rank, mrr_from_ranks, recall_from_ranks

    matrix = as_score_matrix("--scores", scores)
    positives = as_positives("--ground-truth", ground_truth, *matrix.shape)
    ranks = ranks_of_matrix("--scores", matrix, positives)
    return {
        "n_queries": int(matrix.shape[0]),
        "n_gallery": int(matrix.shape[1]),
        "ks": ks,
        "recall_at_k": [round(value, 4) for value in recall_from_ranks(ranks, ks)],
        "mrr": mrr_from_ranks(ranks),
        "median_rank": median_rank(ranks),
        "mean_rank": mean_rank(ranks),
    }


def _table(figures: dict[str, Any]) -> str:
    rows = [
        ("queries", str(figures["n_queries"])),
        ("gallery items", str(figures["n_gallery"])),
    ]
    rows += [
        (f"Recall@{k}", f"{value:.4f}")
        for k, value in zip(figures["ks"], figures["recall_at_k"], strict=True)
    ]
    rows += [
        ("MRR", f"{figures['mrr']:.4f}"),
        ("median rank (1-indexed)", f"{figures['median_rank']:g}"),
        ("mean rank (1-indexed)", f"{figures['mean_rank']:.2f}"),
    ]
    return _format_rows(rows)


def _format_rows(rows: list[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _fraction(value: Any) -> str:
    return "n/a" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.4f}"


def _check_options(args: argparse.Namespace) -> None:
    """Each option belongs to some protocols; one given to another protocol is an error, not ignored."""
    owners = {
        "scores": ("retrieval", "reid", "revisited"),
        "distances": ("retrieval", "reid", "revisited"),
        "ground_truth": ("retrieval", "revisited"),
        "ks": ("retrieval",),
        "query_ids": ("reid",),
        "gallery_ids": ("reid",),
        "query_cameras": ("reid",),
        "gallery_cameras": ("reid",),
        "max_rank": ("reid",),
        "ignore_ids": ("reid",),
        "kappas": ("revisited",),
        "embeddings": ("metric-learning",),
        "labels": ("metric-learning",),
        "reference": ("metric-learning",),
        "reference_labels": ("metric-learning",),
        "metric": ("metric-learning",),
    }
    for dest, protocols in owners.items():
        if getattr(args, dest) is not None and args.protocol not in protocols:
            option = "--space" if dest == "metric" else "--" + dest.replace("_", "-")
            raise CliError(f"{option} does not apply to --protocol {args.protocol}")
    required = {
        "retrieval": ("ground_truth",),
        "reid": ("query_ids", "gallery_ids", "query_cameras", "gallery_cameras"),
        "revisited": ("ground_truth",),
        "metric-learning": ("embeddings", "labels"),
    }[args.protocol]
    if args.protocol != "metric-learning" and args.scores is None and args.distances is None:
        raise CliError(f"--protocol {args.protocol} needs --scores S.npy or --distances D.npy")
    for dest in required:
        if getattr(args, dest) is None:
            raise CliError(f"--protocol {args.protocol} needs --{dest.replace('_', '-')}")


def _matrix(args: argparse.Namespace) -> tuple[np.ndarray, str, bool]:
    """The score or distance matrix, the option it came from, and whether higher is better."""
    if args.scores is not None:
        return _load_npy("--scores", args.scores), "--scores", True
    return _load_npy("--distances", args.distances), "--distances", False


def _as_similarities(matrix: np.ndarray, option: str, higher: bool) -> np.ndarray:
    """A validated matrix as similarities (distances negated, which is exact and keeps ties)."""
    from galleria.metrics._checks import as_score_matrix

    checked = as_score_matrix(option, matrix)
    if higher:
        return checked
    flipped: np.ndarray = np.negative(checked if checked.dtype.kind == "f" else checked.astype(np.float64))
    return flipped


def _load_json(option: str, path: str, limit: int) -> Any:
    """A JSON document (never more than ``limit`` bytes are read), or a one-line CliError."""
    check_existing_file(f"{option} file", path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise CliError(f"{option} file {path!r} cannot be read: {error.strerror or error}") from None
    if len(data) > limit:
        raise CliError(f"{option} file {path!r} is larger than {limit} bytes, too large for these scores")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise CliError(f"{option} file {path!r} is not valid JSON: {error}") from None


def _run_recall(args: argparse.Namespace, detail: bool) -> tuple[dict[str, Any], list[list[Any]], str]:
    from galleria.metrics._checks import as_positives

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


def _option_names(message: str, matrix_option: str) -> str:
    """A library message that starts with an argument's name, starting with the option's instead."""
    names = {
        "distances": matrix_option,
        "query_ids": "--query-ids",
        "gallery_ids": "--gallery-ids",
        "query_cameras": "--query-cameras",
        "gallery_cameras": "--gallery-cameras",
    }
    for name, option in names.items():
        if message.startswith(name):
            return option + message[len(name) :]
    return message


def _run_revisited(args: argparse.Namespace, detail: bool) -> tuple[dict[str, Any], list[list[Any]], str]:
    from galleria.evaluation.protocols import revisited_report
    from galleria.metrics._checks import as_ks
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


def run(args: argparse.Namespace) -> int:
    """Load the arrays, evaluate them under the chosen protocol, print and write what was asked for."""
    from galleria.evaluation.protocols import (
        json_ready,
        per_query_header,
        write_metrics_json,
        write_per_query_csv,
    )

    if args.protocol in _DEPRECATED_PROTOCOLS:
        new = _DEPRECATED_PROTOCOLS[args.protocol]
        print(
            f"galleria evaluate-scores: warning: --protocol {args.protocol} is deprecated; "
            f"use --protocol {new}",
            file=sys.stderr,
        )
        args.protocol = new
    if args.metric == "euclidean":  # the deprecated --metric's name for l2
        args.metric = "l2"
    _check_options(args)
    check_output_paths(args)
    detail = args.out is not None or args.per_query is not None
    runner = {
        "retrieval": _run_recall,
        "reid": _run_reid,
        "revisited": _run_revisited,
        "metric-learning": _run_metric_learning,
    }[args.protocol]
    payload, rows, table = runner(args, detail)
    if args.per_query is not None:
        write_per_query_csv(args.per_query, per_query_header(args.protocol), rows)
    if args.out is not None:
        write_metrics_json(args.out, {"protocol": args.protocol, **payload})
    if args.json:
        shown = (
            payload
            if args.protocol != "retrieval"
            else {k: v for k, v in payload.items() if k in _RECALL_KEYS}
        )
        print_json(json_ready(shown))
    else:
        print(table)
    return 0


#: The keys ``--json`` prints for the recall protocol (the full-ranking detail goes to metrics.json).
_RECALL_KEYS = ("n_queries", "n_gallery", "ks", "recall_at_k", "mrr", "median_rank", "mean_rank")
