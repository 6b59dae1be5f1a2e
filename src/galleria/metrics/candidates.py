"""The bridge from ranked search results to relevance: no score is negated by hand.

The store returns, per query, a list of candidates best first (their scores are distances, lower
is better). Metrics need to know which of those results are relevant; with labels, a result is
relevant when its label equals the query's. :func:`ranked_relevance` turns the ranked lists into
the ``hits`` matrix and the per-query counts of relevant gallery items that the summary metrics in
:mod:`galleria.metrics.relevance` take.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["RankedRelevance", "ranked_relevance"]


@dataclass(frozen=True)
class RankedRelevance:
    """Which ranked results are relevant, and how many relevant items each query has.

    Attributes
    ----------
    hits : numpy.ndarray of bool, shape (n, depth)
        ``hits[i, j]`` is True when the j-th result (best first) of query i is relevant; rows of
        shorter lists are padded with False. ``depth`` is the length of the longest list.
    n_relevant : numpy.ndarray of int64, shape (n,)
        The number of gallery items relevant to each query (R), whether retrieved or not.
    """

    hits: npt.NDArray[np.bool_]
    n_relevant: npt.NDArray[np.int64]


def ranked_relevance(
    candidate_lists: Sequence[Sequence[Any]],
    query_labels: Sequence[Hashable],
    gallery_labels: Mapping[str, Hashable],
    *,
    exclude_paths: Sequence[str | None] | None = None,
) -> RankedRelevance:
    """Relevance of every ranked result from labels: relevant means "same label as the query".

    Parameters
    ----------
    candidate_lists : sequence of sequences
        One ranked list per query, best first; every item has a ``.path`` (e.g. ``Candidate``).
    query_labels : sequence of hashable
        The label of each query.
    gallery_labels : mapping of str to hashable
        The label of every gallery path. It defines the gallery: ``n_relevant`` counts its paths
        whose label equals the query's.
    exclude_paths : sequence of (str or None), optional
        One entry per query. When a query is itself a gallery image, give its path here: results
        with that path are dropped from the query's list (they are not counted as hits and do not
        take a position), and the path is not counted in ``n_relevant``. ``None`` excludes nothing
        for that query.

    Returns
    -------
    RankedRelevance
        ``hits`` (n, depth) and ``n_relevant`` (n,). ``n_relevant`` can be 0 for a query whose
        label has no gallery item; the AP and PR metrics reject such queries.

    Raises
    ------
    TypeError
        Arguments of the wrong kind (a list item without ``.path``, a non-str exclude path).
    ValueError
        ``query_labels`` or ``exclude_paths`` of a length other than the number of lists.
    KeyError
        A result or exclude path that ``gallery_labels`` does not know.

    Examples
    --------
    >>> from galleria.store.candidate import Candidate
    >>> labels = {"a.png": "cat", "b.png": "dog", "c.png": "cat"}
    >>> lists = [[Candidate("a.png", 0.0), Candidate("b.png", 0.2), Candidate("c.png", 0.3)]]
    >>> result = ranked_relevance(lists, ["cat"], labels, exclude_paths=["a.png"])
    >>> result.hits.tolist(), result.n_relevant.tolist()
    ([[False, True]], [1])
    """
    excluded = _checked_arguments(candidate_lists, query_labels, gallery_labels, exclude_paths)
    n = len(candidate_lists)
    label_counts = Counter(gallery_labels.values())
    rows: list[list[bool]] = []
    n_relevant = np.zeros(n, dtype=np.int64)
    for query, (results, label, own_path) in enumerate(
        zip(candidate_lists, query_labels, excluded, strict=True)
    ):
        rows.append(_relevant_row(query, results, label, own_path, gallery_labels))
        own_counts = own_path is not None and gallery_labels[own_path] == label
        n_relevant[query] = label_counts.get(label, 0) - int(own_counts)
    depth = max((len(row) for row in rows), default=0)
    hits = np.zeros((n, depth), dtype=bool)
    for query, row in enumerate(rows):
        hits[query, : len(row)] = row
    return RankedRelevance(hits=hits, n_relevant=n_relevant)


def _checked_arguments(
    candidate_lists: Any, query_labels: Any, gallery_labels: Any, exclude_paths: Any
) -> Sequence[str | None]:
    """Check :func:`ranked_relevance`'s arguments (kinds, lengths); return one exclude path per list."""
    if isinstance(candidate_lists, (str, bytes)) or not isinstance(candidate_lists, Sequence):
        raise TypeError(
            f"candidate_lists must be a sequence of ranked lists, got {type(candidate_lists).__name__}"
        )
    if not isinstance(gallery_labels, Mapping):
        raise TypeError(
            f"gallery_labels must be a mapping of path to label, got {type(gallery_labels).__name__}"
        )
    n = len(candidate_lists)
    if isinstance(query_labels, (str, bytes)) or not isinstance(query_labels, Sequence):
        raise TypeError(
            f"query_labels must be a sequence with one label per query, got {type(query_labels).__name__}"
        )
    if len(query_labels) != n:
        raise ValueError(f"query_labels must have {n} entries (one per ranked list), got {len(query_labels)}")
    excluded: Sequence[str | None] = [None] * n if exclude_paths is None else exclude_paths
    if isinstance(excluded, (str, bytes)) or not isinstance(excluded, Sequence):
        raise TypeError(f"exclude_paths must be a sequence of str or None, got {type(excluded).__name__}")
    if len(excluded) != n:
        raise ValueError(f"exclude_paths must have {n} entries (one per ranked list), got {len(excluded)}")
    return excluded


def _relevant_row(
    query: int, results: Any, label: Hashable, own_path: str | None, gallery_labels: Mapping[str, Hashable]
) -> list[bool]:
    """Query ``query``'s ranked results as relevant or not, its own path (``own_path``) dropped."""
    if own_path is not None:
        if not isinstance(own_path, str):
            raise TypeError(f"exclude_paths[{query}] must be a str or None, got {own_path!r}")
        if own_path not in gallery_labels:
            raise KeyError(f"exclude_paths[{query}] = {own_path!r} is not a gallery path")
    if isinstance(results, (str, bytes)) or not isinstance(results, Sequence):
        raise TypeError(
            f"candidate_lists[{query}] must be a sequence of results, got {type(results).__name__}"
        )
    row: list[bool] = []
    for position, result in enumerate(results):
        path = getattr(result, "path", None)
        if not isinstance(path, str):
            raise TypeError(f"candidate_lists[{query}][{position}] has no str .path: {result!r}")
        if path == own_path:
            continue
        if path not in gallery_labels:
            raise KeyError(f"candidate_lists[{query}][{position}].path = {path!r} is not a gallery path")
        row.append(gallery_labels[path] == label)
    return row
