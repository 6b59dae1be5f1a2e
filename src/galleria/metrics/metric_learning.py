"""Metric-learning accuracy (Musgrave et al., "A Metric Learning Reality Check", ECCV 2020).

Every query is ranked against a *reference* set by exact search (cosine similarity, or Euclidean
distance; ties to the lower reference index). ``R`` is the number of reference items that share the
query's label. With no ``reference`` the embeddings are their own reference and each query is
excluded from its own results, so ``R`` counts the *other* items of its label.

=================  ===========================================================================
figure             definition
=================  ===========================================================================
precision_at_1     share of queries whose first result has their label
r_precision        ``(#relevant among the first R) / R``, averaged over queries
map_at_r           ``MAP@R = (1/R) Σ_{i ≤ R} P@i · rel_i``, averaged over queries
=================  ===========================================================================

Queries with ``R = 0`` (a label with no other item) are left out of the means and counted. The
scores are computed block by block from the embeddings, so a 60,000 × 60,000 evaluation at 128-d
holds one block of scores at a time (tens of MB), never the whole matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from galleria._validation import check_bool, check_choice
from galleria.distances import normalize_rows
from galleria.metrics._checks import as_embeddings, as_label_vector, as_top_k
from galleria.metrics._ranked import PR_LEVELS, interpolated_one, positive_ranks, top_of_block

__all__ = [
    "METRICS",
    "MetricLearningResult",
    "map_at_r",
    "metric_learning_evaluate",
    "precision_at_1",
    "r_precision",
]

#: How embeddings are compared.
METRICS: tuple[str, ...] = ("cosine", "euclidean")

#: Bytes of one block of query × reference scores.
_BLOCK_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class MetricLearningResult:
    """The figures of a metric-learning evaluation.

    Attributes
    ----------
    precision_at_1, r_precision, map_at_r : float
        Means over the evaluated queries (NaN when none could be evaluated).
    valid_queries, skipped_queries : int
        Queries evaluated, and queries left out because no reference item shares their label.
    n_positives : numpy.ndarray of int64, shape (n,)
        R of each query.
    per_query_map_at_r, per_query_r_precision : numpy.ndarray of float64, shape (n,)
        Per-query values, NaN for skipped queries.
    first_positive_rank : numpy.ndarray of int64, shape (n,)
        0-indexed position of the first relevant result; −1 for skipped queries, and for queries
        whose first relevant result lies beyond R unless ``full_ranking`` was asked for.
    average_precision : numpy.ndarray of float64, shape (n,)
        AP over the whole ranking (every positive), only with ``full_ranking`` (else all NaN).
    top : numpy.ndarray of int64, shape (n, top_k)
        The first ``top_k`` reference indices of each query (−1 past the end).
    pr_recall, pr_precision : numpy.ndarray of float64
        Interpolated precision–recall points over the whole ranking (``full_ranking`` only; else
        empty).
    """

    precision_at_1: float
    r_precision: float
    map_at_r: float
    valid_queries: int
    skipped_queries: int
    n_positives: npt.NDArray[np.int64]
    per_query_map_at_r: npt.NDArray[np.float64]
    per_query_r_precision: npt.NDArray[np.float64]
    first_positive_rank: npt.NDArray[np.int64]
    average_precision: npt.NDArray[np.float64]
    top: npt.NDArray[np.int64]
    pr_recall: npt.NDArray[np.float64]
    pr_precision: npt.NDArray[np.float64]

    def summary(self) -> dict[str, Any]:
        """The JSON-able headline figures."""
        figures: dict[str, Any] = {
            "precision@1": self.precision_at_1,
            "r_precision": self.r_precision,
            "map@r": self.map_at_r,
        }
        if self.pr_precision.size:
            valid = self.n_positives > 0
            figures["mAP"] = float(np.mean(self.average_precision[valid])) if valid.any() else float("nan")
        figures["valid_queries"] = self.valid_queries
        figures["skipped_queries"] = self.skipped_queries
        return figures


class _Inputs:
    """Validated queries, reference and the reference items of every label."""

    def __init__(
        self,
        embeddings: Any,
        labels: Any,
        reference: Any,
        reference_labels: Any,
        metric: Any,
        exclude_self: Any,
    ) -> None:
        self.metric = check_choice("metric", metric, METRICS)
        queries = as_embeddings("embeddings", embeddings)
        query_labels = as_label_vector("labels", labels, length=len(queries), strings=True)
        if reference is None:
            if reference_labels is not None:
                raise ValueError("reference_labels needs reference (got reference_labels without reference)")
            ref, ref_labels = queries, query_labels
            default_exclude = True
        else:
            ref = as_embeddings("reference", reference)
            if reference_labels is None:
                raise ValueError("reference needs reference_labels (one label per reference item)")
            ref_labels = as_label_vector("reference_labels", reference_labels, length=len(ref), strings=True)
            default_exclude = False
        if ref.shape[1] != queries.shape[1]:
            raise ValueError(
                "embeddings and reference must have the same dimension, "
                f"got {queries.shape[1]} and {ref.shape[1]}"
            )
        if (query_labels.dtype.kind in "US") != (ref_labels.dtype.kind in "US"):
            raise TypeError(
                "labels and reference_labels must be of the same kind (both integers or both strings), "
                f"got dtypes {query_labels.dtype} and {ref_labels.dtype}"
            )
        self.exclude_self = (
            default_exclude if exclude_self is None else check_bool("exclude_self", exclude_self)
        )
        if self.exclude_self and reference is not None and len(ref) != len(queries):
            raise ValueError(
                "exclude_self=True with a reference means reference[i] is query i: they must have the same "
                f"length, got {len(queries)} queries and {len(ref)} reference items"
            )
        dtype = np.float32 if queries.dtype == np.float32 and ref.dtype == np.float32 else np.float64
        self.queries = queries.astype(dtype, copy=False)
        same = ref is queries
        if self.metric == "cosine":
            self.reference = normalize_rows(ref, dtype=dtype)
            self.queries = self.reference if same else normalize_rows(self.queries, dtype=None)
            self.norms: np.ndarray | None = None
        else:
            self.reference = self.queries if same else ref.astype(dtype, copy=False)
            self.norms = np.einsum("ij,ij->i", self.reference, self.reference)
        codes, inverse = np.unique(np.concatenate([query_labels, ref_labels]), return_inverse=True)
        self.query_codes = inverse[: len(queries)].astype(np.int64)
        reference_codes = inverse[len(queries) :].astype(np.int64)
        self.order = np.argsort(reference_codes, kind="stable").astype(np.int64)
        self.bounds = np.searchsorted(reference_codes[self.order], np.arange(len(codes) + 1))

    def positives(self, query: int) -> npt.NDArray[np.int64]:
        """The reference items that share the query's label (the query itself left out when excluded)."""
        code = self.query_codes[query]
        members = self.order[self.bounds[code] : self.bounds[code + 1]]
        if self.exclude_self:
            members = members[members != query]
        return members

    def keys(self, start: int, stop: int) -> np.ndarray:
        """Scores of queries ``start:stop`` against the whole reference, higher is better."""
        block = self.queries[start:stop]
        gram = block @ self.reference.T
        if self.metric == "cosine":
            keys: np.ndarray = gram
        else:
            assert self.norms is not None
            own = np.einsum("ij,ij->i", block, block)
            squared = own[:, None] + self.norms[None, :] - 2.0 * gram
            keys = np.negative(np.maximum(squared, 0.0, out=squared), out=squared)
        if self.exclude_self:
            rows = np.arange(start, stop)
            keys[rows - start, rows] = -np.inf
        return keys


