"""Per-query results of an evaluation: each query's AP and first results, before and after re-ranking.

``galleria evaluate`` and ``galleria demo`` write them as ``queries.json`` into their ``--report``
folder; ``galleria serve --eval DIR`` reads them back to list the queries re-ranking changed most.
The layout (schema ``galleria.queries/1``)::

    {"schema": "galleria.queries/1", "title": "...", "compared": ["plain", "aqe+rerank"], "depth": 20,
     "configurations": [{"name": "plain", "title": "plain retrieval", "settings": {...},
                         "map@100": 0.71, "recall@1": 0.9}, ...],
     "warnings": ["aqe+rerank lowers Recall@1 from 0.9111 (plain retrieval) to 0.8833 ...", ...],
     "queries": [{"query": "/data/cat/3.png", "label": "cat",
                  "ap": {"plain": 0.52, "aqe+rerank": 0.61},
                  "before": {"paths": [...], "hits": [true, ...]},
                  "after": {"paths": [...], "hits": [...], "previous_ranks": [4, 1, null, ...]}}, ...]}

``before`` and ``after`` are the first ``depth`` results of the two configurations compared,
``hits`` marks those with the query's label, and ``previous_ranks`` gives each ``after`` result's
rank in the ``before`` configuration's whole list (null when it was not in it). AP is AP@100.
``recall@1`` and ``warnings`` (the lines ``evaluate`` printed as warnings) are read when present: a
file written before galleria 0.3 has neither, and the page then shows no Recall@1.

A ``queries.json`` is untrusted input: :func:`read_query_results` reads only a regular file of at
most :data:`MAX_BYTES`, checks every key and value (errors name the file and the key), and never
opens a file the document names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from galleria._files import atomic_write_bytes
from galleria._json import dumps as strict_dumps
from galleria._moved import moved_names
from galleria.evaluation._query_types import (
    PER_QUERY_DEPTH as PER_QUERY_DEPTH,
)
from galleria.evaluation._query_types import (
    QueryOutcome as QueryOutcome,
)
from galleria.evaluation._query_types import (
    QueryResults as QueryResults,
)
from galleria.evaluation._query_types import (
    RankedPaths as RankedPaths,
)
from galleria.evaluation.pipeline import ConfigResult

__all__ = [
    "PER_QUERY_DEPTH",
    "QueryOutcome",
    "QueryResults",
    "RankedPaths",
    "query_results",
    "query_results_bytes",
    "write_query_results",
]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(
    __name__,
    {
        "FILE_NAME": "galleria.evaluation",
        "MAX_BYTES": "galleria.evaluation._query_types",
        "SCHEMA": "galleria.evaluation",
        "read_query_results": "galleria.evaluation",
    },
)


def _configuration_entry(result: ConfigResult) -> dict[str, Any]:
    """One configuration as ``queries.json`` records it: its name, title, settings and figures."""
    config = result.config
    return {
        "name": config.name,
        "title": config.title,
        "settings": config.settings(),
        "map@100": result.map_at_100,
        "recall@1": result.recall_at_1,
    }


def query_results(
    query_paths: Sequence[str],
    query_labels: Sequence[Any],
    lists: Mapping[str, Sequence[Sequence[str]]],
    results: Sequence[ConfigResult],
    gallery_labels: Mapping[str, Any],
    *,
    compared: tuple[str, str],
    title: str,
    depth: int = PER_QUERY_DEPTH,
    warnings: Sequence[str] = (),
) -> QueryResults:
    """Collect the per-query results of an evaluation.

    Parameters
    ----------
    query_paths, query_labels : sequences
        The queries, in the order the evaluation ran them, and their labels.
    lists : mapping of str to lists of lists of paths
        Every configuration's ranked result paths, one list per query.
    results : sequence of ConfigResult
        What :func:`~galleria.evaluation.evaluate_retrieval` returned (with per-query AP).
    gallery_labels : mapping
        The label of every gallery path.
    compared : (str, str)
        The configuration before and the one after (plain and the re-ranked one).
    depth : int
        Results kept per list.
    warnings : sequence of str
        The warnings the evaluation gave (kept for the page to show).

    Raises
    ------
    ValueError
        If ``compared`` names a configuration that is not in ``results`` and ``lists``, or the
        counts disagree.
    """
    names = [result.config.name for result in results]
    for name in compared:
        if name not in names or name not in lists:
            raise ValueError(f"compared names {name!r}, which is not among the configurations {names!r}")
    n = len(query_paths)
    for result in results:
        if len(result.average_precisions) != n or len(lists.get(result.config.name, ())) != n:
            raise ValueError(f"configuration {result.config.name!r} does not hold one result per query")
    configurations = [_configuration_entry(result) for result in results]
    before_name, after_name = compared
    queries = []
    for position, (query, label) in enumerate(zip(query_paths, query_labels, strict=True)):
        before = list(lists[before_name][position])
        after = list(lists[after_name][position])[:depth]
        earlier = {path: rank for rank, path in enumerate(before, start=1)}

        def hits(paths: Sequence[str], label: Any = label) -> tuple[bool, ...]:
            return tuple(bool(gallery_labels.get(path) == label) for path in paths)

        queries.append(
            QueryOutcome(
                query=str(query),
                label=str(label),
                ap={
                    result.config.name: round(float(result.average_precisions[position]), 6)
                    for result in results
                },
                before=RankedPaths(tuple(before[:depth]), hits(before[:depth])),
                after=RankedPaths(tuple(after), hits(after), tuple(earlier.get(path) for path in after)),
            )
        )
    return QueryResults(
        title=title,
        compared=compared,
        depth=depth,
        configurations=configurations,
        queries=queries,
        warnings=tuple(str(line) for line in warnings),
    )


def query_results_bytes(results: QueryResults) -> bytes:
    """The JSON document of ``results``, as the bytes of a ``queries.json``."""
    document = strict_dumps(results.to_dict(), ensure_ascii=False, separators=(",", ":"))
    return (document + "\n").encode("utf-8")


def write_query_results(path: str | os.PathLike[str], results: QueryResults) -> None:
    """Write ``results`` as JSON to ``path`` (atomically)."""
    atomic_write_bytes(path, query_results_bytes(results))
