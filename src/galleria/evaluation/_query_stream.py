"""Reading a ``queries.json`` one query at a time, so that its memory stays a small multiple of its size.

``json.loads`` of a whole ``queries.json`` makes a string object per path: a gallery of short paths
takes about 4.7 times the file's size. The file as :func:`~galleria.evaluation.per_query.query_results_bytes`
writes it (compact JSON, ``"queries"`` last) is read here element by element instead: the document
without its queries, then each query's text, found by a pattern that builds no objects (a query is
an object of strings, numbers, lists of them and objects of those), checked by
:func:`galleria._jsoncost.json_cost` and parsed alone. The caller keeps only the compact record of each
query (its paths shared among queries). A file of another shape is left to the whole-document reader
(:func:`galleria._jsoncost.load_bounded_json`), which refuses what would take over 3 times its size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from galleria._jsoncost import SLACK, json_cost, load_bounded_json

__all__ = ["split_queries"]

_STRING = r'"(?:[^"\\]|\\.)*"'
_SCALARS = r"(?:" + _STRING + r'|[^\[\]{}"])*'
_LIST = r"\[" + _SCALARS + r"\]"
_FLAT = r"\{(?:" + _STRING + r'|[^\[\]{}"]|' + _LIST + r")*\}"
#: One query as the writer writes it: an object of scalars, lists of scalars and flat objects.
_QUERY = re.compile(r"\{(?:" + _STRING + r'|[^\[\]{}"]|' + _LIST + "|" + _FLAT + r")*\}")
_KEY = '"queries":['
_SEPARATOR = re.compile(r"\s*,\s*")
_END = re.compile(r"\s*\]\s*\}\s*\Z")
_OPEN = re.compile(r"\s*")


def split_queries(text: str, what: str) -> tuple[dict[str, Any], Iterator[Any]] | None:
    """``(the document with "queries": [], an iterator of the parsed queries)``, or None when ``text``
    is not laid out as galleria writes it (then parse it whole). The iterator raises ValueError naming
    ``what`` for a query that is not valid JSON or would take too much memory."""
    at = text.find(_KEY)
    if at < 0:
        return None
    try:
        head = load_bounded_json(text[:at] + '"queries":[]}', what)
    except ValueError:
        return None
    if not isinstance(head, dict) or head.get("queries") != []:
        return None
    start = at + len(_KEY)
    try:  # a first pass, building nothing: the layout holds to the end
        for _ in _pieces(text, start):
            pass
    except _Layout:
        return None
    # Each query alone may take up to the file's size in objects while it is parsed (plus slack).
    return head, _queries(text, start, what, len(text) + SLACK)


class _Layout(Exception):
    """The text is not laid out as the writer lays it out."""


def _pieces(text: str, position: int) -> Iterator[tuple[int, int]]:
    """The (start, end) of each query's text after ``position`` (_Layout when the layout differs)."""
    position = _OPEN.match(text, position).end()  # type: ignore[union-attr]
    if _END.match(text, position):
        return
    while True:
        found = _QUERY.match(text, position)
        if found is None:
            raise _Layout
        yield found.start(), found.end()
        if _END.match(text, found.end()):
            return
        separator = _SEPARATOR.match(text, found.end())
        if separator is None:
            raise _Layout
        position = separator.end()


def _queries(text: str, position: int, what: str, bound: int) -> Iterator[Any]:
    for count, (start, end) in enumerate(_pieces(text, position)):
        piece = text[start:end]
        try:
            too_much = json_cost(piece) > bound
        except ValueError as error:
            raise ValueError(f"{what}: queries[{count}] {error}") from None
        if too_much:
            raise ValueError(f"{what}: queries[{count}] would take more memory than the whole file")
        try:
            yield json.loads(piece)
        except RecursionError:
            raise ValueError(f"{what} is not valid JSON: queries[{count}] is nested too deeply") from None
        except ValueError as error:
            raise ValueError(f"{what} is not valid JSON: queries[{count}]: {str(error)[:200]}") from None
