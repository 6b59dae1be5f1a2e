"""Parsing untrusted JSON with memory proportional to its size.

``json.loads`` turns every value into a Python object: a file of tiny values (``[[],[],...]``,
``[1.5,1.5,...]``, ``{"a":{},...}``) takes 20 to 30 times its size in memory before any check can
look at it. :func:`json_cost` counts a document's tokens first (a few passes of ``str.count``, no
objects made) and bounds the memory its objects would take; :func:`load_bounded_json` refuses a
document whose bound exceeds ``ratio`` times its size, naming the file, before parsing it.

The bound counts, for CPython on 64 bits: each string value 49 bytes plus its characters (the
characters of every string together are at most the text), each number 32 bytes, each list or object
88 bytes, each element a pointer with the lists' growth (9 bytes) and each object entry 32 more (its
key is shared by the parser among equal keys). Documents that
galleria writes (paths, scores, ranks and settings) stay well within it.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["DEFAULT_RATIO", "MAX_DISTINCT_KEYS", "SLACK", "json_cost", "load_bounded_json"]

#: Bytes of objects a document may take per byte of its text (the text itself not counted).
DEFAULT_RATIO = 3.0
#: Bytes of objects any document may take beside that (small files are never refused for their shape).
SLACK = 1 << 20


#: Distinct object keys a document may use (the parser shares equal keys; unique keys are each an object).
MAX_DISTINCT_KEYS = 10_000
_DEEP = re.compile(r"\s*(?:[\[{]\s*){1000}")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"(\s*:)?', re.DOTALL)


def json_cost(text: str) -> int:
    """An upper bound, in bytes, of the objects ``json.loads(text)`` would make (text not counted).

    Raises ValueError when the document uses more than :data:`MAX_DISTINCT_KEYS` distinct keys.

    Examples
    --------
    >>> json_cost('{"a": [1, 2]}') > 0
    True
    >>> json_cost("[" + ",".join(["[]"] * 1000) + "]") > 20 * 3001
    True
    """
    keys: set[str] = set()
    values = characters = entries = 0
    for match in _STRING.finditer(text):
        content = match.group(1)
        if match.group(2) is None:
            values += 1
            characters += len(content) * (1 if content.isascii() else 4)
            continue
        entries += 1
        if content not in keys:
            if len(keys) >= MAX_DISTINCT_KEYS:
                raise ValueError(f"it uses more than {MAX_DISTINCT_KEYS} distinct keys")
            keys.add(content)
            characters += len(content) * (1 if content.isascii() else 4) + 49
    opens = text.count("[") + text.count("{")
    items = text.count(",") + opens + 1
    literals = text.count("true") + text.count("false") + text.count("null")
    numbers = max(0, items - values - opens - literals)
    return characters + 49 * values + 88 * opens + 9 * items + 32 * entries + 32 * numbers


def load_bounded_json(text: str | bytes, what: str, *, ratio: float = DEFAULT_RATIO) -> Any:
    """``json.loads(text)``, after checking that its objects would take at most ``ratio`` × its size
    (plus :data:`SLACK`).

    Every failure is a ValueError naming ``what`` (the file): bad UTF-8 or JSON, nesting too deep,
    a huge integer, or a document of too many tiny values. Give the text as ``str`` with no other
    reference to its bytes left, so that the bytes are not held while it is parsed.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{what} is not valid JSON: {str(error)[:200]}") from None
    try:
        cost = json_cost(text)
    except ValueError as error:
        raise ValueError(f"{what} is not valid JSON for galleria: {error}") from None
    if cost > ratio * len(text) + SLACK:
        if _DEEP.match(text):
            raise ValueError(f"{what} is not valid JSON: nested too deeply")
        raise ValueError(
            f"{what} is not valid JSON for galleria: its {len(text)} characters hold so many small "
            f"values that parsing would take about {cost / max(len(text), 1):.1f} times its size in "
            f"memory (at most {ratio:g} allowed; galleria never writes such a file)"
        )
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{what} is not valid JSON: nested too deeply") from None
    except ValueError as error:  # JSONDecodeError; and int() of over 4,300 digits
        raise ValueError(f"{what} is not valid JSON: {str(error)[:200]}") from None
