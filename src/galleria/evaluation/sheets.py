"""Contact sheets: for the queries re-ranking moved most, their results before and after."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["SHEET_COUNT", "SHEET_DEPTH", "SHEET_THUMBNAIL", "ContactSheet", "contact_sheets"]

#: Results shown per list on a contact sheet, and contact sheets in a report.
SHEET_DEPTH = 10


SHEET_COUNT = 20


#: Longest side of a contact sheet thumbnail, in pixels.
SHEET_THUMBNAIL = 96


@dataclass(frozen=True)
class ContactSheet:
    """One query of the HTML report: its image and label, and two ranked lists of gallery paths.

    ``before`` and ``after`` are the first results of the two configurations compared (plain and
    re-ranked); ``labels`` gives the label of every path shown, so relevant results are marked.
    """

    query: str
    query_label: str
    before: list[str]
    after: list[str]
    labels: Mapping[str, str] = field(default_factory=dict)


def contact_sheets(
    queries: Sequence[str],
    query_labels: Sequence[str],
    before: Sequence[Sequence[str]],
    after: Sequence[Sequence[str]],
    gallery_labels: Mapping[str, str],
    *,
    count: int = SHEET_COUNT,
    depth: int = SHEET_DEPTH,
) -> list[ContactSheet]:
    """The ``count`` queries whose first ``depth`` results changed most from ``before`` to ``after``.

    Change is measured by :func:`galleria.viewer.rank_changes` (results new to the list first, then
    positions that changed); ties keep query order, and unchanged queries are left out.

    Examples
    --------
    >>> sheets = contact_sheets(["q1", "q2"], ["a", "b"], [["x", "y"], ["x", "y"]], [["x", "y"], ["y", "z"]],
    ...                         {"x": "a", "y": "b", "z": "b"})
    >>> [sheet.query for sheet in sheets], sheets[0].after
    (['q2'], ['y', 'z'])
    """
    from galleria.viewer.compare import rank_changes

    scored = []
    for position, (old, new) in enumerate(zip(before, after, strict=True)):
        change = rank_changes(list(old[:depth]), list(new[:depth]))
        if change != (0, 0):
            scored.append((-change[0], -change[1], position))
    scored.sort()
    sheets = []
    for _, _, position in scored[:count]:
        old, new = list(before[position][:depth]), list(after[position][:depth])
        sheets.append(
            ContactSheet(
                query=queries[position],
                query_label=str(query_labels[position]),
                before=old,
                after=new,
                labels={path: str(gallery_labels[path]) for path in old + new if path in gallery_labels},
            )
        )
    return sheets
