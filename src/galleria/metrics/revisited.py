"""The revisited Oxford / Paris protocol (Radenović et al., CVPR 2018): Easy, Medium and Hard.

Every query's ground truth sorts gallery images into ``easy``, ``hard`` and ``junk``. Each setting
picks its positives and its junk from them:

========  ====================  ===================
setting   positives             junk (removed)
========  ====================  ===================
easy      easy                  junk ∪ hard
medium    easy ∪ hard           junk
hard      hard                  junk ∪ easy
========  ====================  ===================

The junk is removed from the ranking (similarities descending, ties to the lower gallery index)
before scoring. With the positives at 0-indexed positions ``r_0 < … < r_{R-1}`` of what remains:

* AP is the area under the precision–recall curve by the trapezoid rule of the protocol: each
  positive adds ``1/R`` of recall and the mean of the precision just before it
  (``i / r_i``, or 1 when ``r_i = 0``) and at it (``(i + 1) / (r_i + 1)``).
* mP@k is the precision at ``k' = min(k, r_{R-1} + 1)``: the depth is capped at the last positive,
  so a query with fewer than k positives can still score 1.
* Queries without positives in a setting are left out of that setting's means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from galleria.metrics._checks import _index_set, as_ks, as_score_matrix, check_finite
from galleria.metrics._ranked import (
    PR_LEVELS,
    RankedPositives,
    average_precision_trapezoid,
    collect,
    interpolated_pr,
    positive_ranks,
    top_of_block,
)

__all__ = [
    "SETTINGS",
    "RevisitedQuery",
    "check_revisited_ground_truth",
    "rank_revisited",
    "revisited_evaluate",
    "setting_figures",
]

#: The three settings, in the order the papers report them.
SETTINGS: tuple[str, ...] = ("easy", "medium", "hard")

#: Elements of one block of similarities evaluated at once.
_BLOCK_ELEMENTS = 1 << 22

RevisitedQuery = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]


def check_revisited_ground_truth(name: str, value: Any, n: int, m: int) -> list[RevisitedQuery]:
    """``(easy, hard, junk)`` index arrays per query, checked: in range, disjoint, one mapping per query."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence with one mapping per query, got {type(value).__name__}")
    if len(value) != n:
        raise ValueError(f"{name} must have {n} entries (one per query), got {len(value)}")
    result: list[RevisitedQuery] = []
    for query, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise TypeError(
                f"{name}[{query}] must be a mapping with 'easy', 'hard' and 'junk', "
                f"got {type(entry).__name__}"
            )
        parts = []
        for key in ("easy", "hard", "junk"):
            if key not in entry:
                raise ValueError(f"{name}[{query}] has no {key!r} list (it needs 'easy', 'hard' and 'junk')")
            items = entry[key]
            if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
                raise TypeError(f"{name}[{query}][{key!r}] must be a list of gallery indices, got {items!r}")
            parts.append(np.unique(_index_set(f"{name}[{query}][{key!r}]", items, m)))
        easy, hard, junk = parts
        for (first, a), (second, b) in (
            (("easy", easy), ("hard", hard)),
            (("easy", easy), ("junk", junk)),
            (("hard", hard), ("junk", junk)),
        ):
            shared = np.intersect1d(a, b)
            if shared.size:
                raise ValueError(
                    f"{name}[{query}] lists gallery index {shared[0]} as both {first!r} and {second!r}"
                )
        result.append((easy, hard, junk))
    return result


