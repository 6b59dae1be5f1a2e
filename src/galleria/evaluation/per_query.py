"""Per-query results of an evaluation: each query's AP and first results, before and after re-ranking.

``galleria evaluate`` and ``galleria demo`` write them as ``queries.json`` into their ``--report``
folder; ``galleria serve --eval DIR`` reads them back to list the queries re-ranking changed most.
The layout (schema ``galleria.queries/1``)::

    {"schema": "galleria.queries/1", "title": "...", "compared": ["plain", "aqe+rerank"], "depth": 20,
     "configurations": [{"name": "plain", "title": "plain retrieval", "settings": {...},
                         "map@100": 0.71}, ...],
     "queries": [{"query": "/data/cat/3.png", "label": "cat",
                  "ap": {"plain": 0.52, "aqe+rerank": 0.61},
                  "before": {"paths": [...], "hits": [true, ...]},
                  "after": {"paths": [...], "hits": [...], "previous_ranks": [4, 1, null, ...]}}, ...]}

``before`` and ``after`` are the first ``depth`` results of the two configurations compared,
``hits`` marks those with the query's label, and ``previous_ranks`` gives each ``after`` result's
rank in the ``before`` configuration's whole list (null when it was not in it). AP is AP@100.

A ``queries.json`` is untrusted input: :func:`read_query_results` reads only a regular file of at
most :data:`MAX_BYTES`, checks every key and value (errors name the file and the key), and never
opens a file the document names.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from galleria._files import atomic_write_bytes
from galleria._json import dumps as strict_dumps
from galleria._jsoncost import load_bounded_json
from galleria.evaluation._query_stream import split_queries
from galleria.evaluation.configs import RetrievalConfig
from galleria.evaluation.pipeline import ConfigResult

__all__ = [
    "FILE_NAME",
    "MAX_BYTES",
    "PER_QUERY_DEPTH",
    "SCHEMA",
    "QueryOutcome",
    "QueryResults",
    "RankedPaths",
    "query_results",
    "query_results_bytes",
    "read_query_results",
    "write_query_results",
]

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
    configurations = [
        {
            "name": result.config.name,
            "title": result.config.title,
            "settings": result.config.settings(),
            "map@100": result.map_at_100,
        }
        for result in results
    ]
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
        title=title, compared=compared, depth=depth, configurations=configurations, queries=queries
    )


def query_results_bytes(results: QueryResults) -> bytes:
    """The JSON document of ``results``, as the bytes of a ``queries.json``."""
    document = strict_dumps(results.to_dict(), ensure_ascii=False, separators=(",", ":"))
    return (document + "\n").encode("utf-8")


def write_query_results(path: str | os.PathLike[str], results: QueryResults) -> None:
    """Write ``results`` as JSON to ``path`` (atomically)."""
    atomic_write_bytes(path, query_results_bytes(results))


def _read_bounded(name: str) -> bytes:
    """The bytes of the regular file ``name``, refused before reading when it is larger than allowed."""
    descriptor = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{name!r} is not a regular file; give the queries.json an evaluation wrote")
        if info.st_size > MAX_BYTES:
            raise ValueError(
                f"{name!r} is {info.st_size} bytes, over the {MAX_BYTES}-byte bound of {FILE_NAME}"
            )
        with os.fdopen(descriptor, "rb", closefd=False) as stream:
            # Read its size (plus one byte, to see it did not grow): read(MAX_BYTES + 1) would
            # allocate the whole bound first, whatever the file's size.
            data = stream.read(info.st_size + 1)
            if len(data) > info.st_size:
                data += stream.read(MAX_BYTES + 1 - len(data))
    finally:
        os.close(descriptor)
    if len(data) > MAX_BYTES:
        raise ValueError(f"{name!r} is over the {MAX_BYTES}-byte bound of {FILE_NAME}")
    return data


class _Checker:
    """Checks of one document's values; every error names the file and the key."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._texts: dict[str, str] = {}

    def shared(self, text: str) -> str:
        """One object for every equal text of the document (a gallery's paths recur in many lists)."""
        return self._texts.setdefault(text, text)

    def fail(self, key: str, problem: str, value: Any) -> ValueError:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return ValueError(f"{self.name!r}: {key} {problem}, got {shown}")

    def text(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or len(value) > _MAX_TEXT:
            raise self.fail(key, f"must be a text of at most {_MAX_TEXT} characters", value)
        return value

    def mapping(self, key: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, "must be an object", value)
        return value

    def array(self, key: str, value: Any, limit: int) -> list[Any]:
        if not isinstance(value, list) or len(value) > limit:
            raise self.fail(key, f"must be a list of at most {limit} entries", value)
        return value

    def ranked(self, key: str, value: Any, depth: int, *, with_previous: bool) -> RankedPaths:
        entry = self.mapping(key, value)
        expected = {"paths", "hits", "previous_ranks"} if with_previous else {"paths", "hits"}
        if set(entry) != expected:
            raise self.fail(key, f"must hold exactly the keys {sorted(expected)}", sorted(entry))
        paths = tuple(
            self.shared(self.text(f"{key}.paths[{i}]", path))
            for i, path in enumerate(self.array(f"{key}.paths", entry["paths"], depth))
        )
        hits = self.array(f"{key}.hits", entry["hits"], depth)
        if len(hits) != len(paths) or not all(isinstance(hit, bool) for hit in hits):
            raise self.fail(f"{key}.hits", "must hold one true or false per path", hits)
        previous = None
        if with_previous:
            ranks = self.array(f"{key}.previous_ranks", entry["previous_ranks"], depth)
            good = all(rank is None or (type(rank) is int and 1 <= rank <= 1_000_000_000) for rank in ranks)
            if len(ranks) != len(paths) or not good:
                raise self.fail(f"{key}.previous_ranks", "must hold one rank (≥ 1) or null per path", ranks)
            previous = tuple(ranks)
        return RankedPaths(paths, tuple(hits), previous)


def read_query_results(path: str | os.PathLike[str]) -> QueryResults:
    """Read the per-query results in ``path``: a ``queries.json`` or the folder that holds one.

    Raises
    ------
    OSError
        The file is missing or unreadable.
    ValueError
        It is not a regular file, larger than :data:`MAX_BYTES`, not JSON, not of schema
        :data:`SCHEMA`, or any key or value is missing, of the wrong kind or out of bounds (the
        message names the file and the key).
    """
    name = os.fspath(path)
    if os.path.isdir(name):
        name = os.path.join(name, FILE_NAME)
    try:
        text = _read_bounded(name).decode("utf-8")  # the bytes are not kept while it is parsed
    except UnicodeDecodeError as error:
        raise ValueError(f"{name!r} is not valid JSON: {str(error)[:200]}") from None
    split = split_queries(text, repr(name))  # as galleria writes it: one query at a time
    entries: Any
    if split is None:
        document = load_bounded_json(text, repr(name))  # its objects at most 3 times its size
        entries = None
    else:
        document, entries = split
    del text
    check = _Checker(name)
    document = check.mapping("the document", document)
    if document.get("schema") != SCHEMA:
        raise check.fail(
            "schema", f"must be {SCHEMA!r} (the queries.json of galleria evaluate)", document.get("schema")
        )
    missing = {"title", "compared", "depth", "configurations", "queries"} - set(document)
    if missing:
        raise ValueError(f"{name!r} lacks the key(s) {sorted(missing)}")
    title = check.text("title", document["title"])
    depth = document["depth"]
    if type(depth) is not int or not 1 <= depth <= _MAX_DEPTH:
        raise check.fail("depth", f"must be an integer from 1 to {_MAX_DEPTH}", depth)
    configurations = []
    names: list[str] = []
    for i, entry in enumerate(check.array("configurations", document["configurations"], _MAX_CONFIGS)):
        key = f"configurations[{i}]"
        entry = check.mapping(key, entry)
        config_name = check.text(f"{key}.name", entry.get("name"))
        if not config_name or config_name in names:
            raise check.fail(f"{key}.name", "must be a non-empty name used once", config_name)
        score: Any = entry.get("map@100")
        if not _is_fraction(score):
            raise check.fail(f"{key}.map@100", "must be a number from 0 to 1", score)
        settings = check.mapping(f"{key}.settings", entry.get("settings"))
        try:
            RetrievalConfig.from_settings(settings, name=config_name, where=f"{name!r}: {key}.settings")
        except (TypeError, OverflowError) as error:  # a wrong kind of value, named where the check does not
            text = str(error)
            where = f"{name!r}: {key}.settings"
            raise ValueError(text if text.startswith(where) else f"{where}: {text}") from None
        names.append(config_name)
        configurations.append(
            {
                "name": config_name,
                "title": check.text(f"{key}.title", entry.get("title")),
                "settings": settings,
                "map@100": float(score),
            }
        )
    compared = document["compared"]
    if (
        not isinstance(compared, list)
        or len(compared) != 2
        or not all(isinstance(item, str) and item in names for item in compared)
    ):
        raise check.fail("compared", f"must name two of the configurations {names}", compared)
    queries = []
    if entries is None:
        entries = check.array("queries", document["queries"], 10_000_000)
    for i, entry in enumerate(entries):
        key = f"queries[{i}]"
        entry = check.mapping(key, entry)
        if set(entry) != {"query", "label", "ap", "before", "after"}:
            raise check.fail(key, "must hold exactly the keys after, ap, before, label, query", sorted(entry))
        ap = check.mapping(f"{key}.ap", entry["ap"])
        if set(ap) != set(names) or not all(_is_fraction(value) for value in ap.values()):
            raise check.fail(f"{key}.ap", f"must give an AP from 0 to 1 for each of {names}", ap)
        queries.append(
            QueryOutcome(
                query=check.shared(check.text(f"{key}.query", entry["query"])),
                label=check.shared(check.text(f"{key}.label", entry["label"])),
                ap={config: float(ap[config]) for config in names},
                before=check.ranked(f"{key}.before", entry["before"], depth, with_previous=False),
                after=check.ranked(f"{key}.after", entry["after"], depth, with_previous=True),
            )
        )
    return QueryResults(
        title=title,
        compared=(compared[0], compared[1]),
        depth=depth,
        configurations=configurations,
        queries=queries,
    )


def _is_fraction(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and 0.0 <= value <= 1.0
