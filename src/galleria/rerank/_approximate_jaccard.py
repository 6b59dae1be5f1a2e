"""Eqs. 4–11 of the approximate re-ranking on its neighbour lists, holding as little at once as it can.

The exact mode's code (:mod:`galleria.rerank.full`) builds the expanded sets, the features of Eq. 7,
their query expansion (Eq. 11) and then the Jaccard index (its probe rows and the inverted index of
its gallery rows), keeping each step's input until the end. At 10⁶ members the expanded features
are the largest thing in the process (a few hundred non-zeros per member after query expansion), so
here every input is released as soon as the next step holds what it needs, the gallery rows are
turned into their inverted index without keeping the whole matrix beside them, and (``single``)
the weights are kept in float32 instead of float64 — the Jaccard sums are still taken in float64.
The values are the exact mode's when ``single`` is false.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria.rerank import full

__all__ = ["jaccard_of_lists"]


def jaccard_of_lists(
    source: full._FeatureSource,
    holder: list[np.ndarray],
    scales: np.ndarray,
    widths: tuple[int, int, int],
    lambda_value: float,
    mode: str,
    *,
    single: bool,
) -> Any:
    """The exact mode's Jaccard index (``full._Jaccard``) of the lists in ``holder`` (emptied).

    ``holder`` is a one-item list holding the (n, width) neighbour lists, each member first: it is
    emptied once the lists are no longer needed, so that the caller keeps no reference to them.
    """
    width, half_width, second = widths
    ranking = holder.pop()
    rows, columns = full._expanded_pairs(ranking, width, half_width, mode)
    features = full._features(source, rows, columns, scales, mode)
    del rows, columns
    if second > 1:
        features = full._query_expansion(features, ranking, second)
    del ranking
    if single:
        features.data = features.data.astype(np.float32)
    jaccard = full._Jaccard.__new__(full._Jaccard)
    probes, gallery = source.probes, source.gallery
    jaccard.probes, jaccard.gallery = probes, gallery
    jaccard.lambda_value, jaccard.mode = lambda_value, mode
    jaccard.totals = np.asarray(features.sum(axis=1), dtype=np.float64).ravel()
    jaccard.probe_part = sp.csr_matrix(features[:probes])
    gallery_rows = sp.csr_matrix(features[probes:])
    del features
    jaccard.inverted = sp.csc_matrix(gallery_rows)  # column l → gallery rows holding it
    del gallery_rows
    jaccard.column_counts = np.diff(jaccard.inverted.indptr).astype(np.int64)
    jaccard.nnz_rows = np.repeat(np.arange(probes), np.diff(jaccard.probe_part.indptr))
    per_probe = np.bincount(
        jaccard.nnz_rows, weights=jaccard.column_counts[jaccard.probe_part.indices], minlength=probes
    )
    jaccard.reach = np.concatenate([[0.0], np.cumsum(per_probe)])
    return jaccard