@dataclass
class _PerQuery:
    """Per-query figures, filled as the queries are ranked (no list of ranks is kept: n·R can be large)."""

    counts: npt.NDArray[np.int64]
    first: npt.NDArray[np.int64]
    map_at_r: npt.NDArray[np.float64]
    r_precision: npt.NDArray[np.float64]
    average_precision: npt.NDArray[np.float64]
    curve: npt.NDArray[np.float64]
    top: npt.NDArray[np.int64]

    def add(self, query: int, ranks: np.ndarray, count: int, full: bool) -> None:
        self.counts[query] = count
        if ranks.size:
            self.first[query] = ranks[0]
        if count == 0:
            return
        order = np.arange(1, ranks.size + 1)
        within = ranks < count
        self.map_at_r[query] = float(np.sum(order[within] / (ranks[within] + 1.0))) / count
        self.r_precision[query] = int(np.count_nonzero(within)) / count
        if full:
            self.average_precision[query] = float(np.sum(order / (ranks + 1.0))) / count
            self.curve += interpolated_one(ranks, count)


def _rank_all(inputs: _Inputs, full_ranking: bool, keep: int) -> _PerQuery:
    """Rank every query's positives (those above R, or all of them) and keep the per-query figures."""
    n = len(inputs.queries)
    m = len(inputs.reference)
    rows = max(1, _BLOCK_BYTES // (m * inputs.reference.dtype.itemsize))
    nan = np.full(n, np.nan)
    result = _PerQuery(
        counts=np.zeros(n, dtype=np.int64),
        first=np.full(n, -1, dtype=np.int64),
        map_at_r=nan.copy(),
        r_precision=nan.copy(),
        average_precision=nan.copy(),
        curve=np.zeros(len(PR_LEVELS)),
        top=np.full((n, keep), -1, dtype=np.int64),
    )
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        keys = inputs.keys(start, stop)
        for local in range(stop - start):
            positives = inputs.positives(start + local)
            depth = None if full_ranking else max(1, positives.size)
            result.add(
                start + local, positive_ranks(keys[local], positives, depth), positives.size, full_ranking
            )
        if keep:
            result.top[start:stop] = top_of_block(keys, keep)
    return result


def metric_learning_evaluate(
    embeddings: Any,
    labels: Any,
    *,
    reference: Any = None,
    reference_labels: Any = None,
    metric: str = "cosine",
    exclude_self: bool | None = None,
    full_ranking: bool = False,
    top_k: int = 0,
) -> MetricLearningResult:
    """Precision@1, R-precision and MAP@R in one pass (plus per-query detail).

    Parameters
    ----------
    embeddings : array_like, shape (n, d)
        Query embeddings (finite).
    labels : array_like, shape (n,)
        Query labels: integers or strings.
    reference : array_like, shape (m, d), optional
        The items searched; by default the embeddings themselves.
    reference_labels : array_like, shape (m,), optional
        Labels of the reference items (required with ``reference``; same kind as ``labels``).
    metric : {"cosine", "euclidean"}
        Rank by cosine similarity (descending) or Euclidean distance (ascending).
    exclude_self : bool, optional
        Leave query i out of its own results (reference item i is query i). Default: True without
        a ``reference``, False with one; True with a reference needs ``len(reference) == n``.
    full_ranking : bool, default False
        Also locate every positive in the whole ranking (AP, first relevant rank, PR points); by
        default only the positives among the first R are located.
    top_k : int, default 0
        Keep each query's first ``top_k`` reference indices.

    Returns
    -------
    MetricLearningResult

    Raises
    ------
    TypeError
        Non-numeric embeddings; labels that are neither integers nor strings (or of different
        kinds); ``exclude_self``, ``full_ranking`` or ``top_k`` of the wrong kind.
    ValueError
        Empty, non-finite or mismatched embeddings; labels of the wrong length; a reference without
        labels (or labels without a reference); unknown ``metric``.
    """
    inputs = _Inputs(embeddings, labels, reference, reference_labels, metric, exclude_self)
    full = check_bool("full_ranking", full_ranking)
    keep = as_top_k(top_k)
    per = _rank_all(inputs, full, keep)
    valid = per.counts > 0
    n_valid = int(valid.sum())

    def mean(values: np.ndarray) -> float:
        return float(np.mean(values)) if values.size else float("nan")

    return MetricLearningResult(
        precision_at_1=mean((per.first[valid] == 0).astype(np.float64)),
        r_precision=mean(per.r_precision[valid]),
        map_at_r=mean(per.map_at_r[valid]),
        valid_queries=n_valid,
        skipped_queries=len(per.counts) - n_valid,
        n_positives=per.counts,
        per_query_map_at_r=per.map_at_r,
        per_query_r_precision=per.r_precision,
        first_positive_rank=per.first,
        average_precision=per.average_precision,
        top=per.top,
        pr_recall=PR_LEVELS.copy() if full else np.empty(0),
        pr_precision=per.curve / max(n_valid, 1) if full else np.empty(0),
    )


def precision_at_1(
    embeddings: Any,
    labels: Any,
    *,
    reference: Any = None,
    reference_labels: Any = None,
    metric: str = "cosine",
    exclude_self: bool | None = None,
) -> float:
    """Share of queries whose nearest reference item has their label (queries with R = 0 left out).

    Parameters as :func:`metric_learning_evaluate`. NaN when no query has a positive.

    Examples
    --------
    >>> points = [[0.0, 1.0], [0.1, 1.0], [1.0, 0.0], [1.0, 0.2]]
    >>> precision_at_1(points, [0, 0, 1, 1])
    1.0
    """
    return _headline(embeddings, labels, reference, reference_labels, metric, exclude_self).precision_at_1


def r_precision(
    embeddings: Any,
    labels: Any,
    *,
    reference: Any = None,
    reference_labels: Any = None,
    metric: str = "cosine",
    exclude_self: bool | None = None,
) -> float:
    """Mean over queries of the share of relevant items among the first R results.

    Parameters as :func:`metric_learning_evaluate`. NaN when no query has a positive.

    Examples
    --------
    >>> points = [[0.0], [1.0], [1.5], [3.0], [3.2]]
    >>> round(r_precision(points, [0, 0, 1, 0, 1], metric="euclidean"), 4)
    0.2
    """
    return _headline(embeddings, labels, reference, reference_labels, metric, exclude_self).r_precision


def map_at_r(
    embeddings: Any,
    labels: Any,
    *,
    reference: Any = None,
    reference_labels: Any = None,
    metric: str = "cosine",
    exclude_self: bool | None = None,
) -> float:
    """MAP@R: ``(1/R) Σ_{i ≤ R} P@i · rel_i`` per query, averaged (queries with R = 0 left out).

    Parameters as :func:`metric_learning_evaluate`. NaN when no query has a positive.

    Examples
    --------
    >>> points = [[0.0], [1.0], [1.5], [3.0], [3.2]]
    >>> round(map_at_r(points, [0, 0, 1, 0, 1], metric="euclidean"), 4)
    0.15
    """
    return _headline(embeddings, labels, reference, reference_labels, metric, exclude_self).map_at_r


def _headline(
    embeddings: Any, labels: Any, reference: Any, reference_labels: Any, metric: Any, exclude_self: Any
) -> MetricLearningResult:
    """The one call behind :func:`precision_at_1`, :func:`r_precision` and :func:`map_at_r`."""
    return metric_learning_evaluate(
        embeddings,
        labels,
        reference=reference,
        reference_labels=reference_labels,
        metric=metric,
        exclude_self=exclude_self,
    )
