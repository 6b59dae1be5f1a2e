"""Per-query results: the records (ranked paths, one query's outcome, all of them) and their limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from galleria.retrieval.config import RetrievalConfig

#: Identifier and version of the layout.
SCHEMA = "galleria.queries/1"


#: Name of the file in an evaluation's output folder.
FILE_NAME = "queries.json"


#: Largest file :func:`read_query_results` reads.
MAX_BYTES = 256 * 1024 * 1024


#: Results kept per list and query.
PER_QUERY_DEPTH = 20


#: Bounds a file's document must keep (configurations, results per list, characters of a text).
_MAX_CONFIGS = 64


_MAX_DEPTH = 1000


_MAX_TEXT = 4096


#: Warning lines a file may hold.
_MAX_WARNINGS = 64


@dataclass(frozen=True)
class RankedPaths:
    """The first results of one list: paths, whether each has the query's label, and earlier ranks."""

    paths: tuple[str, ...]
    hits: tuple[bool, ...]
    previous_ranks: tuple[int | None, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"paths": list(self.paths), "hits": list(self.hits)}
        if self.previous_ranks is not None:
            entry["previous_ranks"] = list(self.previous_ranks)
        return entry


@dataclass(frozen=True)
class QueryOutcome:
    """One query of an evaluation: its path and label, AP@100 per configuration, the two lists compared."""

    query: str
    label: str
    ap: dict[str, float]
    before: RankedPaths
    after: RankedPaths


@dataclass(frozen=True)
class QueryResults:
    """The per-query results of one evaluation (see the module's documentation for the file layout)."""

    title: str
    compared: tuple[str, str]
    depth: int
    configurations: list[dict[str, Any]]
    queries: list[QueryOutcome]
    #: What ``evaluate`` warned about (a configuration lowering Recall@1 or mAP@100 below plain's).
    warnings: tuple[str, ...] = ()

    def change(self, position: int) -> float:
        """How re-ranking changed the AP of query ``position``: AP after minus AP before."""
        outcome = self.queries[position]
        return outcome.ap[self.compared[1]] - outcome.ap[self.compared[0]]

    def worst_first(self) -> list[int]:
        """The query positions by change of AP, the largest loss first (ties in query order)."""
        return sorted(range(len(self.queries)), key=lambda position: (self.change(position), position))

    def config(self, name: str) -> RetrievalConfig:
        """The configuration called ``name``, read back from its recorded settings."""
        entry = next(entry for entry in self.configurations if entry["name"] == name)
        return RetrievalConfig.from_settings(entry["settings"], name=name, where=f"configuration {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (``schema`` first)."""
        return {
            "schema": SCHEMA,
            "title": self.title,
            "compared": list(self.compared),
            "depth": self.depth,
            "configurations": self.configurations,
            "warnings": list(self.warnings),
            "queries": [
                {
                    "query": outcome.query,
                    "label": outcome.label,
                    "ap": outcome.ap,
                    "before": outcome.before.to_dict(),
                    "after": outcome.after.to_dict(),
                }
                for outcome in self.queries
            ],
        }
