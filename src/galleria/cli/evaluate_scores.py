"""``galleria evaluate-scores``: Recall@K, MRR and median rank of a saved score matrix."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._options import check_existing_file, parse_int

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria evaluate-scores --scores sims.npy --ground-truth gt.npy
  galleria evaluate-scores --scores sims.npy --ground-truth gt.npy --ks 1 5 10 50 --json
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria evaluate-scores``."""
    parser = add_command(
        subparsers,
        "evaluate-scores",
        help="Recall@K, MRR and median rank of a query × gallery similarity matrix",
        description=(
            "Read an (n, m) similarity matrix (higher is better) and the ground truth from .npy files\n"
            "and print Recall@K (0-indexed ranks, ties broken by the lower gallery index, rounded to 4\n"
            "decimals), the mean reciprocal rank, and the median and mean rank (1-indexed).\n\n"
            "The ground truth is one gallery index per query (shape (n,)), a set of indices per query\n"
            "(shape (n, p)), or an (n, m) boolean mask; with several positives a query counts its\n"
            "best-ranked one."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("--scores", required=True, metavar="S.npy", help="(n, m) similarity matrix")
    parser.add_argument("--ground-truth", required=True, metavar="GT.npy", help="ground truth of every query")
    parser.add_argument(
        "--ks", nargs="+", default=["1", "5", "10"], metavar="K", help="Recall@K cut-offs (default: 1 5 10)"
    )
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
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def run(args: argparse.Namespace) -> int:
    """Load the two arrays, compute the ranks once and print the figures."""
    ks = [parse_int("--ks", text) for text in args.ks]
    scores = _load_npy("--scores", args.scores)
    ground_truth = _load_npy("--ground-truth", args.ground_truth)
    figures = evaluate(scores, np.asarray(ground_truth), ks)
    if args.json:
        print_json(figures)
    else:
        print(_table(figures))
    return 0
