"""Full probe×gallery k-reciprocal re-ranking (the re-identification setting), in bounded memory.

The set is all P probes followed by all G gallery items (``n = P + G`` members). Two modes:

``"paper"``
    The pool rules of docs/reranking.md on that one set (see :mod:`galleria.rerank.pool`): distances floored
    at 0 with a zero diagonal, rows scaled by their maximum, stable ranking lists, ``≥ 2/3``, Jaccard
    ``1 - Σmin / Σmax`` over all n members (``Σmax = ΣV_p + ΣV_g - Σmin``), ``k1`` capped at
    ``n - 1``. With one probe this equals :func:`~galleria.rerank.pool.rerank_pool` with the whole
    gallery as candidates.
``"reference"``
    The authors' published algorithm (docs/reranking.md, steps 1–7): squared distances in float32, each
    column divided by its maximum and the result transposed, strict ``> 2/3``, Jaccard
    ``1 - m / (2 - m)`` with ``m = Σmin``.

Nothing of size n×n is ever held. The distances are visited in blocks of rows (from the three given
matrices without stacking them, or computed from features), and each block leaves only its
``k1 + 1`` nearest members and its scale. Reciprocity, the expansion of Eq. 4 and the features of
Eq. 7 are then built on those neighbour lists as sparse matrices (a few dozen non-zeros per row), and
the Jaccard sums are gathered through an inverted index of the gallery features. Memory stays near
O(n·k) plus the P×G output — or plus one block of it with :func:`iter_k_reciprocal_rerank_features`
(and :func:`iter_k_reciprocal_rerank`), which yield the output a block of probes at a time and
recompute each block's original distances instead of keeping them.

This module holds the public functions, the checks of their arguments and the two drivers; the raw
distances come from :mod:`galleria.rerank._full_sources`, the first pass is in
:mod:`galleria.rerank._full_neighbours`, Eqs. 3–12 in :mod:`galleria.rerank._full_jaccard`, and the
block sizes in :mod:`galleria.rerank._full_blocks`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from galleria._blas import one_blas_thread
from galleria._validation import check_choice
from galleria.rerank import _full_blocks as blocks
from galleria.rerank._common import (
    K1,
    K2,
    LAMBDA,
    as_float_matrix,
    check_hyperparameters,
    check_mode,
    half_of,
    parallel_blocks,
)
from galleria.rerank._full_jaccard import Jaccard, expanded_pairs, query_expansion, set_features
from galleria.rerank._full_neighbours import (
    first_step,
    neighbour_lists,
    scaled_rows,
)
from galleria.rerank._full_sources import FeatureSource, MatrixSource, Source, transform

__all__ = [
    "iter_k_reciprocal_rerank",
    "iter_k_reciprocal_rerank_features",
    "k_reciprocal_rerank",
    "k_reciprocal_rerank_features",
]

METRICS: tuple[str, ...] = ("cosine", "euclidean")

# The private names of the one-module layout, kept importable from here (galleria 0.3 split the
# module: sources, first pass and Jaccard sums in _full_sources, _full_neighbours and _full_jaccard,
# the block sizes in _full_blocks, which is where a test sets smaller ones).
_FeatureSource = FeatureSource
_transform = transform
_first_step = first_step
_scaled_rows = scaled_rows
_neighbour_lists = neighbour_lists
_expanded_pairs = expanded_pairs
_features = set_features
_query_expansion = query_expansion
_Jaccard = Jaccard


def k_reciprocal_rerank(
    probe_gallery: Any,
    probe_probe: Any,
    gallery_gallery: Any,
    *,
    k1: int = K1.default,
    k2: int = K2.default,
    lambda_value: float = LAMBDA.default,
    mode: str = "paper",
) -> np.ndarray:
    """Re-rank a whole probe×gallery distance matrix with k-reciprocal encoding.

    Parameters
    ----------
    probe_gallery : array_like, shape (P, G)
        Original distances from every probe to every gallery item.
    probe_probe : array_like, shape (P, P)
        Distances among the probes.
    gallery_gallery : array_like, shape (G, G)
        Distances among the gallery items. None of the three is copied whole or stacked.
    k1 : int, default 20
        Neighbourhood size of the k-reciprocal sets.
    k2 : int, default 6
        Neighbourhood size of the local query expansion (``k2 <= k1``; 1 skips it).
    lambda_value : float, default 0.3
        Weight of the original distance in the final one, in [0, 1].
    mode : {"paper", "reference"}, default "paper"
        ``"paper"`` applies the pinned pool rules to the set of probes then gallery items;
        ``"reference"`` reproduces the authors' published algorithm (squared inputs, column-max
        scaling, strict ``> 2/3``, Jaccard ``1 - m / (2 - m)``).

    Returns
    -------
    ndarray, shape (P, G), float32
        Re-ranked distances, lower is better.

    Raises
    ------
    TypeError
        A matrix is not numeric, or a hyper-parameter / ``mode`` of the wrong kind.
    ValueError
        Shapes that do not fit together, empty or non-finite matrices, ``k2 > k1``,
        ``lambda_value`` outside [0, 1], or an unknown ``mode``.

    Examples
    --------
    >>> points = np.array([0.0, 0.1, 0.2, 5.0, 5.1])
    >>> d = np.abs(points[:, None] - points[None, :])
    >>> out = k_reciprocal_rerank(d[:1, 1:], d[:1, :1], d[1:, 1:], k1=2, k2=1)
    >>> out.shape, np.argsort(out[0], kind="stable").tolist()
    ((1, 4), [0, 1, 2, 3])
    """
    source, settings = _matrix_source(probe_gallery, probe_probe, gallery_gallery, k1, k2, lambda_value, mode)
    return _rerank(source, *settings)


def iter_k_reciprocal_rerank(
    probe_gallery: Any,
    probe_probe: Any,
    gallery_gallery: Any,
    *,
    k1: int = K1.default,
    k2: int = K2.default,
    lambda_value: float = LAMBDA.default,
    mode: str = "paper",
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:func:`k_reciprocal_rerank`, yielding the output a block of probes at a time.

    Arguments are checked at the call; the work starts at the first ``next``. See
    :func:`iter_k_reciprocal_rerank_features` for what is yielded.
    """
    source, settings = _matrix_source(probe_gallery, probe_probe, gallery_gallery, k1, k2, lambda_value, mode)
    return _stream(source, *settings)


