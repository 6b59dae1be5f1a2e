"""Duplicate and near-duplicate groups of a gallery: star groups around the image kept.

**What counts.** A near-duplicate is *the same picture*: resized, re-encoded, brightened or darkened,
cropped by a few percent, or stored turned with an EXIF orientation (the reader applies it, so the
pixels are the same). A neighbouring view of an object, a look-alike, a greyscale or a mirrored copy
is not. **Exact duplicates** — the same decoded pixels (equal pixel digests, recorded at build:
:attr:`~galleria.InMemoryImageEmbeddingStore.pixel_digests`) — are a tier of their own: always
grouped, at distance 0, whatever the threshold.

**Star groups.** The images are ranked by the ``keep`` rule (:data:`KEEP_RULES`; ``best`` by
default: the most pixels from the image header, then the most bytes, then the oldest, then the path;
a URL or missing file after every local file). In that order, an image not yet in a group becomes a
*representative* — the image its group keeps — and takes every image not yet in a group that lies
within ``threshold`` of it (or has its pixels) and, by default, is the same picture by a look at
both (:mod:`galleria.curation.verify`; the candidates then lie within ``SEARCH_FACTOR`` × the
threshold, or are near by their pictures' fingerprints, in galleries of up to ``FINGERPRINT_LIMIT``
images). Every member is therefore a duplicate *of the image kept*, never only of another member:
a chain ``a – b – c`` with ``a`` and ``c`` further apart than the threshold is never one group of three.

**The threshold** is calibrated on the store itself (:func:`calibrated_threshold`): a fraction of a
low quantile of the distances from every image to its :data:`DEFAULT_K` nearest neighbours (how far
apart the gallery's closest *different* images lie), held between the embedder's floor and cap
(:data:`THRESHOLD_BOUNDS`). It is a function of the store's vectors alone, so two runs on one store
state apply the same threshold, and it is reported (:class:`DuplicateReport`, ``--json``,
``galleria info``).

The core, :func:`star_groups`, works on the graph's arrays: memory grows with the gallery times
``k``, never with the gallery squared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from galleria.curation.candidates import candidates
from galleria.curation.keep import (
    DEFAULT_KEEP,
    KEEP_RULES,
    FileFacts,
    file_facts,
    keep_order,
    kept_because,
    rank_key,
)
from galleria.curation.stars import involved_rows, star_groups, twin_classes
from galleria.curation.threshold import (
    CALIBRATION_FRACTION,
    CALIBRATION_QUANTILE,
    DEFAULT_K,
    FALLBACK_BOUNDS,
    SEARCH_FACTOR,
    THRESHOLD_BOUNDS,
    calibrated_threshold,
    calibration_of,
    check_threshold,
    store_threshold,
    threshold_bounds,
)
from galleria.curation.verify import FINGERPRINT_LIMIT, SAME_PICTURE, PictureCheck

__all__ = [
    "CALIBRATION_FRACTION",
    "CALIBRATION_QUANTILE",
    "DEFAULT_K",
    "DEFAULT_KEEP",
    "FALLBACK_BOUNDS",
    "KEEP_RULES",
    "THRESHOLD_BOUNDS",
    "DuplicateGroup",
    "DuplicateReport",
    "FileFacts",
    "calibrated_threshold",
    "check_threshold",
    "duplicate_groups",
    "duplicate_report",
    "duplicates",
    "file_facts",
    "find_duplicates",
    "involved_rows",
    "keep_order",
    "kept_because",
    "star_groups",
    "store_threshold",
    "threshold_bounds",
]


@dataclass(frozen=True)
class DuplicateGroup:
    """One star group: its paths (sorted), the path kept (its representative), each member's distance
    to it (the kept path's own: 0), whether all are the same pixels, and why that path is kept."""

    paths: tuple[str, ...]
    exact: bool
    keep: str
    distances: tuple[float, ...] = ()
    kept_because: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "paths": list(self.paths),
            "kind": "exact" if self.exact else "near",
            "keep": self.keep,
            "kept_because": self.kept_because,
            "distances": {
                path: round(distance, 6)
                for path, distance in zip(self.paths, self.distances, strict=True)
                if path != self.keep
            },
        }


