"""Person re-identification evaluation: CMC, mAP and mINP with the camera and junk rules.

For every query (probe), the gallery items that share the query's identity *and* camera are
removed from its ranking, and so are the items whose identity is in ``ignore_ids`` (Market-1501's
junk label −1). The positives are the remaining items of the query's identity; a query with none
left is skipped and counted. With the positives at 0-indexed positions ``r_1 < … < r_R`` of the
remaining ranking (distances ascending, ties to the lower gallery index):

=========  ===================================================================================
figure     definition
=========  ===================================================================================
CMC@k      share of the evaluated queries whose first positive is among the first k (r_1 < k)
AP         ``(1/R) Σ_i i / (r_i + 1)``: the mean of the precision at each positive
INP        ``R / (r_R + 1)``: the precision at the last positive (Ye et al., TPAMI 2021)
mAP, mINP  the means of AP and INP over the evaluated queries
=========  ===================================================================================

The distances may be one matrix or a stream of ``(probe_rows, block)`` pairs — what
:func:`galleria.rerank.iter_k_reciprocal_rerank_features` yields — so that the probe×gallery matrix
never needs to exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from galleria._validation import check_bool, is_int
from galleria.metrics._checks import as_array, as_label_vector, as_score_matrix, as_top_k, check_finite
from galleria.metrics._ranked import (
    PR_LEVELS,
    RankedPositives,
    average_precision_full,
    collect,
    interpolated_pr,
    positive_ranks,
    top_of_block,
)

__all__ = ["ReidResult", "reid_evaluate"]

#: Elements of one block of a distance matrix evaluated at once (float64: 32 MB).
_BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class ReidResult:
    """The figures of a re-identification evaluation.

    Attributes
    ----------
    cmc : numpy.ndarray of float64, shape (max_rank,)
        ``cmc[k - 1]`` is CMC@k, the share of evaluated queries with a positive among the first k.
    mAP, mINP : float
        Mean AP and mean INP over the evaluated queries (NaN when no query could be evaluated).
    valid_queries, skipped_queries : int
        Queries evaluated, and queries skipped for want of a positive.
    ap, inp : numpy.ndarray of float64, shape (P,)
        Per-query AP and INP, NaN for skipped queries.
    n_positives : numpy.ndarray of int64, shape (P,)
        R, the positives of each query after the junk is removed (0 for skipped queries).
    first_positive_rank : numpy.ndarray of int64, shape (P,)
        0-indexed position of each query's first positive, −1 for skipped queries.
    top : numpy.ndarray of int64, shape (P, top_k)
        The first ``top_k`` gallery indices of each query's ranking with the junk removed (−1 past
        the end); shape (P, 0) unless ``top_k`` was asked for.
    pr_recall, pr_precision : numpy.ndarray of float64
        Points of the interpolated precision–recall curve (mean over the evaluated queries).
    """

    cmc: npt.NDArray[np.float64]
    mAP: float
    mINP: float
    valid_queries: int
    skipped_queries: int
    ap: npt.NDArray[np.float64]
    inp: npt.NDArray[np.float64]
    n_positives: npt.NDArray[np.int64]
    first_positive_rank: npt.NDArray[np.int64]
    top: npt.NDArray[np.int64]
    pr_recall: npt.NDArray[np.float64]
    pr_precision: npt.NDArray[np.float64]

    def summary(self) -> dict[str, Any]:
        """The JSON-able headline figures: mAP, mINP, CMC@1/5/10 (when reached), query counts."""
        figures: dict[str, Any] = {"mAP": self.mAP, "mINP": self.mINP}
        for k in (1, 5, 10, 20):
            if k <= len(self.cmc):
                figures[f"cmc@{k}"] = float(self.cmc[k - 1])
        figures["valid_queries"] = self.valid_queries
        figures["skipped_queries"] = self.skipped_queries
        return figures


class _Layout:
    """The identities and cameras, arranged for fast per-query look-ups of positives and junk."""

    def __init__(
        self,
        query_ids: np.ndarray,
        gallery_ids: np.ndarray,
        query_cameras: np.ndarray,
        gallery_cameras: np.ndarray,
        ignore_ids: np.ndarray,
    ) -> None:
        self.query_ids = query_ids
        self.query_cameras = query_cameras
        self.gallery_cameras = gallery_cameras
        self.order = np.argsort(gallery_ids, kind="stable")
        self.sorted_ids = gallery_ids[self.order]
        self.ignored = np.flatnonzero(np.isin(gallery_ids, ignore_ids))
        self.query_ignored = np.isin(query_ids, ignore_ids)

    def split(self, query: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The positives (ascending indices) and the same-camera items of one query's identity."""
        identity = self.query_ids[query]
        low = np.searchsorted(self.sorted_ids, identity, side="left")
        high = np.searchsorted(self.sorted_ids, identity, side="right")
        members = np.sort(self.order[low:high])
        same = self.gallery_cameras[members] == self.query_cameras[query]
        if self.query_ignored[query]:
            return members[:0], members
        return members[~same], members[same]


