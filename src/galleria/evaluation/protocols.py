"""Per-protocol reports for the command line: the ``metrics.json`` payload and the per-query CSV.

The figures come from :mod:`galleria.metrics` (recall, :func:`~galleria.metrics.reid_evaluate`,
:func:`~galleria.metrics.revisited_evaluate`, :func:`~galleria.metrics.metric_learning_evaluate`);
this module only arranges them. Every payload holds ``schema``, ``protocol``, the headline figures
and ``pr_curve`` (the interpolated precision–recall points: ``recall`` and ``precision`` lists;
one curve per setting for the revisited protocol). The per-query CSV has one row per query (per
query and setting for the revisited protocol) with the number of positives, the 0-indexed rank of
the first positive (−1 when there is none), the AP (empty when undefined) and the top-10 gallery
indices, space-separated. Both files are written atomically.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from galleria._files import atomic_write_bytes
from galleria.metrics import (
    PR_LEVELS,
    Positives,
    average_precision_full,
    collect,
    interpolated_pr,
    rank_rows,
    top_of_block,
)
from galleria.metrics.metric_learning import MetricLearningResult
from galleria.metrics.reid import ReidResult
from galleria.metrics.revisited import SETTINGS, RevisitedQuery, rank_revisited, setting_figures

__all__ = [
    "SCHEMA",
    "TOP",
    "json_ready",
    "metric_learning_report",
    "per_query_header",
    "recall_detail",
    "reid_report",
    "revisited_report",
    "write_metrics_json",
    "write_per_query_csv",
]

#: Identifier and version of the protocol ``metrics.json`` layout.
SCHEMA = "galleria.protocols/1"
#: Gallery indices listed per query in the per-query CSV.
TOP = 10
#: Rows of a score matrix ranked at once for the recall protocol's detail.
_BLOCK_ELEMENTS = 1 << 22

Rows = list[list[Any]]


def _number(value: Any) -> Any:
    """A JSON-able number: NaN and ±inf → None, numpy scalars → Python."""
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def _clean(payload: Any) -> Any:
    if isinstance(payload, dict):
        return {key: _clean(value) for key, value in payload.items()}
    if isinstance(payload, (list, tuple)):
        return [_clean(value) for value in payload]
    if isinstance(payload, np.ndarray):
        return [_clean(value) for value in payload.tolist()]
    return _number(payload)


def _curve(recall: np.ndarray, precision: np.ndarray) -> dict[str, list[float]]:
    return {"recall": [float(x) for x in recall], "precision": [float(x) for x in precision]}


def _top_text(indices: np.ndarray) -> str:
    return " ".join(str(int(index)) for index in indices if index >= 0)


def _ap_text(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.6f}"


def _positive_sets(positives: Positives) -> list[np.ndarray]:
    if positives.single is not None:
        return [np.array([index], dtype=np.int64) for index in positives.single]
    if positives.mask is not None:
        return [np.flatnonzero(row).astype(np.int64) for row in positives.mask]
    assert positives.indptr is not None and positives.indices is not None
    return [
        np.unique(positives.indices[positives.indptr[i] : positives.indptr[i + 1]])
        for i in range(positives.n)
    ]


def recall_detail(scores: np.ndarray, positives: Positives) -> tuple[dict[str, Any], Rows]:
    """Full-ranking figures of the recall protocol (mAP, PR points) and its per-query rows.

    ``scores`` are similarities (a validated matrix); every positive of every query is ranked.
    """
    n, m = scores.shape
    sets = _positive_sets(positives)
    lists: list[np.ndarray] = []
    top = np.full((n, TOP), -1, dtype=np.int64)
    rows = max(1, _BLOCK_ELEMENTS // m)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        block = np.asarray(scores[start:stop])
        keys = block.astype(np.float64 if block.dtype.kind != "f" else block.dtype)
        lists.extend(rank_rows(keys, sets[start:stop]))
        top[start:stop] = top_of_block(keys, TOP, junk=False)
    counts = np.array([len(s) for s in sets], dtype=np.int64)
    ranked = collect(lists, counts)
    ap = average_precision_full(ranked, counts.astype(np.float64))
    figures = {"mAP": float(np.mean(ap)), "pr_curve": _curve(PR_LEVELS, interpolated_pr(ranked))}
    first = ranked.first
    per_query = [
        [query, int(counts[query]), int(first[query]), _ap_text(float(ap[query])), _top_text(top[query])]
        for query in range(n)
    ]
    return figures, per_query


def reid_report(result: ReidResult) -> tuple[dict[str, Any], Rows]:
    """The JSON figures and per-query rows of a re-identification evaluation."""
    figures = {
        **result.summary(),
        "cmc": [float(x) for x in result.cmc],
        "pr_curve": _curve(result.pr_recall, result.pr_precision),
    }
    rows = [
        [
            query,
            int(result.n_positives[query]),
            int(result.first_positive_rank[query]),
            _ap_text(float(result.ap[query])),
            _top_text(result.top[query]),
        ]
        for query in range(len(result.ap))
    ]
    return figures, rows


def revisited_report(
    scores: np.ndarray, truth: list[RevisitedQuery], kappas: list[int]
) -> tuple[dict[str, Any], Rows]:
    """The three settings' figures (with their PR points) and per-query rows (query, setting, …)."""
    ranked = rank_revisited(scores, truth, TOP)
    figures: dict[str, Any] = {}
    rows: Rows = []
    per_setting = {}
    for setting in SETTINGS:
        positions, top = ranked[setting]
        detail = setting_figures(positions, kappas)
        ap = detail.pop("ap")
        detail["pr_curve"] = _curve(detail.pop("pr_recall"), detail.pop("pr_precision"))
        figures[setting] = detail
        per_setting[setting] = (positions, top, ap)
    for query in range(scores.shape[0]):
        for setting in SETTINGS:
            positions, top, ap = per_setting[setting]
            rows.append(
                [
                    query,
                    setting,
                    int(positions.counts[query]),
                    int(positions.first[query]),
                    _ap_text(float(ap[query])),
                    _top_text(top[query]),
                ]
            )
    return figures, rows