def _matrix_source(
    probe_gallery: Any, probe_probe: Any, gallery_gallery: Any, k1: Any, k2: Any, lambda_value: Any, mode: Any
) -> tuple[MatrixSource, tuple[int, int, float, str]]:
    pg = as_float_matrix("probe_gallery", probe_gallery)
    pp = as_float_matrix("probe_probe", probe_probe, square=True)
    gg = as_float_matrix("gallery_gallery", gallery_gallery, square=True)
    probes, gallery = pg.shape
    if pp.shape[0] != probes:
        raise ValueError(f"probe_probe must be ({probes}, {probes}) to match probe_gallery, got {pp.shape}")
    if gg.shape[0] != gallery:
        raise ValueError(
            f"gallery_gallery must be ({gallery}, {gallery}) to match probe_gallery, got {gg.shape}"
        )
    first, second, weight = check_hyperparameters(k1, k2, lambda_value)
    chosen = check_mode(mode)
    source = MatrixSource(pp, pg, gg, transpose=chosen == "reference")
    return source, (first, second, weight, chosen)


def k_reciprocal_rerank_features(
    probe: Any,
    gallery: Any,
    *,
    metric: str = "cosine",
    k1: int = K1.default,
    k2: int = K2.default,
    lambda_value: float = LAMBDA.default,
    mode: str = "paper",
) -> np.ndarray:
    """Re-rank probes against a gallery from their features, without any dense (P+G)² matrix.

    The distances are computed block by block in float32 with
    :func:`galleria.distances.pairwise_distances`: ``"cosine"`` gives ``1 - cos`` (features are
    L2-normalised first), ``"euclidean"`` the squared Euclidean distance in ``"paper"`` mode (the
    paper's original distance is the squared Mahalanobis one, here with the identity) and the
    Euclidean distance squared after the fact in ``"reference"`` mode, as the authors' code does —
    the same values, each mode's arithmetic. Peak memory is the output plus a few blocks and the
    O(n·k1) neighbour lists. Otherwise as :func:`k_reciprocal_rerank`, and equal to it on the
    distance matrices the features give.

    Parameters
    ----------
    probe : array_like, shape (P, D)
        Probe features.
    gallery : array_like, shape (G, D)
        Gallery features.
    metric : {"cosine", "euclidean"}, default "cosine"
        How features become distances.
    k1, k2, lambda_value, mode
        As for :func:`k_reciprocal_rerank`.

    Returns
    -------
    ndarray, shape (P, G), float32
        Re-ranked distances, lower is better.

    Raises
    ------
    TypeError
        Features not numeric, or a hyper-parameter / ``metric`` / ``mode`` of the wrong kind.
    ValueError
        Empty, non-finite or mismatched features, or a wrong hyper-parameter value.

    Examples
    --------
    >>> probe = np.array([[1.0, 0.0]])
    >>> gallery = np.array([[1.0, 0.1], [0.0, 1.0], [0.9, 0.0], [0.1, 1.0]])
    >>> k_reciprocal_rerank_features(probe, gallery, k1=2, k2=1).shape
    (1, 4)
    """
    source, settings = _feature_source(probe, gallery, metric, k1, k2, lambda_value, mode)
    return _rerank(source, *settings)


