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
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria._validation import check_choice
from galleria.distances import normalize_rows, pairwise_distances
from galleria.rerank._common import (
    as_float_matrix,
    check_hyperparameters,
    check_mode,
    half_of,
    one_blas_thread,
    parallel_blocks,
    reciprocal_mask,
    stable_smallest,
)

__all__ = [
    "iter_k_reciprocal_rerank",
    "iter_k_reciprocal_rerank_features",
    "k_reciprocal_rerank",
    "k_reciprocal_rerank_features",
]

METRICS: tuple[str, ...] = ("cosine", "euclidean")

#: Elements per block of distance rows (float64: 32 MB).
_BLOCK_ELEMENTS = 1 << 22
#: Blocks of rows computed from features in the first pass: up to this many times the rows of
#: ``_BLOCK_ELEMENTS``, and no more than ``_PRODUCT_ROWS`` rows unless a block already holds more. A BLAS
#: product of few rows against the whole set repacks all the features for every block: at MSMT17
#: size (44 rows a block) that nearly doubled the time of the products; from about 200 rows on, larger
#: blocks gain little and cost memory. A row's values are the same in any block.
_PRODUCT_BLOCKS = 4
_PRODUCT_ROWS = 192
#: Columns per strided chunk of the fast neighbour search on cosine features (see _chunked_lists).
_CHUNK = 16
#: Chunks taken beyond the neighbour-list width (a margin that keeps the check of the cut passing).
_SPARE_CHUNKS = 2
#: Probe×gallery×column triples gathered at once for the Jaccard sums (about 100 bytes each of working
#: memory; 2M keeps that near 200 MB and was faster than 8M on a 2-core machine, 10k × 9k, 64-d).
_TRIPLES = 1 << 21


def k_reciprocal_rerank(
    probe_gallery: Any,
    probe_probe: Any,
    gallery_gallery: Any,
    *,
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
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
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
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
) -> tuple[_MatrixSource, tuple[int, int, float, str]]:
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
    source = _MatrixSource(pp, pg, gg, transpose=chosen == "reference")
    return source, (first, second, weight, chosen)


def k_reciprocal_rerank_features(
    probe: Any,
    gallery: Any,
    *,
    metric: str = "cosine",
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
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
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
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
) -> tuple[_FeatureSource, tuple[int, int, float, str]]:
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
    return _FeatureSource(left, right, chosen_metric, squared=squared), (first, second, weight, chosen)


