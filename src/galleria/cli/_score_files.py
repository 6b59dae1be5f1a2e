"""Reading the score files of ``galleria evaluate-scores``: .npy matrices, bounded JSON, the table."""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from galleria.cli._common import CliError
from galleria.cli._parse import check_existing_file

#: ``--space`` → the metric-learning core's name of the distance.
_METRIC_OF_SPACE = {"cosine": "cosine", "l2": "euclidean"}


#: Bytes a ground-truth JSON file may hold per query × gallery cell (and a floor), so that the file
#: cannot make the command read more than the score matrix justifies.
_JSON_BYTES_PER_CELL = 16


_JSON_FLOOR = 1 << 20


def _load_npy(option: str, path: str) -> np.ndarray:
    """The array stored in a .npy file (memory-mapped, never unpickled), or a one-line CliError."""
    from galleria._file_formats import map_npy
    from galleria._files import open_regular_file

    check_existing_file(f"{option} file", path)
    try:
        with open_regular_file(path, f"{option} file") as handle:
            magic = handle.read(6)
    except OSError as error:
        raise CliError(f"{option} file {path!r} cannot be read: {error.strerror or error}") from None
    except ValueError as error:
        raise CliError(str(error)) from None
    if magic != b"\x93NUMPY":
        raise CliError(f"{option} file {path!r} is not a .npy file (no NumPy header)")
    try:
        array: np.ndarray = map_npy(path, f"{option} file", None)
    except (ValueError, OSError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CliError(f"{option} file {path!r} is not a readable .npy array: {reason}") from None
    return array


def evaluate(scores: Any, ground_truth: Any, ks: list[int]) -> dict[str, Any]:
    """The figures printed by the command, as a JSON-able dict (library errors name the options)."""
    from galleria.metrics import as_positives, as_score_matrix
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


def _matrix(args: argparse.Namespace) -> tuple[np.ndarray, str, bool]:
    """The score or distance matrix, the option it came from, and whether higher is better."""
    if args.scores is not None:
        return _load_npy("--scores", args.scores), "--scores", True
    return _load_npy("--distances", args.distances), "--distances", False


def _as_similarities(matrix: np.ndarray, option: str, higher: bool) -> np.ndarray:
    """A validated matrix as similarities (distances negated, which is exact and keeps ties)."""
    from galleria.metrics import as_score_matrix

    checked = as_score_matrix(option, matrix)
    if higher:
        return checked
    flipped: np.ndarray = np.negative(checked if checked.dtype.kind == "f" else checked.astype(np.float64))
    return flipped


def _load_json(option: str, path: str, limit: int) -> Any:
    """A JSON document (never more than ``limit`` bytes are read), or a one-line CliError."""
    from galleria._files import open_regular_file

    check_existing_file(f"{option} file", path)
    try:
        with open_regular_file(path, f"{option} file") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise CliError(f"{option} file {path!r} cannot be read: {error.strerror or error}") from None
    except ValueError as error:
        raise CliError(str(error)) from None
    if len(data) > limit:
        raise CliError(f"{option} file {path!r} is larger than {limit} bytes, too large for these scores")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise CliError(f"{option} file {path!r} is not valid JSON: {error}") from None


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