def iter_k_reciprocal_rerank_features(
    probe: Any,
    gallery: Any,
    *,
    metric: str = "cosine",
    k1: int = K1.default,
    k2: int = K2.default,
    lambda_value: float = LAMBDA.default,
    mode: str = "paper",
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:func:`k_reciprocal_rerank_features` a block of probes at a time: the P×G matrix never exists.

    Yields ``(probe_rows, block)`` pairs in probe order: ``probe_rows`` an int64 array of
    consecutive probe indices and ``block`` their (len(probe_rows), G) float32 re-ranked distances,
    equal bit for bit to those rows of :func:`k_reciprocal_rerank_features`. Each block is a new
    array (about 4M distances, e.g. 44 probes × 82,161 gallery items); the neighbour lists and the
    sparse features (memory near O((P + G)·k)) are built before the first block, and the original
    distances of each block are computed again from the features, so the output costs one block of
    memory. :func:`galleria.metrics.reid_evaluate` consumes the pairs directly.

    Arguments and errors as :func:`k_reciprocal_rerank_features`; they are checked at the call,
    and the work starts at the first ``next``.

    Examples
    --------
    >>> probe = np.array([[1.0, 0.0]])
    >>> gallery = np.array([[1.0, 0.1], [0.0, 1.0], [0.9, 0.0], [0.1, 1.0]])
    >>> [(rows.tolist(), block.shape) for rows, block in iter_k_reciprocal_rerank_features(
    ...     probe, gallery, k1=2, k2=1)]
    [([0], (1, 4))]
    """
    source, settings = _feature_source(probe, gallery, metric, k1, k2, lambda_value, mode)
    return _stream(source, *settings)


def _feature_source(
    probe: Any, gallery: Any, metric: Any, k1: Any, k2: Any, lambda_value: Any, mode: Any
) -> tuple[FeatureSource, tuple[int, int, float, str]]:
    left = as_float_matrix("probe", probe)
    right = as_float_matrix("gallery", gallery)
    if left.shape[1] != right.shape[1]:
        raise ValueError(
            "probe and gallery must have the same feature dimension, "
            f"got {left.shape[1]} and {right.shape[1]}"
        )
    chosen_metric = check_choice("metric", metric, METRICS)
    first, second, weight = check_hyperparameters(k1, k2, lambda_value)
    chosen = check_mode(mode)
    # The paper's original distance is the squared Euclidean (Mahalanobis) one; reference mode
    # squares the distance itself, as the authors' code does.
    squared = chosen_metric == "euclidean" and chosen == "paper"
    return FeatureSource(left, right, chosen_metric, squared=squared), (first, second, weight, chosen)


def _settings(size: int, k1: int, k2: int, mode: str) -> tuple[int, int, int]:
    """``(width, half_width, k2)``: the neighbour-list widths and the expansion size on ``size`` members."""
    if mode == "reference":  # the authors slice k1 + 1, round(k1/2) + 1 and k2 entries
        return min(k1 + 1, size), min(half_of(k1) + 1, size), min(k2, size)
    first = min(k1, size - 1)
    return first + 1, half_of(first) + 1, min(k2, first)


def _prepare(
    source: Source, k1: int, k2: int, lambda_value: float, mode: str, out: np.ndarray | None
) -> Jaccard:
    """Everything but the output: neighbour lists, expanded sets, features (Eqs. 2–11)."""
    width, half_width, second = _settings(source.size, k1, k2, mode)
    ranking, scales = neighbour_lists(source, width, mode, out)
    rows, columns = expanded_pairs(ranking, width, half_width, mode)
    features = set_features(source, rows, columns, scales, mode)
    del rows, columns
    if second > 1:
        features = query_expansion(features, ranking, second)
    return Jaccard(features, source.probes, source.gallery, lambda_value, mode)


def _stream(
    source: Source, k1: int, k2: int, lambda_value: float, mode: str
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The re-ranked distances, one block of probes at a time.

    Each block's distances are recomputed by the first pass's own products (blocks of
    :func:`~galleria.rerank._full_neighbours.first_step` rows: the same values bit for bit) and yielded in
    pieces of :func:`~galleria.rerank._full_blocks.row_step` rows, each turned into d* on a worker thread.
    """
    jaccard = _prepare(source, k1, k2, lambda_value, mode, None)
    step = blocks.row_step(source.size)
    product = first_step(source)

    def block(start: int, nothing: None) -> list[tuple[np.ndarray, np.ndarray]]:
        stop = min(start + product, source.size)
        with one_blas_thread():  # as in the first pass: one BLAS thread per product
            raw = source.rows(start, stop)
        pieces = []
        for first in range(start, min(stop, source.probes), step):
            last = min(first + step, stop)
            _, _, original = scaled_rows(source, first, last, mode, raw[first - start : last - start])
            jaccard.into(original, first)
            pieces.append((np.arange(first, first + len(original)), original))
        return pieces

    for pieces in parallel_blocks(block, range(0, source.probes, product)):
        yield from pieces


def _rerank(source: Source, k1: int, k2: int, lambda_value: float, mode: str) -> np.ndarray:
    """Both modes on a validated source: the (P, G) float32 re-ranked distances."""
    out = np.empty((source.probes, source.gallery), dtype=np.float32)
    jaccard = _prepare(source, k1, k2, lambda_value, mode, out)
    step = max(
        1, blocks.BLOCK_ELEMENTS // source.gallery
    )  # probes per task; every split gives the same values

    def block(start: int, _: None) -> None:
        jaccard.into(out[start : start + step], start)

    for _ in parallel_blocks(block, range(0, source.probes, step)):
        pass
    return out
