"""Per-label figures of a recorded evaluation: Recall@1 and mAP@100 of each label's queries.

A gallery's mean hides its worst classes: a label whose queries are all answered wrongly weighs as
little as its share of the queries. :func:`per_label_metrics` regroups the per-query record that
``evaluate --report`` writes (:mod:`galleria.evaluation.per_query`) by the queries' labels, for
both configurations it compares, worst label first. ``galleria serve --eval`` shows the table and
filters its query list by label.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from galleria.evaluation._query_types import QueryOutcome, QueryResults

__all__ = ["LabelFigures", "per_label_metrics", "read_label_summary"]

#: Largest ``metrics.json`` read for its label summary (bytes).
MAX_METRICS_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class LabelFigures:
    """One label's queries: how many, and Recall@1 / mAP@100 before and after (the compared pair)."""

    label: str
    n_queries: int
    recall_at_1: tuple[float, float]
    map_at_100: tuple[float, float]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def per_label_metrics(results: QueryResults) -> list[LabelFigures]:
    """Each label's figures for ``results.compared`` (before, after), the lowest mAP@100 after first.

    Ties are broken by the lower Recall@1 after, then by the label. Recall@1 of a query is whether
    its first result has its label; AP@100 is the recorded one (the figure the summary averages).

    Examples
    --------
    >>> from galleria.evaluation.per_query import QueryOutcome, QueryResults, RankedPaths
    >>> def outcome(label, first_hit, ap):
    ...     ranked = RankedPaths(("x",), (first_hit,))
    ...     return QueryOutcome("q", label, {"plain": ap, "rerank": ap}, ranked, ranked)
    >>> results = QueryResults("t", ("plain", "rerank"), 1, [],
    ...     [outcome("cat", True, 1.0), outcome("dog", False, 0.25), outcome("dog", True, 0.75)])
    >>> [(row.label, row.n_queries, row.recall_at_1, row.map_at_100) for row in per_label_metrics(results)]
    [('dog', 2, (0.5, 0.5), (0.5, 0.5)), ('cat', 1, (1.0, 1.0), (1.0, 1.0))]
    """
    before, after = results.compared
    groups: dict[str, list[QueryOutcome]] = defaultdict(list)
    for query in results.queries:
        groups[query.label].append(query)
    rows = [
        LabelFigures(
            label=label,
            n_queries=len(queries),
            recall_at_1=(
                _mean([float(bool(q.before.hits[:1] and q.before.hits[0])) for q in queries]),
                _mean([float(bool(q.after.hits[:1] and q.after.hits[0])) for q in queries]),
            ),
            map_at_100=(_mean([q.ap[before] for q in queries]), _mean([q.ap[after] for q in queries])),
        )
        for label, queries in groups.items()
    ]
    return sorted(rows, key=lambda row: (row.map_at_100[1], row.recall_at_1[1], row.label))


def _label_summary(entry: Any, name: str) -> Any:
    from galleria.datasets.labels import LabelSummary

    per_label = entry.get("images_per_label") if isinstance(entry, dict) else None
    if not isinstance(entry, dict) or set(entry) != {"n_labels", "images_per_label", "root"}:
        raise ValueError(f"{name}: dataset.labels must hold n_labels, images_per_label and root")
    if not isinstance(per_label, dict) or set(per_label) != {"min", "median"}:
        raise ValueError(f"{name}: dataset.labels.images_per_label must hold min and median")
    count, low, median, root = entry["n_labels"], per_label["min"], per_label["median"], entry["root"]
    if type(count) is not int or type(low) is not int or count < 0 or low < 0:
        raise ValueError(f"{name}: dataset.labels counts must be non-negative integers")
    if isinstance(median, bool) or not isinstance(median, (int, float)) or not 0 <= median < 1e12:
        raise ValueError(f"{name}: dataset.labels.images_per_label.median must be a number")
    if root is not None and (not isinstance(root, str) or len(root) > 4096):
        raise ValueError(f"{name}: dataset.labels.root must be a folder name or null")
    return LabelSummary(count, low, float(median), root)


def read_label_summary(folder: str | os.PathLike[str]) -> Any:
    """The :class:`~galleria.datasets.labels.LabelSummary` a report folder's ``metrics.json`` records
    (``dataset.labels``), or None when the folder has no such file or the file records none.

    The file is untrusted: at most :data:`MAX_METRICS_BYTES`, parsed by the bounded JSON reader,
    the entry checked key by key; ValueError naming the file otherwise.
    """
    from galleria._files import load_json, open_regular_file

    name = os.path.join(os.fspath(folder), "metrics.json")
    if not os.path.lexists(name):
        return None
    with open_regular_file(name, "metrics file") as stream:
        data = stream.read(MAX_METRICS_BYTES + 1)
    if len(data) > MAX_METRICS_BYTES:
        raise ValueError(f"metrics file {name!r} is larger than {MAX_METRICS_BYTES} bytes")
    payload = load_json(data, f"metrics file {name!r}")
    dataset = payload.get("dataset") if isinstance(payload, dict) else None
    entry = dataset.get("labels") if isinstance(dataset, dict) else None
    return None if entry is None else _label_summary(entry, f"metrics file {name!r}")
