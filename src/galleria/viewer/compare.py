"""One query searched plainly and re-ranked, side by side, with each re-ranked item's change of rank.

:func:`compare_search` is what ``galleria serve`` answers; :func:`rank_changes` measures how much a
re-ranking moved a list (the HTML report shows the queries it moved most). Class marks come from
:class:`GalleryLabels`: when the gallery's images sit in class folders, an image's label is the
first-level folder under the gallery's root.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from galleria._moved import moved_names
from galleria.viewer.labels import (  # moved there; importable from here as before
    GalleryLabels as GalleryLabels,
)
from galleria.viewer.settings import (
    SearchSettings as SearchSettings,
)

__all__ = ["GalleryLabels", "RankedItem", "SearchSettings", "SideBySide", "compare_search", "rank_changes"]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(
    __name__,
    {
        "DEFAULT_K": "galleria.viewer.settings",
        "MAX_RESULTS": "galleria.viewer.settings",
        "PARAM_PREFIX": "galleria.viewer.settings",
        "search_defaults": "galleria.viewer.settings",
        "setting_keys": "galleria.viewer.settings",
    },
)


@dataclass(frozen=True)
class RankedItem:
    """One result: gallery path, score (a distance), 1-based rank; ``previous_rank`` in the plain list."""

    path: str
    score: float
    rank: int
    previous_rank: int | None = None
    same_label: bool | None = None

    def to_dict(self, *, with_previous: bool) -> dict[str, Any]:
        """The JSON entry (``previous_rank`` only for re-ranked items)."""
        entry: dict[str, Any] = {"path": self.path, "score": self.score, "rank": self.rank}
        if with_previous:
            entry["previous_rank"] = self.previous_rank
        if self.same_label is not None:
            entry["same_label"] = self.same_label
        return entry


@dataclass(frozen=True)
class SideBySide:
    """The plain results and, when re-ranking is on, the re-ranked ones; with the time it took."""

    plain: list[RankedItem]
    reranked: list[RankedItem] | None
    elapsed_ms: float
    query_label: str | None = None
    #: The exact αQE and re-ranking values the search used (:meth:`galleria.retrieval.Searcher.used`).
    used: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON answer of ``POST /api/search`` (with the exact settings it used)."""
        return {
            "settings": self.used,
            "plain": [item.to_dict(with_previous=False) for item in self.plain],
            "reranked": None
            if self.reranked is None
            else [item.to_dict(with_previous=True) for item in self.reranked],
            "elapsed_ms": self.elapsed_ms,
            "query_label": self.query_label,
        }


def _items(
    candidates: Sequence[Any],
    labels: GalleryLabels | None,
    query_label: str | None,
    previous: Mapping[str, int] | None = None,
) -> list[RankedItem]:
    items = []
    for rank, candidate in enumerate(candidates, start=1):
        same = None
        if labels is not None and query_label is not None:
            same = labels.label_of(candidate.path) == query_label
        items.append(
            RankedItem(
                path=candidate.path,
                score=float(candidate.score),
                rank=rank,
                previous_rank=None if previous is None else previous.get(candidate.path),
                same_label=same,
            )
        )
    return items


def compare_search(
    store: Any,
    query: Any,
    settings: SearchSettings,
    *,
    kind: str = "image",
    labels: GalleryLabels | None = None,
) -> SideBySide:
    """Search one query and, with re-ranking on, re-rank its pool; both lists of ``settings.k``.

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        A built store.
    query
        An image (array, PIL image), a text (``kind="text"``), or a gallery path (``kind="path"``);
        a gallery path is left out of its own results and searched by its stored embedding (its
        file is not read).
    settings : SearchSettings
        ``k``, αQE and re-ranking settings. The re-ranked list is what
        :meth:`galleria.retrieval.Searcher.search` gives for them on ``store`` (the one path); the
        plain list is ``store``'s search (with αQE when on), and each re-ranked item's
        ``previous_rank`` is its rank there.
    labels : GalleryLabels, optional
        Marks results of the query's class when the query is a gallery path in a class folder.
    """
    from galleria.retrieval import Searcher

    if kind not in {"image", "text", "path"}:
        raise ValueError(f"kind must be 'image', 'text' or 'path', got {kind!r}")
    started = time.perf_counter()
    searcher = Searcher(store, settings.config)
    k = settings.k
    extra = 1 if kind == "path" else 0
    depth = searcher.depth(k)

    def first_stage(plain: bool) -> list[Any]:
        found = searcher.candidates([query], depth + extra, kind=kind, plain=plain)[0]
        if kind == "path":
            found = [candidate for candidate in found if candidate.path != query]
        return found[:depth]

    found = first_stage(plain=True)
    query_label = labels.label_of(query) if (labels is not None and kind == "path") else None
    plain = _items(found[:k], labels, query_label)
    reranked = None
    if searcher.reranker is not None and found:
        # DBA + αQE (and a prepared gallery) takes its candidates from its own store
        pool = found if searcher.searched is store else first_stage(plain=False)
        order = searcher.finish([pool], k)[0]
        previous = {candidate.path: rank for rank, candidate in enumerate(found, start=1)}
        reranked = _items(order, labels, query_label, previous)
    elapsed = round(1000.0 * (time.perf_counter() - started), 3)
    return SideBySide(
        plain=plain, reranked=reranked, elapsed_ms=elapsed, query_label=query_label, used=searcher.used()
    )


def rank_changes(before: Sequence[str], after: Sequence[str]) -> tuple[int, int]:
    """How much ``after`` differs from ``before`` (two ranked lists of paths of the same length).

    Returns ``(new, moved)``: how many items of ``after`` are not in ``before`` at all, and how many
    positions hold another item than before. Sort by it, largest first, to find the lists a
    re-ranking changed most.

    Examples
    --------
    >>> rank_changes(["a", "b", "c"], ["b", "a", "d"])
    (1, 3)
    """
    seen = set(before)
    new = sum(1 for item in after if item not in seen)
    moved = sum(1 for old, item in zip(before, after, strict=False) if old != item)
    moved += abs(len(after) - len(before))
    return new, moved
