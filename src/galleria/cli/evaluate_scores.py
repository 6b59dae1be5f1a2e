"""``galleria evaluate-scores``: the figures of a saved score matrix under one of four protocols.

``retrieval`` (the default; formerly ``recall``): Recall@K, MRR and median rank. ``reid``: CMC,
mAP and mINP with the camera and junk rules. ``revisited``: Easy / Medium / Hard mAP and mP@k.
``metric-learning``: Precision@1, R-precision and MAP@R from embeddings and labels.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from galleria._moved import moved_names
from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._metric_learning import check_output_paths
from galleria.cli._parse import add_deprecated_alias
from galleria.cli._score_protocols import (  # moved there; importable from here as before
    _run_metric_learning as _run_metric_learning,
)
from galleria.cli._score_protocols import (
    _run_recall as _run_recall,
)
from galleria.cli._score_protocols import (
    _run_reid as _run_reid,
)
from galleria.cli._score_protocols import (
    _run_revisited as _run_revisited,
)

__all__ = ["add_parser", "run"]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(__name__, {"evaluate": "galleria.cli._score_files"})

PROTOCOLS = ("retrieval", "reid", "revisited", "metric-learning")
#: Old protocol names, still accepted with a warning: old → new.
_DEPRECATED_PROTOCOLS = {"recall": "retrieval"}

_EXAMPLES = """\
  galleria evaluate-scores --scores sims.npy --ground-truth gt.npy
  galleria evaluate-scores --scores sims.npy --ground-truth gt.npy --ks 1 5 10 50 --json
  galleria evaluate-scores --protocol reid --distances dist.npy --query-ids qid.npy \\
      --gallery-ids gid.npy --query-cameras qcam.npy --gallery-cameras gcam.npy --per-query q.csv
  galleria evaluate-scores --protocol revisited --scores sims.npy --ground-truth gnd_roxford5k.json
  galleria evaluate-scores --protocol metric-learning --embeddings emb.npy --labels labels.npy \\
      --report report/
"""


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