def _setting(entry: RevisitedQuery, setting: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Positives and junk of one query in one setting."""
    easy, hard, junk = entry
    if setting == "easy":
        return easy, np.concatenate([junk, hard])
    if setting == "medium":
        return np.union1d(easy, hard), junk
    return hard, np.concatenate([junk, easy])


def rank_revisited(
    matrix: np.ndarray, truth: list[RevisitedQuery], keep: int = 0
) -> dict[str, tuple[RankedPositives, npt.NDArray[np.int64]]]:
    """Ranked positives (and the first ``keep`` indices) of every query in every setting."""
    n, m = matrix.shape
    lists: dict[str, list[np.ndarray]] = {setting: [] for setting in SETTINGS}
    counts = {setting: np.zeros(n, dtype=np.int64) for setting in SETTINGS}
    tops = {setting: np.full((n, keep), -1, dtype=np.int64) for setting in SETTINGS}
    rows = max(1, _BLOCK_ELEMENTS // m)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        block = np.asarray(matrix[start:stop])
        check_finite("similarities", block, start)
        keys = block.astype(np.float64 if block.dtype.kind != "f" else block.dtype)
        for setting in SETTINGS:
            work = keys.copy()
            for local in range(stop - start):
                positives, junk = _setting(truth[start + local], setting)
                work[local, junk] = -np.inf
                lists[setting].append(positive_ranks(work[local], positives))
                counts[setting][start + local] = positives.size
            if keep:
                tops[setting][start:stop] = top_of_block(work, keep)
    return {setting: (collect(lists[setting], counts[setting]), tops[setting]) for setting in SETTINGS}


def precision_at_capped_k(ranked: RankedPositives, k: int) -> npt.NDArray[np.float64]:
    """mP@k per query: precision at ``min(k, last positive + 1)``; NaN without positives."""
    result = np.full(len(ranked.counts), np.nan)
    for query in np.flatnonzero(ranked.counts > 0):
        ranks = ranked.of(int(query))
        depth = min(k, int(ranks[-1]) + 1)
        result[query] = np.count_nonzero(ranks < depth) / depth
    return result


def revisited_evaluate(similarities: Any, ground_truth: Any, *, kappas: Any = (1, 5, 10)) -> dict[str, Any]:
    """Score a query × gallery similarity matrix by the revisited Oxford / Paris protocol.

    Parameters
    ----------
    similarities : array_like, shape (n, m)
        Query-to-gallery similarities, higher is better (finite). Note the orientation: one row per
        query (the published evaluation code takes the transpose).
    ground_truth : sequence of mappings, length n
        ``ground_truth[i]["easy"]``, ``["hard"]`` and ``["junk"]``: lists of gallery indices (other
        keys, such as ``"bbx"``, are ignored). The three lists must be disjoint.
    kappas : sequence of int, default (1, 5, 10)
        The k of the mP@k figures.

    Returns
    -------
    dict
        ``{"easy": {...}, "medium": {...}, "hard": {...}}``; each holds ``"mAP"`` and ``"mP@k"`` for
        every k (fractions in [0, 1]; NaN when no query has a positive in that setting),
        ``"valid_queries"``, and the per-query ``"ap"`` (numpy array, NaN for queries without
        positives in that setting).

    Raises
    ------
    TypeError
        Non-numeric similarities, a ground-truth entry that is not a mapping, indices that are not
        integers, kappas that are not integers.
    ValueError
        Similarities empty, not 2-D or not finite; a ground truth of the wrong length, missing a
        list, with an index out of range or listed in two categories; kappas empty or below 1.

    Examples
    --------
    >>> sims = [[0.9, 0.8, 0.7, 0.6]]
    >>> truth = [{"easy": [1], "hard": [3], "junk": [0]}]
    >>> result = revisited_evaluate(sims, truth, kappas=[1])
    >>> result["easy"]["mAP"], result["medium"]["mAP"], result["hard"]["mP@1"]
    (1.0, 0.7916666666666666, 0.0)
    """
    matrix = as_score_matrix("similarities", similarities)
    n, m = matrix.shape
    truth = check_revisited_ground_truth("ground_truth", ground_truth, n, m)
    ks = as_ks("kappas", kappas)
    ranked = rank_revisited(matrix, truth)
    return {setting: setting_figures(ranked[setting][0], ks) for setting, _ in ranked.items()}


def setting_figures(ranked: RankedPositives, ks: list[int]) -> dict[str, Any]:
    """mAP, mP@k, valid queries, per-query AP and PR points of one setting."""
    ap = average_precision_trapezoid(ranked)
    valid = ranked.counts > 0
    figures: dict[str, Any] = {"mAP": float(np.mean(ap[valid])) if valid.any() else float("nan")}
    for k in ks:
        precision = precision_at_capped_k(ranked, k)
        figures[f"mP@{k}"] = float(np.mean(precision[valid])) if valid.any() else float("nan")
    figures["valid_queries"] = int(valid.sum())
    figures["ap"] = ap
    figures["pr_recall"] = PR_LEVELS.copy()
    figures["pr_precision"] = interpolated_pr(ranked)
    return figures
