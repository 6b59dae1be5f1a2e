"""Text helpers for showing paths in narrow places, and on terminals that obey control characters."""

from __future__ import annotations

import math
import unicodedata

__all__ = ["format_score", "printable", "shorten_middle"]

#: Format characters that reorder or hide text on a terminal (bidi overrides and isolates).
_BIDI = frozenset(chr(code) for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F))


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char, f"\\x{code:02x}")
    return f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` with its control characters escaped (``\\x1b``, ``\\n``, ``\\u202e``), for human output.

    A stored path is untrusted: printed raw, ``\\x1b]0;...\\x07`` retitles the terminal and a
    newline forges result lines. Control characters (C0, DEL, C1), line and paragraph separators
    and bidirectional overrides are written as escapes; everything else is kept as it is.

    Examples
    --------
    >>> printable("/g/\\x1b]0;PWNED\\x07a.png")
    '/g/\\\\x1b]0;PWNED\\\\x07a.png'
    >>> printable("/g/ok/été.png")
    '/g/ok/été.png'
    """
    value = str(text)
    if value.isprintable():
        return value
    return "".join(
        _escape(char) if unicodedata.category(char) in ("Cc", "Zl", "Zp") or char in _BIDI else char
        for char in value
    )


def shorten_middle(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters by replacing its middle with ``…`` (kept whole if it fits).

    Examples
    --------
    >>> shorten_middle("/photos/holiday/2023/beach/IMG_0001.jpg", 24)
    '/photos/hol…IMG_0001.jpg'
    >>> shorten_middle("short.png", 24)
    'short.png'
    """
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    tail = (width - 1) // 2 + (width - 1) % 2
    head = width - 1 - tail
    return text[:head] + "…" + text[len(text) - tail :]


def shorten_path(path: str, width: int) -> str:
    """``path`` cut to ``width`` characters so that its file name and its folder stay readable: the
    front of the path gives way first (``…/cat/IMG_0001.jpg``), and only when those two do not fit is
    their middle cut (:func:`shorten_middle`).

    Examples
    --------
    >>> shorten_path("/photos/holiday/2023/beach/IMG_0001.jpg", 24)
    '…/beach/IMG_0001.jpg'
    >>> shorten_path("/data/animals/cat/a.png", 40)
    '/data/animals/cat/a.png'
    >>> shorten_path("/g/a-very-long-label-name/a-very-long-file-name.png", 24)
    '…/a-very-lon…le-name.png'
    """
    if len(path) <= width:
        return path
    parts = path.split("/")
    tail = "/".join(parts[-2:])
    if len(tail) + 2 > width:
        return "…/" + shorten_middle(tail, max(1, width - 2))
    return "…/" + _last_fitting(parts[:-2], tail, width)


def _last_fitting(folders: list[str], tail: str, width: int) -> str:
    """``tail`` with as many of the last ``folders`` before it as fit in ``width - 2`` characters."""
    kept = tail
    for folder in reversed(folders):
        if len(folder) + 1 + len(kept) + 2 > width:
            break
        kept = f"{folder}/{kept}"
    return kept


def format_score(score: float, digits: int = 4) -> str:
    """A score with ``digits`` decimals, never a negative zero (``-0.00001`` → ``0.0000``); a
    non-finite score is ``n/a`` (never shown as a number).

    Examples
    --------
    >>> format_score(-0.000012), format_score(0.123456), format_score(-0.5), format_score(float("nan"))
    ('0.0000', '0.1235', '-0.5000', 'n/a')
    """
    if not math.isfinite(score):
        return "n/a"
    text = f"{score:.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text