@dataclass(frozen=True)
class DuplicateReport:
    """The groups with the threshold applied, how it was chosen and the rule that kept each image."""

    groups: list[DuplicateGroup]
    threshold: float
    basis: dict[str, Any]
    k: int
    keep: str
    images: int
    notes: list[str] = field(default_factory=list)
    #: How the pictures were checked: the radius searched, the similarity needed, the pairs checked
    #: (None: not checked, every pair within the threshold is a copy).
    check: dict[str, Any] | None = None


class _Facts(dict[int, FileFacts]):
    """Each row's :class:`FileFacts`, read when first wanted (headers only with ``header``)."""

    def __init__(self, paths: list[str], header: bool) -> None:
        super().__init__()
        self._paths = paths
        self._header = header

    def __missing__(self, row: int) -> FileFacts:
        facts = self[row] = file_facts(self._paths[row], header=self._header)
        return facts


def _described(
    found: list[tuple[int, np.ndarray, np.ndarray]],
    paths: list[str],
    rule: str,
    facts: dict[int, FileFacts],
    classes: np.ndarray,
) -> list[DuplicateGroup]:
    """The core's stars as :class:`DuplicateGroup` (paths sorted, the kept one, why it is kept)."""
    groups = []
    for representative, members, gaps in found:
        members_facts = sorted(members.tolist(), key=lambda row: rank_key(rule, paths[row], facts[row]))
        by_path = {
            paths[representative]: 0.0,
            **{paths[m]: float(g) for m, g in zip(members.tolist(), gaps.tolist(), strict=True)},
        }
        ordered = tuple(sorted(by_path))
        exact = bool(classes[representative] >= 0 and np.all(classes[members] == classes[representative]))
        groups.append(
            DuplicateGroup(
                ordered,
                exact,
                paths[representative],
                tuple(by_path[path] for path in ordered),
                kept_because(rule, facts[representative], facts[members_facts[0]]),
            )
        )
    return groups


def _check_summary(
    pictures: PictureCheck | None, radius: float, printed: bool, found_pairs: int
) -> tuple[dict[str, Any] | None, list[str]]:
    """The report's ``check`` (None: not checked) and what to note about it."""
    if pictures is None:
        return None, []
    checked = {
        "search_radius": radius,
        "same_picture": SAME_PICTURE,
        "pairs_checked": pictures.checked,
        "fingerprints": printed,
        "fingerprint_pairs": found_pairs,
    }
    if printed:
        return checked, []
    return checked, [
        f"above {FINGERPRINT_LIMIT:,} images the candidates come from the vectors alone (no picture "
        "fingerprints): a copy the embedder places far from its original may be missed"
    ]


