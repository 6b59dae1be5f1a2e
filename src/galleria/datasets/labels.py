"""Labels drawn from folders, and the checks that keep them from silently meaning something else.

An image's label is its first folder under the *labels' root*: ``root/cat/a.png`` and
``root/cat/kittens/b.png`` are both ``cat``. ``galleria build`` records that root in the store
(:attr:`~galleria.store.InMemoryImageEmbeddingStore.labels_root`), so that ``evaluate`` and ``tune``
read the same labels later, and refuse to score when they no longer can:

* :func:`labels_root_of` — the root a folder's build records (None for a folder without label
  sub-folders);
* :func:`labels_under` — each path's label under a root, and the paths that lie outside it;
* :func:`label_problem` — why a set of labels cannot mean what a user thinks (fewer than 2 labels,
  one label holding more than half the gallery while every other holds one image, or every label one
  image), or None;
* :func:`summarise_labels` — the number of labels, images per label (min, median) and the root,
  as evaluation reports print them.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["LabelSummary", "label_problem", "labels_root_of", "labels_under", "summarise_labels"]


def _inside(path: str, root: str) -> bool:
    return path.startswith(root.rstrip(os.sep) + os.sep)


def labels_root_of(folder: str, paths: Sequence[str]) -> str | None:
    """``folder`` when at least one of ``paths`` lies in a sub-folder of it (it is labelled), else None.

    Examples
    --------
    >>> labels_root_of("/g", ["/g/cat/1.png", "/g/dog/2.png"])
    '/g'
    >>> labels_root_of("/g", ["/g/1.png"]) is None
    True
    """
    root = os.path.normpath(folder)
    if any(_inside(os.path.dirname(path), root) for path in paths):
        return root
    return None


def labels_under(paths: Sequence[str], root: str) -> tuple[list[str], list[str]]:
    """Each path's label (its first folder under ``root``; ``""`` when outside or directly in it) and
    the paths that are not inside a sub-folder of ``root``.

    Examples
    --------
    >>> labels_under(["/g/cat/1.png", "/g/cat/k/2.png", "/q/3.png"], "/g")
    (['cat', 'cat', ''], ['/q/3.png'])
    """
    labels: list[str] = []
    outside: list[str] = []
    for path in paths:
        if _inside(os.path.dirname(path), root):
            labels.append(os.path.relpath(path, root).split(os.sep, 1)[0])
        else:
            labels.append("")
            outside.append(path)
    return labels, outside


def label_problem(labels: Sequence[Any]) -> str | None:
    """Why ``labels`` (one per gallery image) cannot be scored as a user means them, or None.

    * fewer than 2 distinct labels: every result is relevant, every metric is 1;
    * one label holding more than half the images while every other label holds one image: the
      labels are almost surely folders of another layout (a gallery of loose files beside one folder);
    * every label holding one image: no query has a match of its label to find.

    Examples
    --------
    >>> label_problem(["a", "a", "b", "b"]) is None
    True
    >>> label_problem(["a", "a"])
    "1 label ('a'): scoring needs at least 2"
    >>> label_problem(["a"] * 5 + ["b", "c"])
    "label 'a' holds 5 of 7 images while the 2 other labels hold one image each"
    >>> label_problem(["a", "b", "c"])
    'each of the 3 labels holds one image: no query has a match of its label to find'
    """
    counts = Counter(labels)
    if len(counts) < 2:
        shown = ", ".join(repr(label) for label in list(counts)[:3])
        return f"{len(counts)} label ({shown}): scoring needs at least 2"
    (top, size), *rest = counts.most_common()
    if size == 1:
        return f"each of the {len(counts)} labels holds one image: no query has a match of its label to find"
    if size * 2 > len(labels) and all(count == 1 for _, count in rest):
        return (
            f"label {top!r} holds {size} of {len(labels)} images while the {len(rest)} other labels "
            "hold one image each"
        )
    return None


@dataclass(frozen=True)
class LabelSummary:
    """What an evaluation's labels are: how many, how many images each, and where they come from."""

    n_labels: int
    min_per_label: int
    median_per_label: float
    root: str | None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able record ``metrics.json`` keeps (``dataset.labels``)."""
        return {
            "n_labels": self.n_labels,
            "images_per_label": {"min": self.min_per_label, "median": self.median_per_label},
            "root": self.root,
        }

    def line(self) -> str:
        """One line for the text output."""
        median = f"{self.median_per_label:g}"
        where = f" from the folders of {self.root}" if self.root else ""
        return f"{self.n_labels} labels{where}, images per label: min {self.min_per_label}, median {median}"


def summarise_labels(labels: Sequence[Any], root: str | None) -> LabelSummary:
    """The :class:`LabelSummary` of ``labels`` (one per image) drawn under ``root``.

    Examples
    --------
    >>> summarise_labels(["a", "a", "b", "c", "c", "c"], "/g").to_dict()
    {'n_labels': 3, 'images_per_label': {'min': 1, 'median': 2.0}, 'root': '/g'}
    """
    sizes = sorted(Counter(labels).values())
    if not sizes:
        return LabelSummary(0, 0, 0.0, root)
    middle = len(sizes) // 2
    median = float(sizes[middle]) if len(sizes) % 2 else (sizes[middle - 1] + sizes[middle]) / 2
    return LabelSummary(len(sizes), sizes[0], median, root)
