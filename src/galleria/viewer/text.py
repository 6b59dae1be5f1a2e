"""Text helpers for showing paths in narrow places."""

from __future__ import annotations

__all__ = ["format_score", "shorten_middle"]


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


def format_score(score: float, digits: int = 4) -> str:
    """A score with ``digits`` decimals, never a negative zero (``-0.00001`` → ``0.0000``).

    Examples
    --------
    >>> format_score(-0.000012), format_score(0.123456), format_score(-0.5)
    ('0.0000', '0.1235', '-0.5000')
    """
    text = f"{score:.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text