def _blocks_of_matrix(matrix: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    rows = max(1, _BLOCK_ELEMENTS // matrix.shape[1])
    for start in range(0, matrix.shape[0], rows):
        stop = min(start + rows, matrix.shape[0])
        yield np.arange(start, stop), matrix[start:stop]


def _is_stream(value: Any) -> bool:
    """A stream of (probe_rows, block) pairs rather than a matrix (nested lists, arrays, tensors)."""
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        return False
    if isinstance(value, (list, tuple)):
        if not value:
            return False
        first = value[0]
        return (
            isinstance(first, tuple)
            and len(first) == 2
            and isinstance(first[1], np.ndarray)
            and first[1].ndim == 2
        )
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes))


def _checked_pairs(
    stream: Iterable[Any], probes: int, gallery: int
) -> Iterator[tuple[npt.NDArray[np.int64], np.ndarray]]:
    """Validate each (probe_rows, block) pair of a stream; at the end, every probe must have come once."""
    seen = np.zeros(probes, dtype=bool)
    for position, pair in enumerate(stream):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(
                f"distances[{position}] must be a (probe_rows, block) pair, got {type(pair).__name__}"
            )
        rows = as_array(f"distances[{position}] probe_rows", pair[0])
        if rows.ndim != 1 or (rows.dtype.kind not in "iu" and rows.size):
            raise TypeError(
                f"distances[{position}] probe_rows must be a 1-D array of integer rows, "
                f"got dtype {rows.dtype} and shape {rows.shape}"
            )
        rows = rows.astype(np.int64)
        block = as_array(f"distances[{position}] block", pair[1])
        if block.dtype.kind not in "iuf":
            raise TypeError(f"distances[{position}] block must hold real numbers, got dtype {block.dtype}")
        if block.shape != (rows.size, gallery):
            raise ValueError(
                f"distances[{position}] block must have shape {(rows.size, gallery)} "
                f"(probe_rows × gallery), got {block.shape}"
            )
        bad = np.flatnonzero((rows < 0) | (rows >= probes))
        if bad.size:
            raise ValueError(f"distances[{position}] probe row {rows[bad[0]]} is out of range [0, {probes})")
        ordered = np.sort(rows)
        repeated = np.concatenate([rows[seen[rows]], ordered[1:][np.diff(ordered) == 0]])
        if repeated.size:
            raise ValueError(f"distances[{position}] gives probe row {repeated[0]} a second time")
        seen[rows] = True
        check_finite("distances", block, rows=rows)
        yield rows, block
    missing = np.flatnonzero(~seen)
    if missing.size:
        raise ValueError(
            f"distances stream covered {probes - missing.size} of {probes} probes; "
            f"probe row {missing[0]} is missing"
        )


def _ids(name: str, value: Any, length: int | None) -> np.ndarray:
    return as_label_vector(name, value, length=length)


def _ignore_ids(value: Any) -> npt.NDArray[np.int64]:
    """``ignore_ids``: one integer id or a collection of them (possibly empty)."""
    if is_int(value):
        return np.array([value], dtype=np.int64)
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"ignore_ids must be a collection of integer ids, got {value!r}")
    items = list(value)
    for position, item in enumerate(items):
        if not is_int(item):
            raise TypeError(
                f"ignore_ids[{position}] must be an integer id, got {item!r} ({type(item).__name__})"
            )
    return np.array(items, dtype=np.int64)


