"""Approximate full k-reciprocal re-ranking for galleries too large for an exact all-pairs pass.

:func:`iter_k_reciprocal_rerank_approximate` streams the same re-ranked probe×gallery distances as
:func:`galleria.rerank.iter_k_reciprocal_rerank_features` (Eqs. 2–12 of the paper, ``"paper"`` or
``"reference"`` mode), with two parts approximated:

* **Neighbour lists.** Every member's ``k1 + 1`` first ranked members come from a k-NN graph over
  the probes and the gallery together (:func:`galleria.index.neighbor_graph.build_graph`: exact,
  HNSW refined exactly, or IVF), not from the exact pass over all ``(P + G)²`` pairs. A member's
  own row comes first, then its graph neighbours by (distance, id). With an exact graph the lists
  are those of the exact mode (barring exact ties of distances whose transformed values differ).
* **Row scales.** The exact mode divides each member's distances by the largest in its row (a
  pass over all pairs). Here that maximum is taken over ``scale_sample`` members evenly spread
  over the set (every member when the set is not larger), so it can only be smaller.

Everything after — reciprocity, the expansion of Eq. 4, the features of Eq. 7, query expansion
and the Jaccard sums — is the exact mode's own code on those lists. The streamed output computes
each block of probes' original distances to the whole gallery (time P×G×D, memory one block), so
memory grows with ``(P + G)·k1``, never with ``P×G``; :func:`galleria.metrics.reid_evaluate`
counts the ranks of each probe's positives from the blocks without sorting a row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from galleria._blas import one_blas_thread
from galleria._validation import check_positive_int
from galleria.distances import pairwise_distances
from galleria.rerank import full
from galleria.rerank._approximate_graph import GRAPH_METHODS, SYMMETRIC_LIMIT, symmetric_graph
from galleria.rerank._approximate_jaccard import jaccard_of_lists
from galleria.rerank._common import K1, K2, LAMBDA, parallel_blocks

__all__ = [
    "GRAPH_METHODS",
    "SCALE_SAMPLE",
    "SINGLE_LIMIT",
    "SYMMETRIC_LIMIT",
    "PreparedApproximate",
    "iter_diffusion_rerank_approximate",
    "iter_k_reciprocal_rerank_approximate",
    "prepare_k_reciprocal_approximate",
]

#: Sets larger than this keep the weights of their sparse features in float32 (half the memory of
#: the largest arrays; the Jaccard sums stay float64), not float64 as the exact mode does.
SINGLE_LIMIT = 200_000
#: Members over which each row's scale is taken (default).
SCALE_SAMPLE = 4096
#: Distances per block of the streamed output (float32: 64 MB).
_OUTPUT_ELEMENTS = 1 << 24
#: Distances per block of the scale pass (its own: a product's last bits may depend on its rows).
_SCALE_ELEMENTS = 1 << 24


def iter_k_reciprocal_rerank_approximate(
    probe: Any,
    gallery: Any,
    *,
    metric: str = "cosine",
    k1: int = K1.default,
    k2: int = K2.default,
    lambda_value: float = LAMBDA.default,
    mode: str = "reference",
    graph: Any = "auto",
    scale_sample: int = SCALE_SAMPLE,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Full k-reciprocal re-ranking with graph neighbour lists, a block of probes at a time.

    Parameters
    ----------
    probe, gallery : array_like, shapes (P, D) and (G, D)
        Features, as for :func:`galleria.rerank.iter_k_reciprocal_rerank_features`.
    metric, k1, k2, lambda_value, mode
        As for :func:`galleria.rerank.iter_k_reciprocal_rerank_features` (``mode`` defaults to the
        authors' ``"reference"`` here).
    graph : {"auto", "symmetric", "hnsw", "exact", "ivf"} or array_like of int, default "auto"
        How the neighbour lists are found over the probes followed by the gallery: ``"symmetric"``
        the exact lists with each pair's product computed once
        (:func:`galleria.rerank._approximate_graph.symmetric_graph`); ``"hnsw"``, ``"exact"``,
        ``"ivf"`` a method of :func:`galleria.index.neighbor_graph.build_graph`; ``"auto"``
        ``"symmetric"`` up to :data:`SYMMETRIC_LIMIT` members, ``"hnsw"`` above; or the ``ids``
        already computed — shape (P + G, m) with ``m >= min(k1, P + G - 1)`` for
        ``"paper"`` (``k1`` for ``"reference"``), row ``i`` the nearest other members of member
        ``i`` in order.
    scale_sample : int, default 4096
        Members over which each row's largest distance (its scale) is taken.

    Yields
    ------
    (probe_rows, block)
        As :func:`galleria.rerank.iter_k_reciprocal_rerank_features` does.

    Raises
    ------
    TypeError, ValueError
        As :func:`galleria.rerank.iter_k_reciprocal_rerank_features`; also an unknown ``graph``
        method, ``graph`` ids of the wrong shape or out of range, or ``scale_sample < 1``.

    Examples
    --------
    >>> probe = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> gallery = np.array([[1.0, 0.1], [0.0, 1.0], [0.9, 0.0], [0.1, 1.0]])
    >>> [(rows.tolist(), block.shape) for rows, block in iter_k_reciprocal_rerank_approximate(
    ...     probe, gallery, k1=2, k2=1, graph="exact")]
    [([0, 1], (2, 4))]
    """
    checked = _checked(probe, gallery, metric, k1, k2, lambda_value, mode, graph, scale_sample)
    return _stream(checked)


