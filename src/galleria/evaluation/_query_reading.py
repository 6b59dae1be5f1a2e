"""Reading a ``queries.json`` back: bounded, every field checked before it is used."""

from __future__ import annotations

import math
import os
import stat
from typing import Any

from galleria._jsoncost import load_bounded_json
from galleria.evaluation._query_stream import split_queries
from galleria.evaluation._query_types import (
    _MAX_CONFIGS,
    _MAX_DEPTH,
    _MAX_TEXT,
    _MAX_WARNINGS,
    FILE_NAME,
    MAX_BYTES,
    SCHEMA,
    QueryOutcome,
    QueryResults,
    RankedPaths,
)
from galleria.retrieval.config import RetrievalConfig


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
    document, entries = _load_document(name)
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
    configurations, names = _configurations(check, name, document["configurations"])
    compared = document["compared"]
    if (
        not isinstance(compared, list)
        or len(compared) != 2
        or not all(isinstance(item, str) and item in names for item in compared)
    ):
        raise check.fail("compared", f"must name two of the configurations {names}", compared)
    if entries is None:
        entries = check.array("queries", document["queries"], 10_000_000)
    warnings = check.array("warnings", document.get("warnings", []), _MAX_WARNINGS)
    return QueryResults(
        title=title,
        compared=(compared[0], compared[1]),
        depth=depth,
        configurations=configurations,
        queries=_outcomes(check, entries, names, depth),
        warnings=tuple(check.text(f"warnings[{i}]", line) for i, line in enumerate(warnings)),
    )


def _load_document(name: str) -> tuple[Any, Any]:
    """The parsed document and, when it is laid out as galleria writes it, its queries parsed apart."""
    try:
        text = _read_bounded(name).decode("utf-8")  # the bytes are not kept while it is parsed
    except UnicodeDecodeError as error:
        raise ValueError(f"{name!r} is not valid JSON: {str(error)[:200]}") from None
    split = split_queries(text, repr(name))  # as galleria writes it: one query at a time
    if split is None:
        return load_bounded_json(text, repr(name)), None  # its objects at most 3 times its size
    return split


def _configurations(check: _Checker, name: str, value: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The checked configurations (name, title, settings, mAP@100, and Recall@1 when the file
    records it) and their names."""
    configurations = []
    names: list[str] = []
    for i, entry in enumerate(check.array("configurations", value, _MAX_CONFIGS)):
        key = f"configurations[{i}]"
        entry = check.mapping(key, entry)
        config_name = check.text(f"{key}.name", entry.get("name"))
        if not config_name or config_name in names:
            raise check.fail(f"{key}.name", "must be a non-empty name used once", config_name)
        score: Any = entry.get("map@100")
        if not _is_fraction(score):
            raise check.fail(f"{key}.map@100", "must be a number from 0 to 1", score)
        recall: Any = entry.get("recall@1")
        if recall is not None and not _is_fraction(recall):
            raise check.fail(f"{key}.recall@1", "must be a number from 0 to 1", recall)
        settings = check.mapping(f"{key}.settings", entry.get("settings"))
        try:
            RetrievalConfig.from_settings(settings, name=config_name, where=f"{name!r}: {key}.settings")
        except (TypeError, OverflowError) as error:  # a wrong kind of value, named where the check does not
            text = str(error)
            where = f"{name!r}: {key}.settings"
            raise ValueError(text if text.startswith(where) else f"{where}: {text}") from None
        names.append(config_name)
        checked = {
            "name": config_name,
            "title": check.text(f"{key}.title", entry.get("title")),
            "settings": settings,
            "map@100": float(score),
        }
        if recall is not None:  # recorded since galleria 0.3
            checked["recall@1"] = float(recall)
        configurations.append(checked)
    return configurations, names


def _outcomes(check: _Checker, entries: Any, names: list[str], depth: int) -> list[QueryOutcome]:
    """The checked per-query outcomes: the query, its label, each configuration's AP, the two lists."""
    queries = []
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
    return queries


def _is_fraction(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and 0.0 <= value <= 1.0
