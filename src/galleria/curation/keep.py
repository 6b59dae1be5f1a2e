"""The image a duplicate group keeps (its representative), chosen without decoding an image.

Rules (:data:`KEEP_RULES`): ``best`` — the most pixels (from the image header:
:func:`galleria.images.reading.read_image_size`), then the most bytes, then the oldest file, then
the path; ``first`` — the path; ``largest`` — the most bytes; ``oldest`` — the oldest file. Under
every rule but ``first``, a local file comes before a URL or a missing file; every rule ends on the
path, so the order is total.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DEFAULT_KEEP", "KEEP_RULES", "FileFacts", "file_facts", "keep_order", "kept_because", "rank_key"]

#: How the image kept in each group (its representative) is chosen.
KEEP_RULES = ("best", "first", "largest", "oldest")
#: The default rule: the best copy (most pixels, then most bytes, then the oldest file).
DEFAULT_KEEP = "best"


@dataclass(frozen=True)
class FileFacts:
    """What the keep rules read of one item, without decoding it: None where unknown."""

    local: bool
    width: int | None = None
    height: int | None = None
    size: int | None = None
    mtime_ns: int | None = None

    @property
    def pixels(self) -> int:
        return (self.width or 0) * (self.height or 0)


def file_facts(path: str, *, header: bool = True) -> FileFacts:
    """``stat`` of ``path`` and, with ``header``, its (width, height) from the image header alone.

    A URL, a missing or irregular file is not local (its facts unknown); an unreadable header leaves
    the size in pixels unknown.
    """
    from galleria.store import is_url

    if is_url(path):
        return FileFacts(False)
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return FileFacts(False)
    if not stat.S_ISREG(status.st_mode):
        return FileFacts(False)
    width = height = None
    if header:
        from galleria.images.reading import ImageReadError, read_image_size

        try:
            width, height = read_image_size(path)
        except (ImageReadError, ValueError):
            pass
    return FileFacts(True, width, height, int(status.st_size), int(status.st_mtime_ns))


def rank_key(rule: str, path: str, facts: FileFacts) -> tuple[Any, ...]:
    """Sorting key of ``rule`` (smaller first): a local file before any other, then the rule, then path."""
    absent = 0 if facts.local else 1
    if rule == "first":
        return (path,)
    if rule == "largest":
        return (absent, -(facts.size or 0), path)
    if rule == "oldest":
        return (absent, facts.mtime_ns if facts.mtime_ns is not None else 0, path)
    return (
        absent,
        -facts.pixels,
        -(facts.size or 0),
        facts.mtime_ns if facts.mtime_ns is not None else 0,
        path,
    )


def keep_order(rows: np.ndarray, paths: Sequence[str], rule: str, facts: dict[int, FileFacts]) -> np.ndarray:
    """``rows`` ranked best first by ``rule`` (every rule ends on the path: a total order)."""
    ranked = sorted(rows.tolist(), key=lambda row: rank_key(rule, paths[row], facts[row]))
    return np.array(ranked, dtype=np.int64)


def _when(ns: int | None, *, fine: bool = False) -> str:
    import datetime

    if ns is None:
        return "unknown"
    when = datetime.datetime.fromtimestamp(ns // 1_000_000_000, tz=datetime.timezone.utc)
    text = when.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{ns % 1_000_000_000:09d}" if fine else text


def kept_because(rule: str, kept: FileFacts, runner_up: FileFacts) -> str:
    """Why ``rule`` kept an item over the group's next best (in words, with both values)."""
    if rule == "first":
        return "first path in sorted order (--keep first)"
    if kept.local and not runner_up.local:
        return "the only local file (the others are URLs or missing files)"
    if not kept.local:
        return "no local file: the first path"
    if rule == "largest" or (rule == "best" and kept.pixels == runner_up.pixels):
        if (kept.size or 0) != (runner_up.size or 0):
            what = (
                "largest file"
                if rule == "largest"
                else f"same pixel count ({kept.width}×{kept.height}), larger file"
            )
            return f"{what} ({kept.size:,} vs {runner_up.size:,} bytes)"
        if rule == "largest":
            return f"same file size ({kept.size:,} bytes): the first path"
    if rule == "best" and kept.pixels != runner_up.pixels:
        other = f"{runner_up.width or '?'}×{runner_up.height or '?'}"
        return f"largest pixel count ({kept.width}×{kept.height} vs {other})"
    if kept.mtime_ns != runner_up.mtime_ns:
        prefix = "" if rule == "oldest" else "same pixel count and bytes, "
        older, newer = _when(kept.mtime_ns), _when(runner_up.mtime_ns)
        if older == newer:  # within one second: the difference is in the fraction
            older, newer = _when(kept.mtime_ns, fine=True), _when(runner_up.mtime_ns, fine=True)
        return f"{prefix}oldest file ({older} vs {newer} UTC)"
    return "all else equal: the first path"
