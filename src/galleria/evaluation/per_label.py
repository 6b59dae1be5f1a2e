"""Per-label figures of a recorded evaluation: Recall@1 and mAP@100 of each label's queries.

A gallery's mean hides its worst classes: a label whose queries are all answered wrongly weighs as
little as its share of the queries. :func:`per_label_metrics` regroups the per-query record that
``evaluate --report`` writes (:mod:`galleria.evaluation.per_query`) by the queries' labels, for
both configurations it compares, worst label first. ``galleria serve --eval`` shows the table and
filters its query list by label.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from galleria.evaluation.per_query import QueryOutcome, QueryResults

__all__ = ["LabelFigures", "per_label_metrics"]


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