class _MatrixSource:
    """Raw distance rows of the set ``[[pp, pg], [pgᵀ, gg]]`` (or of its transpose), never stacked."""

    def __init__(self, pp: np.ndarray, pg: np.ndarray, gg: np.ndarray, *, transpose: bool) -> None:
        # The transpose of [[pp, pg], [pgᵀ, gg]] is [[ppᵀ, pg], [pgᵀ, ggᵀ]].
        self.pp = pp.T if transpose else pp
        self.pg = pg
        self.gg = gg.T if transpose else gg
        self.probes, self.gallery = pg.shape
        self.size = self.probes + self.gallery
        single = all(matrix.dtype == np.float32 for matrix in (pp, pg, gg))
        self.dtype = np.dtype(np.float32 if single else np.float64)

    def rows(self, start: int, stop: int) -> np.ndarray:
        block = np.empty((stop - start, self.size), dtype=self.dtype)
        split = min(max(self.probes - start, 0), stop - start)
        if split:
            block[:split, : self.probes] = self.pp[start : start + split]
            block[:split, self.probes :] = self.pg[start : start + split]
        if split < stop - start:
            first = start + split - self.probes
            last = stop - self.probes
            block[split:, : self.probes] = self.pg[:, first:last].T
            block[split:, self.probes :] = self.gg[first:last]
        return block

    def pairs(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        values = np.empty(rows.size, dtype=np.float64)
        probes = self.probes
        row_probe = rows < probes
        column_probe = columns < probes
        for row_side, column_side, matrix, flip in (
            (True, True, self.pp, False),
            (True, False, self.pg, False),
            (False, True, self.pg, True),
            (False, False, self.gg, False),
        ):
            picked = (row_probe == row_side) & (column_probe == column_side)
            r = rows[picked] - (0 if row_side else probes)
            c = columns[picked] - (0 if column_side else probes)
            values[picked] = matrix[c, r] if flip else matrix[r, c]
        return values


class _FeatureSource:
    """Raw distance rows computed from features, block by block."""

    def __init__(self, probe: np.ndarray, gallery: np.ndarray, metric: str, *, squared: bool = False) -> None:
        features = np.concatenate([probe, gallery]).astype(np.float32)
        self.metric = metric
        self.squared = squared  # euclidean: hand out squared distances
        self.features = normalize_rows(features) if metric == "cosine" else features
        self.norms = np.einsum("ij,ij->i", self.features, self.features)
        self.probes = probe.shape[0]
        self.gallery = gallery.shape[0]
        self.size = self.probes + self.gallery

    def gram(self, start: int, stop: int) -> np.ndarray:
        """Cosine rows ``start:stop`` as a float32 Gram block, padded with ``-inf`` to ``_CHUNK`` columns.

        The product is written into the first ``size`` columns of the padded block (BLAS's output
        stride only): its values are those of :meth:`rows`' product bit for bit.
        """
        padded = np.empty((stop - start, -(-self.size // _CHUNK) * _CHUNK), dtype=np.float32)
        padded[:, self.size :] = -np.inf
        np.matmul(self.features[start:stop], self.features.T, out=padded[:, : self.size])
        return padded

    def rows(self, start: int, stop: int) -> np.ndarray:
        if self.metric == "cosine":
            # 1 - cos in place on the Gram block (the same float32 arithmetic as pairwise_distances,
            # without a second block-sized array).
            gram: np.ndarray = self.features[start:stop] @ self.features.T
            np.subtract(np.float32(1.0), gram, out=gram)
            return gram
        block = self.features[start:stop]
        squared = pairwise_distances(block, self.features, "l2")
        return squared if self.squared else np.asarray(np.sqrt(squared))

    def pairs(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        values = np.empty(rows.size, dtype=np.float32)
        step = max(1, _BLOCK_ELEMENTS // max(1, self.features.shape[1]))
        for start in range(0, rows.size, step):
            r = rows[start : start + step]
            c = columns[start : start + step]
            dots = np.einsum("ij,ij->i", self.features[r], self.features[c])
            if self.metric == "cosine":
                values[start : start + step] = 1.0 - dots
            else:
                squared = self.norms[r] + self.norms[c] - 2.0 * dots
                floored = np.maximum(squared, 0.0)
                values[start : start + step] = floored if self.squared else np.sqrt(floored)
        return values


_Source = _MatrixSource | _FeatureSource


def _transform(raw: np.ndarray, rows: np.ndarray, columns: np.ndarray, mode: str) -> np.ndarray:
    """Paper: float64, floored at 0, zero diagonal. Reference: squared in float32."""
    if mode == "reference":
        values = np.asarray(raw, dtype=np.float32)  # every source hands out fresh arrays: square in place
        return np.square(values, out=values)
    values = np.maximum(np.asarray(raw, dtype=np.float64), 0.0)
    if values.ndim == 2:  # a block of whole rows: rows[r, 0] is the member in row r
        values[np.arange(values.shape[0]), rows[:, 0]] = 0.0
    else:
        values[rows == columns] = 0.0
    return values


def _row_step(size: int) -> int:
    """Rows per block of the streamed output (each block yielded as it is done)."""
    return max(1, _BLOCK_ELEMENTS // size)


def _first_step(source: _Source) -> int:
    """Rows per block of the first pass: :func:`_row_step`, more on features (see ``_PRODUCT_ROWS``)."""
    step = _row_step(source.size)
    if not isinstance(source, _FeatureSource):
        return step
    return max(step, min(_PRODUCT_ROWS, _PRODUCT_BLOCKS * step))


def _scaled_rows(
    source: _Source, start: int, stop: int, mode: str, raw: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``start:stop`` of the distances, ready for ranking, with their scales and probe→gallery part.

    Returns ``(block, peak, original)``: ``block`` ranks like the scaled rows (in paper mode on
    float32 input it is the floored row, not yet divided), ``peak`` the row scales, and
    ``original`` the scaled probe→gallery distances of the probe rows among them (float32, shape
    (probe rows in the block, G)). Both passes call this, so their values agree bit for bit; ``raw``
    is ``source.rows(start, stop)`` when the caller computed it already (on its own thread).
    """
    size = source.size
    probes = source.probes
    if raw is None:
        raw = source.rows(start, stop)  # a fresh array, changed in place below
    rows = np.arange(start, stop)
    last = max(0, min(stop, probes) - start)
    original = np.empty((last, source.gallery), dtype=np.float32)
    if mode == "paper" and raw.dtype == np.float32:
        # Float32 values keep their order and ties when divided in float64 by a positive
        # number (the quotient's rounding is far finer than their spacing), so the ranking
        # of the scaled row is the ranking of the floored float32 row: no float64 copy.
        block = np.maximum(raw, 0.0, out=raw)
        block[rows - start, rows] = 0.0
        peak = block.max(axis=1).astype(np.float64)
        peak[peak <= 0] = 1
        if last:
            original[...] = block[:last, probes:] / peak[:last, None]
        return block, peak, original
    block = _transform(raw, rows[:, None], np.arange(size)[None, :], mode)
    peak = block.max(axis=1)
    peak[peak <= 0] = 1
    block /= peak[:, None]
    if last:
        original[...] = block[:last, probes:]
    return block, peak, original


def _neighbour_lists(
    source: _Source, width: int, mode: str, out: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """First pass: every member's ``width`` first ranked members and its row scale.

    Also writes the scaled probe→gallery distances into ``out`` (unless it is None: the streamed
    output recomputes them block by block).
    """
    size = source.size
    probes = source.probes
    ranking = np.empty((size, width), dtype=np.int64)
    scale_dtype = np.float32 if mode == "reference" else np.float64
    scales = np.ones(size, dtype=scale_dtype)
    step = _first_step(source)

    chunked = (
        isinstance(source, _FeatureSource)
        and source.metric == "cosine"
        and -(-size // _CHUNK) > width + _SPARE_CHUNKS
    )

    def block_lists(start: int, _: None) -> None:  # disjoint rows: any order, any thread
        stop = min(start + step, size)
        with one_blas_thread():  # the product on this thread alone: the same bits on any thread
            raw = source.gram(start, stop) if chunked else source.rows(start, stop)  # type: ignore[union-attr]
        if chunked:
            scales[start:stop], ranking[start:stop], original = _chunked_lists(
                raw, start, size, probes, width, mode, out is not None
            )
            if out is not None and start < probes:
                out[start : start + len(original)] = original
            return
        block, peak, original = _scaled_rows(source, start, stop, mode, raw)
        scales[start:stop] = peak
        ranking[start:stop] = stable_smallest(block, width)
        if out is not None and start < probes:
            out[start : start + len(original)] = original

    for _ in parallel_blocks(block_lists, range(0, size, step)):
        pass
    return ranking, scales


def _chunked_lists(
    gram: np.ndarray, start: int, size: int, probes: int, width: int, mode: str, original: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_scaled_rows` + :func:`~galleria.rerank._common.stable_smallest` from a cosine Gram block.

    Equal bit for bit to ranking the distances ``1 - gram`` transformed and scaled as
    :func:`_scaled_rows` does, without transforming the whole block. The ranking key of every mode
    (reference: ``(1 - g)² / peak`` in float32; paper: ``max(1 - g, 0)``, the diagonal 0) never
    increases with the similarity ``g`` while ``g ≤ 1``, and the row scale is the key's value at the
    row's smallest or largest ``g``. Each row is cut into ``_CHUNK`` strided chunks (columns ``q``,
    ``q + m``, ``q + 2m``, … with ``m`` = padded size / ``_CHUNK``, the padding ``-inf``); the
    ``width + _SPARE_CHUNKS`` chunks of largest maximum hold the ``width`` first ranked members
    whenever the ``width``-th key among their entries is below the key of the best chunk left out
    (every entry left out then has a larger key). Only those entries are transformed and ranked,
    by (key, column); rows where the check fails are ranked from the whole row. Returns
    ``(peak, ranking, original)`` as
    :func:`_neighbour_lists` stores them (``original``: the probe rows' scaled probe→gallery part).
    """
    rows, padded = gram.shape
    chunk = _CHUNK
    stride = padded // chunk  # chunk q: columns q, q + stride, q + 2·stride, …
    local = np.arange(rows)
    members = start + local
    one = np.float32(1.0)
    if mode == "paper":
        saved = gram[local, members].copy()
        gram[local, members] = np.inf  # the diagonal: key 0 (1 - inf floored), chosen first
    maxima = gram.reshape(rows, chunk, stride).max(axis=1)  # (rows, stride): maximum of each chunk
    lowest = gram[:, :size].min(axis=1)
    if mode == "reference":
        highest = maxima.max(axis=1)
        peak = np.maximum(np.square(one - lowest), np.square(one - highest))
        peak[peak <= 0] = 1
    else:
        peak = np.maximum(one - lowest, 0.0).astype(np.float64)
        peak[peak <= 0] = 1

    def key(similarity: np.ndarray, scale: np.ndarray) -> np.ndarray:
        if mode == "reference":
            squared = np.square(one - similarity)
            return np.asarray(squared / scale)
        return np.asarray(np.maximum(one - similarity, 0.0))

    kept = width + _SPARE_CHUNKS
    order = np.argpartition(-maxima, kept, axis=1)
    chosen = np.sort(order[:, :kept], axis=1)
    left_out = maxima[local, order[:, kept]]  # the best chunk maximum left out
    # Columns of the chosen chunks in increasing order (part-major: part·stride + q, q < stride).
    columns = (chosen[:, None, :] + stride * np.arange(chunk)[None, :, None]).reshape(rows, -1)
    keys = key(gram.reshape(-1)[(local * padded)[:, None] + columns], peak[:, None])  # padding: +inf
    ranking, last_key, tied = _first_in_order(keys, columns, width)
    sound = ~tied & (last_key < key(left_out, peak))
    if mode == "reference":
        sound &= left_out <= one  # the key grows again above g = 1
    if mode == "paper":
        gram[local, members] = saved
    redo = np.flatnonzero(~sound)
    if redo.size:  # near-ties at the cut: rank those rows whole, as _scaled_rows does
        whole = np.subtract(one, gram[redo, :size])
        if mode == "reference":
            np.square(whole, out=whole)
            whole /= peak[redo, None]
        else:
            np.maximum(whole, 0.0, out=whole)
            whole[np.arange(redo.size), members[redo]] = 0.0
        ranking[redo] = stable_smallest(whole, width)
    last = max(0, min(start + rows, probes) - start) if original else 0
    part = gram[:last, probes:size]
    if mode == "reference":
        scaled = np.asarray(np.square(one - part) / peak[:last, None], dtype=np.float32)
    else:
        scaled = np.asarray(np.maximum(one - part, 0.0) / peak[:last, None], dtype=np.float32)
    return peak, ranking, scaled


def _first_in_order(
    keys: np.ndarray, columns: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``width`` smallest keys of every row, ordered by (key, column), and a flag for unsure rows.

    Returns ``(ranked columns, width-th key, tied)``; ``tied`` marks rows whose ``width``-th and
    ``width + 1``-th keys are equal (the choice among equal keys outside the partition is not known
    to be the lowest columns): those rows' first two results are not to be used.
    """
    rows = np.arange(keys.shape[0])[:, None]
    part = np.argpartition(keys, width, axis=1)[:, : width + 1]
    values = keys[rows, part]
    where = columns[rows, part]
    order = np.lexsort((where, values), axis=-1)
    values = values[rows, order]
    tied = values[:, width - 1] == values[:, width]
    return np.ascontiguousarray(where[rows, order[:, :width]]), values[:, width - 1], tied


def _expanded_pairs(
    ranking: np.ndarray, width: int, half_width: int, mode: str
) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. 3–4 on neighbour lists: the (row, column) pairs of every member's expanded set R*."""
    size = ranking.shape[0]
    if size < 2**31:  # half the memory traffic in the (rows, k1, k1/2, k1) comparison below
        ranking = ranking.astype(np.int32)
    near = ranking[:, :width]
    # R(i, k1) = near[i][reciprocal[i]]; R(q, k1/2) = near[q, :half][reciprocal_half[q]]
    reciprocal = reciprocal_mask(ranking, width, _BLOCK_ELEMENTS)
    reciprocal_half = reciprocal_mask(ranking, half_width, _BLOCK_ELEMENTS)
    half_sizes = reciprocal_half.sum(axis=1)
    keys = [np.flatnonzero(reciprocal) // width * size + near[reciprocal].astype(np.int64)]
    step = max(1, _BLOCK_ELEMENTS // (width * half_width * width))

    def expansion(start: int, nothing: None) -> np.ndarray:  # disjoint rows: any thread
        stop = min(start + step, size)
        heads = near[start:stop]  # q for every (i, a)
        members = ranking[heads, :half_width]  # (rows, width, half): candidates of R(q, k1/2)
        kept = reciprocal_half[heads]
        # |R(i, k1) ∩ R(q, k1/2)|: members of R(q, k1/2) found in R(i, k1).
        inside = np.where(reciprocal[start:stop], heads, -1)  # R(i, k1); -1 matches no member
        found = (members[:, :, :, None] == inside[:, None, None, :]).any(axis=3)
        shared = (found & kept).sum(axis=2)
        counts = half_sizes[heads]
        if mode == "reference":
            accepted = reciprocal[start:stop] & (3 * shared > 2 * counts)
        else:
            accepted = reciprocal[start:stop] & (3 * shared >= 2 * counts)
        take = accepted[:, :, None] & kept
        row, _, _ = np.nonzero(take)
        found_keys: np.ndarray = (row + start).astype(np.int64) * size + members[take]
        return found_keys

    keys.extend(parallel_blocks(expansion, range(0, size, step)))
    unique = np.unique(np.concatenate(keys))
    return unique // size, unique % size


def _features(
    source: _Source, rows: np.ndarray, columns: np.ndarray, scales: np.ndarray, mode: str
) -> sp.csr_matrix:
    """Eq. 7: Gaussian weights on the expanded sets, each row scaled to unit L1 norm."""
    size = source.size
    raw = source.pairs(rows, columns)
    values = _transform(raw, rows, columns, mode)
    values = values / scales[rows]
    weights = np.exp(-values).astype(np.float64)
    totals = np.bincount(rows, weights=weights, minlength=size)
    weights /= np.where(totals > 0, totals, 1.0)[rows]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=size))])
    return sp.csr_matrix((weights, columns, indptr), shape=(size, size))


def _query_expansion(features: sp.csr_matrix, ranking: np.ndarray, k2: int) -> sp.csr_matrix:
    """Eq. 11: the mean feature of each member's first ``k2`` ranked members (itself included)."""
    size = ranking.shape[0]
    indptr = np.arange(0, size * k2 + 1, k2)
    selector = sp.csr_matrix((np.ones(size * k2), ranking[:, :k2].ravel(), indptr), shape=(size, size))
    averaged = sp.csr_matrix(selector @ features)
    averaged.data /= k2
    return averaged


class _Jaccard:
    """Eq. 10 (or the reference's ``1 - m / (2 - m)``) and Eq. 12 for any range of probes.

    ``m = Σ_l min(V[p, l], V[g, l])`` is gathered through an inverted index of the gallery
    features (column l → gallery rows with ``V[g, l] > 0``); pairs that share no column have
    ``m = 0`` and a Jaccard distance of exactly 1 in both modes. For a pair, the terms of ``m`` are
    summed in the order of the probe's feature columns whatever the range, so any split of the
    probes into ranges gives the same values bit for bit.
    """

    def __init__(self, features: sp.csr_matrix, probes: int, gallery: int, lambda_value: float, mode: str):
        self.probes = probes
        self.gallery = gallery
        self.lambda_value = lambda_value
        self.mode = mode
        self.totals = np.asarray(features.sum(axis=1)).ravel()
        self.probe_part = sp.csr_matrix(features[:probes])
        self.inverted = sp.csc_matrix(features[probes:])  # column l → gallery rows holding it
        self.column_counts = np.diff(self.inverted.indptr).astype(np.int64)
        self.nnz_rows = np.repeat(np.arange(probes), np.diff(self.probe_part.indptr))
        per_probe = np.bincount(
            self.nnz_rows, weights=self.column_counts[self.probe_part.indices], minlength=probes
        )
        self.reach = np.concatenate([[0.0], np.cumsum(per_probe)])

    def into(self, out: np.ndarray, first: int) -> None:
        """Turn ``out`` — the scaled original distances of probes ``first:first + len(out)`` — into d*."""
        gallery = self.gallery
        probe_part, inverted, column_counts = self.probe_part, self.inverted, self.column_counts
        most_rows = max(1, _BLOCK_ELEMENTS // gallery)
        end = first + out.shape[0]
        start = first
        while start < end:
            # As many probes as fit both the triple budget and the dense block budget (at least one).
            stop = int(np.searchsorted(self.reach, self.reach[start] + _TRIPLES, side="right")) - 1
            stop = min(max(stop, start + 1), start + most_rows, end)
            low, high = probe_part.indptr[start], probe_part.indptr[stop]
            columns = probe_part.indices[low:high]
            counts = column_counts[columns]
            # One repeat (numpy holds the GIL there); the rest are gathers, which release it.
            owner = np.repeat(np.arange(high - low), counts)  # the probe non-zero of every triple
            positions = (
                np.arange(owner.size) + (inverted.indptr[columns] - (np.cumsum(counts) - counts))[owner]
            )
            minima = np.minimum(probe_part.data[low:high][owner], inverted.data[positions])
            keys = ((self.nnz_rows[low:high] - start) * gallery)[owner] + inverted.indices[positions]
            smallest = np.bincount(keys, weights=minima, minlength=(stop - start) * gallery)
            smallest = smallest.astype(np.float64, copy=False)  # int64 when there is no triple
            weight = self.lambda_value
            view = out[start - first : stop - first]
            if self.mode == "reference":
                # 1 - m / (2 - m) is exactly 1 where m = 0 (no shared column), so the whole block
                # takes the formula: the same values as a pass over the shared pairs only, fewer passes.
                denominator = np.subtract(2.0, smallest)
                np.divide(smallest, denominator, out=smallest)
                np.subtract(1.0, smallest, out=smallest)  # Jaccard distance
                np.multiply(smallest, 1.0 - weight, out=smallest)
                np.multiply(view.ravel(), weight, out=denominator, dtype=np.float64)  # λ·d
                np.add(smallest, denominator, out=smallest)
                view[...] = smallest.reshape(view.shape)
                start = stop
                continue
            shared = np.flatnonzero(smallest)
            low_sum = smallest[shared]
            largest = (
                self.totals[start + shared // gallery] + self.totals[self.probes + shared % gallery] - low_sum
            )
            jaccard = np.ones_like(low_sum)
            np.subtract(1.0, low_sum / np.where(largest > 0, largest, 1.0), out=jaccard, where=largest > 0)
            final = np.multiply(view, weight, dtype=np.float64).ravel()  # λ·d in float64
            mixed = (1.0 - weight) * jaccard + final[shared]
            final += (1.0 - weight) * 1.0  # (1 - λ)·1 + λ·d where no column is shared
            final[shared] = mixed
            view[...] = final.reshape(view.shape)
            start = stop


def _settings(size: int, k1: int, k2: int, mode: str) -> tuple[int, int, int]:
    """``(width, half_width, k2)``: the neighbour-list widths and the expansion size on ``size`` members."""
    if mode == "reference":  # the authors slice k1 + 1, round(k1/2) + 1 and k2 entries
        return min(k1 + 1, size), min(half_of(k1) + 1, size), min(k2, size)
    first = min(k1, size - 1)
    return first + 1, half_of(first) + 1, min(k2, first)


def _prepare(
    source: _Source, k1: int, k2: int, lambda_value: float, mode: str, out: np.ndarray | None
) -> _Jaccard:
    """Everything but the output: neighbour lists, expanded sets, features (Eqs. 2–11)."""
    width, half_width, second = _settings(source.size, k1, k2, mode)
    ranking, scales = _neighbour_lists(source, width, mode, out)
    rows, columns = _expanded_pairs(ranking, width, half_width, mode)
    features = _features(source, rows, columns, scales, mode)
    del rows, columns
    if second > 1:
        features = _query_expansion(features, ranking, second)
    return _Jaccard(features, source.probes, source.gallery, lambda_value, mode)


def _stream(
    source: _Source, k1: int, k2: int, lambda_value: float, mode: str
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The re-ranked distances, one block of probes at a time.

    Each block's distances are recomputed by the first pass's own products (blocks of
    :func:`_first_step` rows: the same values bit for bit) and yielded in pieces of
    :func:`_row_step` rows, each turned into d* on a worker thread.
    """
    jaccard = _prepare(source, k1, k2, lambda_value, mode, None)
    step = _row_step(source.size)
    product = _first_step(source)

    def block(start: int, nothing: None) -> list[tuple[np.ndarray, np.ndarray]]:
        stop = min(start + product, source.size)
        with one_blas_thread():  # as in the first pass: one BLAS thread per product
            raw = source.rows(start, stop)
        pieces = []
        for first in range(start, min(stop, source.probes), step):
            last = min(first + step, stop)
            _, _, original = _scaled_rows(source, first, last, mode, raw[first - start : last - start])
            jaccard.into(original, first)
            pieces.append((np.arange(first, first + len(original)), original))
        return pieces

    for pieces in parallel_blocks(block, range(0, source.probes, product)):
        yield from pieces


def _rerank(source: _Source, k1: int, k2: int, lambda_value: float, mode: str) -> np.ndarray:
    """Both modes on a validated source: the (P, G) float32 re-ranked distances."""
    out = np.empty((source.probes, source.gallery), dtype=np.float32)
    jaccard = _prepare(source, k1, k2, lambda_value, mode, out)
    step = max(1, _BLOCK_ELEMENTS // source.gallery)  # probes per task; every split gives the same values

    def block(start: int, _: None) -> None:
        jaccard.into(out[start : start + step], start)

    for _ in parallel_blocks(block, range(0, source.probes, step)):
        pass
    return out