def metric_learning_report(result: MetricLearningResult) -> tuple[dict[str, Any], Rows]:
    """The figures (MAP@R, R-precision, P@1, mAP, PR points) and per-query rows of a metric-learning run."""
    figures = {**result.summary(), "pr_curve": _curve(result.pr_recall, result.pr_precision)}
    rows = [
        [
            query,
            int(result.n_positives[query]),
            int(result.first_positive_rank[query]),
            _ap_text(float(result.average_precision[query])),
            _ap_text(float(result.per_query_map_at_r[query])),
            _top_text(result.top[query]),
        ]
        for query in range(len(result.n_positives))
    ]
    return figures, rows


def per_query_header(protocol: str) -> list[str]:
    """The CSV columns of ``protocol``."""
    if protocol == "revisited":
        return ["query", "setting", "positives", "first_positive_rank", "ap", "top10"]
    if protocol == "metric-learning":
        return ["query", "positives", "first_positive_rank", "ap", "map_at_r", "top10"]
    return ["query", "positives", "first_positive_rank", "ap", "top10"]


def write_per_query_csv(path: str | os.PathLike[str], header: Sequence[str], rows: Rows) -> None:
    """Write the per-query rows as CSV (atomically: the old file stays until the new one is complete)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    atomic_write_bytes(path, buffer.getvalue().encode("utf-8"))


def write_metrics_json(out_dir: str | os.PathLike[str], payload: dict[str, Any]) -> str:
    """Write ``metrics.json`` (sorted keys, NaN as null) into ``out_dir``, created if missing; its path."""
    folder = os.fspath(out_dir)
    data = (
        json.dumps(_clean({"schema": SCHEMA, **payload}), indent=2, sort_keys=True, allow_nan=False) + "\n"
    ).encode()
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, "metrics.json")
    atomic_write_bytes(target, data)
    return target


def json_ready(payload: dict[str, Any]) -> Any:
    """``payload`` with numpy values made plain and NaN as None (for ``--json`` on stdout)."""
    return _clean(payload)
