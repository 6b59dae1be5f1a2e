"""The load-time witness of a stored decoupled-diffusion offline table (docs/security.md).

A store file keeps the offline part of decoupled diffusion (:mod:`galleria.rerank.decoupled`) beside
its vectors; a re-sealed file could keep a table that does not belong to them and so decide the
rankings. :func:`check_offline_witness` recomputes a sample of rows from the vectors and refuses a
table that disagrees, naming the file, the record and its tensors.
"""

from __future__ import annotations

import numpy as np

from galleria.rerank._decoupled_core import _neighbour_lists, _normalised_affinity, _truncated_rows
from galleria.rerank.base import check_features
from galleria.store import GallerySnapshot, OfflineDiffusion, gallery_state, take_snapshot
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = ["WITNESS_ROWS", "check_offline_witness"]


#: Rows of a stored offline table recomputed (or bounded) when a store file is loaded.
WITNESS_ROWS = 8
#: Galleries up to this many multiply-adds (n² · d) get their sampled rows recomputed exactly.
_WITNESS_FULL = 1 << 28


def _witness_rows(count: int) -> np.ndarray:
    """Up to :data:`WITNESS_ROWS` rows spread over the table, the first and the last included."""
    return np.unique(np.linspace(0, count - 1, num=min(WITNESS_ROWS, count)).round().astype(np.int64))


def check_offline_witness(offline: OfflineDiffusion, vectors: np.ndarray, source: str) -> None:
    """Refuse a stored offline table that does not belong to the store's ``vectors`` (ValueError
    naming ``source``: where the table was read, the file, its record and tensors as
    :attr:`~galleria.store._state.OfflineDiffusion.source` says it).

    A sample of rows is checked against the vectors: each row's truncation list must hold the
    item's most similar others (their similarities equal the best ones, ties allowed), and its
    value at the item itself must lie in ``[1, 1 / (1 - α)]`` (conjugate gradient from zero reaches
    1 at its first step and the exact value is at most ``1 / (1 - α)``). Where the gallery is small
    enough (``n² · d`` up to 2**28), the sampled rows are recomputed and compared outright.
    """
    unit = check_features("store vectors", vectors)
    count, width = offline.positions.shape
    params = offline.params
    rows = _witness_rows(count)

    def refuse(problem: str) -> ValueError:
        return ValueError(
            f"{source} does not match the store's vectors: {problem}; recompute it "
            "(galleria build --precompute-rerank)"
        )

    similar = unit[rows] @ unit.T
    similar[np.arange(len(rows)), rows] = -np.inf
    best = -np.sort(-similar, axis=1)[:, : width - 1]
    held = np.take_along_axis(similar, offline.positions[rows, 1:].astype(np.int64), axis=1)
    if not np.allclose(held, best, rtol=0.0, atol=1e-5):
        bad = int(rows[np.flatnonzero(~np.isclose(held, best, rtol=0.0, atol=1e-5).all(axis=1))[0]])
        raise refuse(f"row {bad} does not list its most similar items")
    first = offline.values[rows, 0].astype(np.float64)
    ceiling = 1.0 / (1.0 - float(params["alpha"]))
    outside = (first < 1.0 - 1e-4) | (first > ceiling * (1.0 + 1e-4))
    if outside.any():
        bad = int(rows[np.flatnonzero(outside)[0]])
        raise refuse(f"row {bad} has the value {first[np.flatnonzero(outside)[0]]:.6g} at its own item")
    if count * count * unit.shape[1] > _WITNESS_FULL:
        return
    graph_k = min(int(params["k"]), count - 1)
    _, graph, similarities = _neighbour_lists(unit, width, graph_k)
    normalised = _normalised_affinity(graph, similarities, float(params["gamma"]))
    expected = _truncated_rows(
        normalised,
        offline.positions[rows],
        float(params["alpha"]),
        float(params["tol"]),
        int(params["maxiter"]),
    )
    scale = max(1.0, float(np.abs(expected).max()))
    close = np.isclose(offline.values[rows], expected, rtol=0.0, atol=1e-4 * scale).all(axis=1)
    if not close.all():
        raise refuse(f"row {int(rows[np.flatnonzero(~close)[0]])} differs from its recomputed diffusion")


def _witnessed(
    store: InMemoryImageEmbeddingStore, held: OfflineDiffusion, state: int, snapshot: GallerySnapshot | None
) -> OfflineDiffusion:
    """``held`` (read from a file, kept for gallery ``state``) once
    :func:`~galleria.rerank.witness.check_offline_witness` accepts it on the store's vectors of that
    state; kept in the store as checked. Should the gallery have moved on meanwhile, ``held`` is
    answered as it is: it belongs to an old state, which the caller refuses anyway."""
    source = take_snapshot(store) if snapshot is None else snapshot
    if source.state != state:
        return held
    check_offline_witness(held, source.vectors, str(held.source))  # ValueError naming file and key
    checked = OfflineDiffusion(held.params, held.positions, held.values)
    with store._lock.writing():
        if store._offline_diffusion is held and gallery_state(store) == source.state:
            store._offline_diffusion = checked
    return checked
