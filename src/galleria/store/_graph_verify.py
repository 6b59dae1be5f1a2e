"""Verifying a neighbour-graph file's rows against the store's vectors (:mod:`galleria.store.graph`):
each verified row must hold its true nearest neighbours, not only true distances."""

from __future__ import annotations

import math

import numpy as np

from galleria.distances import pairwise_distances
from galleria.index.neighbor_graph import exact_graph

__all__ = ["APPROXIMATE_RECALL", "verify_graph_rows"]

#: Share of a verified row's true nearest neighbours an approximate graph (hnsw, ivf) must list.
APPROXIMATE_RECALL = 0.9
#: Rows verified at once (their exact neighbours are computed among all items).
_VERIFY_BLOCK = 4096


def verify_graph_rows(
    ids: np.ndarray,
    distances: np.ndarray,
    vectors: np.ndarray,
    space: str,
    method: str,
    what: str,
    rows: np.ndarray,
) -> None:
    """Refuse a graph whose ``rows`` do not hold their true nearest neighbours (ValueError naming ``what``).

    For each row its listed distances are recomputed from ``vectors``, and its exact ``k`` nearest
    items are found among all of them: none may lie closer than the row's k-th listed distance
    without being listed. An approximate graph (``method`` hnsw or ivf) may miss at most
    1 - :data:`APPROXIMATE_RECALL` of them over the rows verified, and must hold each row's
    nearest item in all but that share of rows. ``ids``/``distances`` are the whole graph's arrays,
    already through :func:`~galleria.index.neighbor_graph.check_graph_arrays`.
    """
    count, k = ids.shape
    if k == 0 or len(rows) == 0:
        return
    tolerance = 1e-4 * math.sqrt(vectors.shape[1])
    missed = closer = first_missed = 0
    for start in range(0, len(rows), _VERIFY_BLOCK):
        chosen = np.asarray(rows[start : start + _VERIFY_BLOCK], dtype=np.int64)
        listed, claimed = ids[chosen].astype(np.int64), distances[chosen]
        recomputed = np.stack(
            [
                pairwise_distances(vectors[row : row + 1], vectors[listed[i]], space)[0]
                for i, row in enumerate(chosen)
            ]
        )
        wrong = ~np.isclose(recomputed, claimed, rtol=1e-4, atol=tolerance).all(axis=1)
        if wrong.any():
            raise ValueError(
                f"{what}: the distances do not match the store's vectors "
                f"(row {int(chosen[np.flatnonzero(wrong)[0]])})"
            )
        true_ids, true_distances = exact_graph(vectors, k, space, rows=chosen)
        bound = claimed[:, -1:] - 1e-4 * np.abs(claimed[:, -1:]) - tolerance
        nearer = true_distances < bound  # must all be listed
        offsets = np.arange(len(chosen), dtype=np.int64)[:, None] * count
        flat = np.sort((listed + offsets).ravel())
        wanted = true_ids.astype(np.int64) + offsets
        spot = np.minimum(np.searchsorted(flat, wanted), flat.size - 1)
        absent = nearer & (flat[spot] != wanted)
        if method == "exact" and absent.any():
            row = int(np.flatnonzero(absent.any(axis=1))[0])
            hidden = int(true_ids[row][np.flatnonzero(absent[row])[0]])
            raise ValueError(
                f"{what}: row {int(chosen[row])} does not list its true neighbour {hidden} "
                f"(distance {float(true_distances[row][np.flatnonzero(absent[row])[0]]):.6g}, closer than "
                f"its k-th listed {float(claimed[row, -1]):.6g})"
            )
        missed += int(absent.sum())
        closer += int(nearer.sum())
        first_missed += int(absent[:, 0].sum())
    if method != "exact":
        slots = len(rows) * k
        if missed > (1.0 - APPROXIMATE_RECALL) * slots or first_missed > (1.0 - APPROXIMATE_RECALL) * len(
            rows
        ):
            raise ValueError(
                f"{what}: its {len(rows)} verified row(s) miss {missed} of their true nearest neighbours "
                f"({first_missed} row(s) their nearest); an {method} graph may miss at most "
                f"{1.0 - APPROXIMATE_RECALL:.0%}"
            )