def reid_evaluate(
    distances: Any,
    query_ids: Any,
    gallery_ids: Any,
    query_cameras: Any,
    gallery_cameras: Any,
    *,
    max_rank: int = 50,
    ignore_ids: Any = (-1,),
    higher_is_better: bool = False,
    top_k: int = 0,
) -> ReidResult:
    """Evaluate person re-identification: CMC, mAP and mINP with same-camera and junk items removed.

    Parameters
    ----------
    distances : array_like of shape (P, G), or an iterable of ``(probe_rows, block)`` pairs
        Query-to-gallery distances, lower is better (``higher_is_better=True`` for similarities).
        A stream gives, in any order, every probe row once: ``probe_rows`` a 1-D integer array and
        ``block`` its (len(probe_rows), G) distances — e.g. what
        :func:`galleria.rerank.iter_k_reciprocal_rerank_features` yields. Must be finite.
    query_ids, gallery_ids : array_like of int, shapes (P,) and (G,)
        Identity labels.
    query_cameras, gallery_cameras : array_like of int, shapes (P,) and (G,)
        Camera labels.
    max_rank : int, default 50
        Length of the CMC curve (it may exceed the gallery: the curve then stays flat).
    ignore_ids : sequence of int, default (-1,)
        Identities whose gallery items are junk (removed from every ranking).
    higher_is_better : bool, default False
        Treat ``distances`` as similarities (ranked descending).
    top_k : int, default 0
        Also keep each query's first ``top_k`` gallery indices (``ReidResult.top``).

    Returns
    -------
    ReidResult

    Raises
    ------
    TypeError
        Non-integer ids or cameras; non-numeric distances; a malformed stream pair; ``max_rank``,
        ``top_k`` or ``higher_is_better`` of the wrong kind.
    ValueError
        Empty inputs; lengths that do not match the distances; non-finite distances; ``max_rank < 1``;
        a stream that misses a probe, repeats one or gives a block of the wrong shape.

    Examples
    --------
    >>> d = [[0.1, 0.5, 0.2, 0.9],
    ...      [0.8, 0.3, 0.4, 0.1]]
    >>> result = reid_evaluate(d, [1, 2], [1, 2, 1, 2], [0, 0], [0, 1, 1, 1])
    >>> result.cmc[:2].tolist(), round(result.mAP, 4), result.valid_queries
    ([1.0, 1.0], 1.0, 2)
    """
    if isinstance(max_rank, bool) or not is_int(max_rank):
        raise TypeError(f"max_rank must be a positive integer, got {max_rank!r} ({type(max_rank).__name__})")
    if max_rank < 1:
        raise ValueError(f"max_rank must be at least 1, got {max_rank!r}")
    higher = check_bool("higher_is_better", higher_is_better)
    keep = as_top_k(top_k)
    q_ids = _ids("query_ids", query_ids, None)
    g_ids = _ids("gallery_ids", gallery_ids, None)
    probes, gallery = len(q_ids), len(g_ids)
    q_cams = _ids("query_cameras", query_cameras, probes)
    g_cams = _ids("gallery_cameras", gallery_cameras, gallery)
    ignored = _ignore_ids(ignore_ids)
    if _is_stream(distances):
        pairs: Iterable[tuple[np.ndarray, np.ndarray]] = _checked_pairs(distances, probes, gallery)
    else:
        matrix = as_score_matrix("distances", distances)
        if matrix.shape != (probes, gallery):
            raise ValueError(
                f"distances must have shape {(probes, gallery)} (len(query_ids), len(gallery_ids)), "
                f"got {matrix.shape}"
            )
        pairs = _checked_matrix(matrix)
    layout = _Layout(q_ids, g_ids, q_cams, g_cams, ignored)
    return _evaluate(pairs, layout, probes, max_rank, higher, keep)


def _checked_matrix(matrix: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for rows, block in _blocks_of_matrix(matrix):
        check_finite("distances", block, int(rows[0]))
        yield rows, block


def _evaluate(
    pairs: Iterable[tuple[np.ndarray, np.ndarray]],
    layout: _Layout,
    probes: int,
    max_rank: int,
    higher: bool,
    keep: int,
) -> ReidResult:
    rank_lists: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * probes
    counts = np.zeros(probes, dtype=np.int64)
    top = np.full((probes, keep), -1, dtype=np.int64)
    for rows, block in pairs:
        keys = np.array(block, dtype=np.float64 if block.dtype.kind != "f" else block.dtype)
        if not higher:
            np.negative(keys, out=keys)
        keys[:, layout.ignored] = -np.inf
        for local, query in enumerate(rows.tolist()):
            positives, same_camera = layout.split(query)
            row = keys[local]
            row[same_camera] = -np.inf
            counts[query] = positives.size
            rank_lists[query] = positive_ranks(row, positives)
        if keep:
            top[rows] = top_of_block(keys, keep)
    ranked = collect(rank_lists, counts)
    return _summarise(ranked, max_rank, top)


def _summarise(ranked: RankedPositives, max_rank: int, top: npt.NDArray[np.int64]) -> ReidResult:
    counts = ranked.counts
    valid = counts > 0
    first = ranked.first
    ap = average_precision_full(ranked, counts.astype(np.float64))
    inp = np.full(len(counts), np.nan)
    last = ranked.ranks[ranked.indptr[1:][valid] - 1]  # every positive is ranked: no depth here
    inp[valid] = counts[valid] / (last + 1.0)
    n_valid = int(valid.sum())
    if n_valid:
        hits = np.bincount(np.minimum(first[valid], max_rank), minlength=max_rank + 1)[:max_rank]
        cmc = np.cumsum(hits) / n_valid
        mean_ap, mean_inp = float(np.mean(ap[valid])), float(np.mean(inp[valid]))
    else:
        cmc = np.zeros(max_rank, dtype=np.float64)
        mean_ap = mean_inp = float("nan")
    return ReidResult(
        cmc=cmc.astype(np.float64),
        mAP=mean_ap,
        mINP=mean_inp,
        valid_queries=n_valid,
        skipped_queries=len(counts) - n_valid,
        ap=ap,
        inp=inp,
        n_positives=counts,
        first_positive_rank=first,
        top=top,
        pr_recall=PR_LEVELS.copy(),
        pr_precision=interpolated_pr(ranked),
    )