def prepare_k_reciprocal_approximate(
    probe: Any,
    gallery: Any,
    *,
    metric: str = "cosine",
    k1: int = K1.default,
    k2: int = K2.default,
    lambda_value: float = LAMBDA.default,
    mode: str = "reference",
    graph: Any = "auto",
    scale_sample: int = SCALE_SAMPLE,
) -> PreparedApproximate:
    """Everything of :func:`iter_k_reciprocal_rerank_approximate` but its output, done now.

    The result computes any block of probes on its own (:meth:`PreparedApproximate.block`), with
    the same values whatever the blocks: what a distributed run sends to its workers once.
    """
    checked = _checked(probe, gallery, metric, k1, k2, lambda_value, mode, graph, scale_sample)
    return _prepare(*checked)


class PreparedApproximate:
    """The row scales and the Jaccard index of the graph lists' features: output blocks on demand."""

    def __init__(
        self,
        source: full._FeatureSource,
        scales: np.ndarray,
        jaccard: Any,
        mode: str,
        whole_rows: bool | None = None,
    ) -> None:
        self.source = source
        #: Products of whole rows (probe × every member, the gallery part kept), as the exact mode
        #: computes them: taken when every scale is exact (a set no larger than the scale sample),
        #: so that an exact graph gives the exact mode's values bit for bit. Otherwise probe × gallery.
        #: None: when the set is no larger than the default sample.
        self.whole_rows = source.size <= SCALE_SAMPLE if whole_rows is None else whole_rows
        self.scales = scales
        self.jaccard = jaccard
        self.mode = mode

    @property
    def probes(self) -> int:
        return int(self.source.probes)

    @property
    def step(self) -> int:
        """Probes per block of the streamed output (fixed by the gallery's size alone)."""
        return max(2, _OUTPUT_ELEMENTS // max(1, int(self.source.gallery)))

    def _as_exact(self, start: int, stop: int) -> np.ndarray:
        """The exact stream's scaled distances of probes ``start:stop``, bit for bit.

        Its very products: whole rows, in its blocks of rows (a BLAS product's last bits may depend
        on the rows multiplied with it), then its scaling. Only for small sets (``whole_rows``).
        """
        source, product = self.source, full._first_step(self.source)
        pieces = []
        for first in range(start // product * product, stop, product):
            last = min(first + product, source.size)
            with one_blas_thread():
                raw = source.rows(first, last)
            low, high = max(start, first), min(stop, last)
            pieces.append(full._scaled_rows(source, low, high, self.mode, raw[low - first : high - first])[2])
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def _original(self, start: int, stop: int) -> np.ndarray:
        """Probes ``start:stop``'s scaled distances to the gallery (probe × gallery products only)."""
        raw = _distances(self.source, start, stop, slice(self.source.probes, self.source.size))
        if self.mode == "reference":
            original: np.ndarray = np.square(raw, out=raw)
            original /= self.scales[start:stop, None]
            return original
        floored = np.maximum(raw, 0.0, out=raw)
        scaled = np.empty(floored.shape, dtype=np.float32)
        np.divide(floored, self.scales[start:stop, None], out=scaled, casting="same_kind")
        return scaled

    def block(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """``(probe_rows, distances)`` of probes ``start:stop``; a row's values do not depend on the block."""
        source = self.source
        if not 0 <= start < stop <= source.probes:
            raise ValueError(f"block must lie within [0, {source.probes}], got {start}:{stop}")
        if self.whole_rows:
            original = self._as_exact(start, stop)
        else:
            original = self._original(start, stop)
        self.jaccard.into(original, start)
        return np.arange(start, stop), original


_Checked = tuple[full._FeatureSource, tuple[int, int, int], float, str, Any, int]


def _checked(
    probe: Any,
    gallery: Any,
    metric: Any,
    k1: Any,
    k2: Any,
    lambda_value: Any,
    mode: Any,
    graph: Any,
    scale_sample: Any,
) -> _Checked:
    """Every argument checked (graph ids included); nothing built yet."""
    source, settings = full._feature_source(probe, gallery, metric, k1, k2, lambda_value, mode)
    first, second, weight, chosen = settings
    sample = check_positive_int("scale_sample", scale_sample)
    widths = full._settings(source.size, first, second, chosen)
    if isinstance(graph, str):
        if graph not in GRAPH_METHODS:
            raise ValueError(f"graph must be one of {GRAPH_METHODS} or an array of ids, got {graph!r}")
        return source, widths, weight, chosen, graph, sample
    return source, widths, weight, chosen, _given_ids(source, graph, widths[0] - 1), sample


def _given_ids(source: full._FeatureSource, graph: Any, wanted: int) -> np.ndarray:
    """Graph ids handed in: a (size, >= wanted) array of member indices, cut to ``wanted`` columns."""
    array = np.asarray(graph)
    if array.dtype.kind not in "iu" or array.ndim != 2:
        raise TypeError(
            f"graph must be a method name or a 2-D array of integer ids, got {array.dtype} {array.shape}"
        )
    if array.shape[0] != source.size or array.shape[1] < wanted:
        raise ValueError(
            f"graph ids must have shape ({source.size}, >= {wanted}) (probes + gallery, k1), "
            f"got {array.shape}"
        )
    kept = array[:, :wanted].astype(np.int64)
    if kept.size and (kept.min() < 0 or kept.max() >= source.size):
        raise ValueError(f"graph ids must lie in [0, {source.size}), got {kept.min()}..{kept.max()}")
    return kept


def _built_ids(source: full._FeatureSource, method: str, wanted: int) -> np.ndarray:
    """The k-NN graph of probes + gallery by ``method``, ``wanted`` neighbours a member."""
    from galleria.index.neighbor_graph import build_graph

    if method == "auto":
        method = "symmetric" if source.size <= SYMMETRIC_LIMIT else "hnsw"
    if method == "symmetric":
        return symmetric_graph(source.features, min(wanted, source.size - 1), source.metric)
    space = "cosine" if source.metric == "cosine" else "l2"
    ids, _, _ = build_graph(source.features, max(wanted, 1), space, method)
    return np.asarray(ids[:, :wanted], dtype=np.int64)


def _ranking(ids: np.ndarray) -> np.ndarray:
    """Neighbour lists of the exact mode's layout: each member itself first, then its graph row."""
    size = ids.shape[0]
    return np.ascontiguousarray(np.concatenate([np.arange(size, dtype=np.int64)[:, None], ids], axis=1))


def _distances(source: full._FeatureSource, start: int, stop: int, columns: slice | np.ndarray) -> np.ndarray:
    """Raw distances of members ``start:stop`` to ``columns``, as :meth:`_FeatureSource.rows` gives them."""
    rows = source.features[start:stop]
    chosen = source.features[columns]
    with one_blas_thread():
        if source.metric == "cosine":
            gram: np.ndarray = rows @ chosen.T
            np.subtract(np.float32(1.0), gram, out=gram)
            return gram
        squared = pairwise_distances(rows, chosen, "l2")
    return squared if source.squared else np.asarray(np.sqrt(squared))


def _scales(source: full._FeatureSource, sample: int, mode: str) -> np.ndarray:
    """Each member's largest transformed distance to ``sample`` evenly spread members (1 if not > 0)."""
    size = source.size
    columns = np.unique(np.linspace(0, size - 1, min(sample, size)).astype(np.int64))
    step = max(2, _SCALE_ELEMENTS // columns.size)
    scales = np.empty(size, dtype=np.float32 if mode == "reference" else np.float64)

    def block(start: int, nothing: None) -> None:
        stop = min(start + step, size)
        raw = _distances(source, start, stop, columns)
        if mode == "reference":
            values = np.square(raw, out=raw)
        else:
            values = np.maximum(raw.astype(np.float64), 0.0)
            own = np.searchsorted(columns, np.arange(start, stop))
            hit = own < columns.size
            local = np.flatnonzero(hit)
            local = local[columns[own[local]] == start + local]
            values[local, own[local]] = 0.0
        peak = values.max(axis=1)
        peak[peak <= 0] = 1
        scales[start:stop] = peak

    for _ in parallel_blocks(block, range(0, size, step)):
        pass
    return scales


def _prepare(
    source: full._FeatureSource,
    widths: tuple[int, int, int],
    lambda_value: float,
    mode: str,
    graph: Any,
    sample: int,
) -> PreparedApproximate:
    """Eqs. 3–11 on the graph lists: everything the output blocks need."""
    width = widths[0]
    ids = _built_ids(source, graph, width - 1) if isinstance(graph, str) else graph
    holder = [_ranking(ids)]
    del ids, graph
    scales = _scales(source, sample, mode)
    single = source.size > SINGLE_LIMIT
    jaccard = jaccard_of_lists(source, holder, scales, widths, lambda_value, mode, single=single)
    return PreparedApproximate(source, scales, jaccard, mode, whole_rows=source.size <= sample)


def _stream(checked: _Checked) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The output one block of probes at a time (the work starts at the first ``next``)."""
    prepared = _prepare(*checked)
    del checked  # given graph ids: no longer needed
    step, probes = prepared.step, prepared.probes

    def block(start: int, nothing: None) -> tuple[np.ndarray, np.ndarray]:
        return prepared.block(start, min(start + step, probes))

    yield from parallel_blocks(block, range(0, probes, step))


# The approximate diffusion (the same graph machinery), beside the approximate k-reciprocal mode.
from galleria.rerank._approximate_diffusion import iter_diffusion_rerank_approximate  # noqa: E402