def duplicate_report(
    store: Any,
    *,
    threshold: Any = None,
    k: Any = DEFAULT_K,
    keep: str = DEFAULT_KEEP,
    store_file: Any = None,
    check: bool = True,
) -> DuplicateReport:
    """The duplicate groups of ``store``'s gallery with the threshold applied (module docstring).

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        A built store.
    threshold : float in [0, 2], optional
        The largest distance of a near copy to the image kept; None: calibrated on the store
        (:func:`store_threshold`).
    k : int
        Neighbours searched per image (the graph's ``k``).
    keep : {"best", "first", "largest", "oldest"}
        Which image each group keeps (and is formed around).
    store_file : str, optional
        The store's file: its neighbour graph is then kept beside it (``STORE.graph``).
    check : bool
        Look at the pictures (:mod:`galleria.curation.verify`): pairs within ``SEARCH_FACTOR`` ×
        the threshold, and pairs near by their pictures' fingerprints (up to ``FINGERPRINT_LIMIT``
        images: every readable image is then decoded once, small), are candidates, the same picture
        or not by a comparison of the two; a pair whose
        files cannot be read (URLs, missing files) is a copy within the threshold. False: every pair
        within the threshold is a copy, no file is read beyond its header.

    Raises
    ------
    TypeError, ValueError
        A threshold outside [0, 2], a bad ``k`` or ``keep``, naming the value.
    """
    from galleria._validation import check_choice, check_positive_int
    from galleria.store.graph import neighbor_graph

    rule = check_choice("keep", keep, KEEP_RULES)
    wanted = check_positive_int("k", k)
    chosen = None if threshold is None else check_threshold(threshold)
    paths = list(store.paths)
    if len(paths) < 2:
        value, basis = (
            calibration_of(store, np.empty((0, 0))) if chosen is None else (chosen, {"source": "given"})
        )
        return DuplicateReport(
            [], value, basis, wanted, rule, len(paths), [f"{len(paths)} image(s): nothing to compare"]
        )
    ids, distances = neighbor_graph(store, max(wanted, DEFAULT_K), store_file=store_file)
    value, basis = calibration_of(store, distances) if chosen is None else (chosen, {"source": "given"})
    ids, distances = ids[:, :wanted], distances[:, :wanted]
    digests = getattr(store, "pixel_digests", None)
    radius = min(2.0, SEARCH_FACTOR * value) if check else value
    facts = _Facts(paths, rule == "best")
    pictures = PictureCheck(paths, lambda row: facts[row].local) if check else None
    printed = pictures is not None and len(paths) <= FINGERPRINT_LIMIT
    ids, distances, limit, saturated, searcher, found_pairs = candidates(
        store, ids, distances, radius, value, pictures if printed else None
    )
    rows = involved_rows(ids, distances, limit, digests)
    order = keep_order(rows, paths, rule, facts)

    def accept(first: int, second: int, distance: float) -> bool:
        alike = None if pictures is None else pictures.check(first, second)
        return distance <= value if alike is None else alike >= SAME_PICTURE

    found = star_groups(order, ids, distances, limit, digests, searcher, accept, saturated)
    groups = _described(found, paths, rule, facts, twin_classes(digests, len(paths)))
    groups.sort(key=lambda group: (-len(group.paths), group.keep))
    checked, extra = _check_summary(pictures, radius, printed, found_pairs)
    notes = _notes(groups, len(paths), basis, facts) + extra
    return DuplicateReport(groups, value, basis, wanted, rule, len(paths), notes, checked)


#: Images at most this many pixels a side are tiny: a half-size copy has a few pixels left.
TINY_SIDE = 32


def _notes(
    groups: list[DuplicateGroup],
    images: int,
    basis: dict[str, Any],
    facts: dict[int, FileFacts] | None = None,
) -> list[str]:
    """What the run saw, in words (shown by the command line)."""
    notes = []
    sides = [max(f.width or 0, f.height or 0) for f in (facts or {}).values() if f.width]
    tiny = bool(sides) and max(sides) <= TINY_SIDE
    if tiny:
        notes.append(
            f"the images compared are tiny (at most {TINY_SIDE} px a side): a resized or cropped copy of "
            "a tiny image is hard to tell from a look-alike; exact copies are always found"
        )
    if not groups:
        notes.append(f"no duplicates among {images} images")
    grouped = sum(len(group.paths) for group in groups)
    if images and grouped == images and len(groups) == 1:
        notes.append("every image is a copy of one picture")
    if basis.get("rule") == "floor":
        notes.append(
            "the gallery's images lie very close together (tiny or many copies): the threshold is the "
            f"embedder's floor, {basis['floor']:g}; near copies further apart than that are not grouped"
        )
    elif basis.get("rule") == "cap":
        notes.append(
            f"the gallery's images lie far apart: the threshold is the embedder's cap, {basis['cap']:g}"
        )
    return notes


def duplicates(
    store: Any,
    *,
    threshold: Any = None,
    k: Any = DEFAULT_K,
    keep: str = DEFAULT_KEEP,
    store_file: Any = None,
    check: bool = True,
) -> list[DuplicateGroup]:
    """The duplicate groups of ``store``'s gallery: :func:`duplicate_report`'s ``groups``."""
    return duplicate_report(
        store, threshold=threshold, k=k, keep=keep, store_file=store_file, check=check
    ).groups


#: Other names of :func:`duplicates` (``galleria.duplicates`` is the public one).
duplicate_groups = find_duplicates = duplicates
