"""GNN re-ranking (Zhang et al., "Understanding Image Retrieval Re-Ranking: A Graph Neural Network
Perspective", 2020): neighbour sets propagated twice over a k-NN graph, then compared by cosine.

On a set of items with similarities ``s(i, j)``, let ``R_i`` be the ranking list of item ``i``
(similarities in descending order, ties to the lower position; the item itself normally first).

1. Adjacency: ``A_ij = 1`` if ``j`` is among the first ``k1`` entries of ``R_i``, else 0.
2. Edge weights: ``W_ij = s(i, j) ** 2`` for the first ``k2`` entries ``j`` of ``R_i``, else 0.
3. Unless ``k2 = 1``, two propagation rounds: ``A ← A + Aᵀ``; ``A ← W A`` (each row becomes the
   weighted sum of the rows of its ``k2`` nearest items); every row divided by its L2 norm (a zero
   row stays zero).
4. The new similarity of ``i`` and ``j`` is ``A_i · A_j``; the re-ranker's distance is ``1 - A_i · A_j``.

Defaults ``k1 = 26``, ``k2 = 7`` are the published setting for Market-1501.

* :class:`GnnReranker` — one query's pool: the set is the probe followed by its candidates.
* :func:`gnn_rerank_features` — the full probe×gallery setting on the set of probes then gallery
  items: sparse matrices (scipy) on the CPU, or dense torch tensors on ``device`` when one is given.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria._validation import check_positive_int
from galleria.rerank._common import stable_smallest
from galleria.rerank.base import PoolReranker, check_features, check_store, top_similar
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = ["ROUNDS", "GnnReranker", "check_gnn_params", "gnn_pools", "gnn_rerank_features"]

#: Propagation rounds of the published method.
ROUNDS = 2


def check_gnn_params(k1: Any, k2: Any) -> tuple[int, int]:
    """Validate ``k1`` and ``k2``: positive ints with ``k2 <= k1``."""
    first = check_positive_int("k1", k1)
    second = check_positive_int("k2", k2)
    if second > first:
        raise ValueError(f"k2 must not exceed k1, got k2={k2!r} > k1={k1!r}")
    return first, second


def _normalise_rows_dense(matrix: np.ndarray) -> np.ndarray:
    norms = np.sqrt(np.einsum("...ij,...ij->...i", matrix, matrix))[..., None]
    result: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return result


def gnn_pools(similarities: np.ndarray, *, k1: int, k2: int) -> np.ndarray:
    """The propagated neighbour features ``A`` of ``B`` sets of ``n`` items, from (B, n, n) similarities.

    ``k1`` is capped at ``n`` and ``k2`` at the capped ``k1``. Returns (B, n, n) float64.
    """
    count, size, _ = similarities.shape
    first = min(k1, size)
    second = min(k2, first)
    sims = np.asarray(similarities, dtype=np.float64)
    ranks = stable_smallest(-sims, first)
    batch = np.arange(count)[:, None, None]
    rows = np.arange(size)[None, :, None]
    adjacency = np.zeros((count, size, size), dtype=np.float64)
    adjacency[batch, rows, ranks] = 1.0
    if second == 1:
        return adjacency
    near = ranks[:, :, :second]
    weights = np.take_along_axis(sims, near, axis=2) ** 2  # (B, n, k2): W's only non-zeros
    for _ in range(ROUNDS):
        adjacency = adjacency + adjacency.transpose(0, 2, 1)
        # (W A)_i = Σ_k W_{i, near_ik} A_{near_ik}: a weighted sum of k2 rows, not a dense matrix product.
        propagated = np.zeros_like(adjacency)
        pools = np.arange(count)[:, None]
        for slot in range(second):
            propagated += weights[:, :, slot, None] * adjacency[pools, near[:, :, slot]]
        adjacency = _normalise_rows_dense(propagated)
    return adjacency


class GnnReranker(PoolReranker):
    """Re-rank a store's retrieved candidates with GNN re-ranking (Zhang et al. 2020).

    For one query, the set is the probe (similarity 1 to itself) followed by its candidates; the
    probe's similarities come from the candidates' scores, those among candidates from the store's
    vectors (see :mod:`galleria.rerank.base`). Each returned candidate is scored by
    ``1 - A_probe · A_candidate`` (lower is better).

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        The store the candidates come from (not one on an ``ExternalSearchIndex``).
    k1 : int, default 26
        Neighbours in the initial adjacency (capped at the set size).
    k2 : int, default 7
        Neighbours each propagation sums over (``k2 <= k1``; 1 skips the propagation).

    Raises
    ------
    TypeError
        ``store`` is not an ``InMemoryImageEmbeddingStore``; ``k1`` / ``k2`` not integers.
    ValueError
        The store searches an ``ExternalSearchIndex``; ``k1`` / ``k2`` below 1; ``k2 > k1``.

    Examples
    --------
    >>> vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c", "d"], vectors)
    >>> candidates = store.retrieve_by_vector([1.0, 0.05], k=4)[0]
    >>> [c.path for c in GnnReranker(store, k1=2, k2=2).rerank(candidates, top_k=2)]
    ['a', 'b']
    """

    def __init__(self, store: InMemoryImageEmbeddingStore, *, k1: int = 26, k2: int = 7) -> None:
        self._store = check_store(store, "GNN re-ranking")
        self._k1, self._k2 = check_gnn_params(k1, k2)

    def __repr__(self) -> str:
        return f"GnnReranker(k1={self._k1}, k2={self._k2}, store={self._store!r})"

    def params(self) -> dict[str, Any]:
        """The re-ranker's parameters, as its constructor takes them."""
        return {"k1": self._k1, "k2": self._k2}

    def _pool_scores(self, probe: np.ndarray, among: np.ndarray) -> np.ndarray:
        count, size = probe.shape
        sims = np.empty((count, size + 1, size + 1), dtype=np.float64)
        sims[:, 1:, 1:] = among
        sims[:, 0, 1:] = probe
        sims[:, 1:, 0] = probe
        sims[:, 0, 0] = 1.0
        features = gnn_pools(sims, k1=self._k1, k2=self._k2)
        result: np.ndarray = 1.0 - np.einsum("bj,bij->bi", features[:, 0], features[:, 1:])
        return result


def _sparse_features(features: np.ndarray, k1: int, k2: int) -> sp.csr_matrix:
    size = features.shape[0]
    ranks, values = top_similar(features, features, k1)
    rows = np.repeat(np.arange(size), k1)
    adjacency = sp.csr_matrix((np.ones(rows.size), (rows, ranks.ravel())), shape=(size, size))
    if k2 == 1:
        return adjacency
    near_rows = np.repeat(np.arange(size), k2)
    weights = sp.csr_matrix(
        (values[:, :k2].astype(np.float64).ravel() ** 2, (near_rows, ranks[:, :k2].ravel())),
        shape=(size, size),
    )
    for _ in range(ROUNDS):
        adjacency = (adjacency + adjacency.T).tocsr()
        adjacency = (weights @ adjacency).tocsr()
        norms = np.sqrt(np.asarray(adjacency.multiply(adjacency).sum(axis=1)).ravel())
        scale = np.zeros_like(norms)
        np.divide(1.0, norms, out=scale, where=norms > 0)
        adjacency = (sp.diags(scale) @ adjacency).tocsr()
    return adjacency


def _torch_features(features: np.ndarray, k1: int, k2: int, device: Any) -> Any:
    try:
        import torch
    except ImportError as error:
        raise ImportError(
            "gnn_rerank_features(device=...) needs torch; install it with: pip install -e '.[timm]'"
        ) from error
    try:
        where = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device {device!r} is not a valid torch device: {error}") from error
    x = torch.from_numpy(features).to(where)
    sims = x @ x.T
    values, ranks = torch.sort(sims, dim=1, descending=True, stable=True)
    values, ranks = values[:, :k1], ranks[:, :k1]
    adjacency = torch.zeros_like(sims).scatter_(1, ranks, 1.0)
    if k2 == 1:
        return adjacency
    weights = torch.zeros_like(sims).scatter_(1, ranks[:, :k2], values[:, :k2] ** 2)
    for _ in range(ROUNDS):
        adjacency = adjacency + adjacency.T
        adjacency = weights @ adjacency
        norms = torch.linalg.vector_norm(adjacency, dim=1, keepdim=True)
        adjacency = torch.where(norms > 0, adjacency / norms.clamp_min(1e-30), adjacency)
    return adjacency


def gnn_rerank_features(
    probe_features: Any, gallery_features: Any, *, k1: int = 26, k2: int = 7, device: Any = None
) -> np.ndarray:
    """GNN re-ranking distances of every probe to every gallery item (set: probes then gallery).

    Features are L2-normalised and compared by cosine. Without ``device`` the adjacency and its
    propagation are scipy.sparse matrices (a few hundred non-zeros per row after two rounds); with
    ``device`` (e.g. ``"cuda"``) they are dense float32 torch tensors of size (P + G)², as in the
    authors' GPU code. The two agree to float32 rounding.

    Parameters
    ----------
    probe_features : array_like, shape (P, d)
    gallery_features : array_like, shape (G, d)
    k1, k2 : int
        As :class:`GnnReranker` (``k1`` capped at ``P + G``, ``k2`` at the capped ``k1``).
    device : str or torch.device, optional
        Run on torch there instead of on scipy.sparse.

    Returns
    -------
    numpy.ndarray
        (P, G) float64 distances ``1 - A_p · A_g`` (lower is closer).

    Raises
    ------
    TypeError, ValueError
        Bad features (as :func:`~galleria.rerank.k_reciprocal_rerank_features`), bad ``k1`` / ``k2``,
        an invalid device.
    ImportError
        ``device`` given without torch installed.

    Examples
    --------
    >>> gallery = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> distances = gnn_rerank_features([[1.0, 0.05]], gallery, k1=3, k2=2)
    >>> np.argsort(distances[0], kind="stable")[:2].tolist()
    [0, 1]
    """
    first, second = check_gnn_params(k1, k2)
    probes = check_features("probe_features", probe_features)
    gallery = check_features("gallery_features", gallery_features, probes.shape[1])
    features = np.concatenate([probes, gallery], axis=0)
    first = min(first, features.shape[0])
    second = min(second, first)
    count = probes.shape[0]
    if device is None:
        adjacency = _sparse_features(features, first, second)
        result = np.asarray((adjacency[:count] @ adjacency[count:].T).toarray(), dtype=np.float64)
        return 1.0 - result
    dense = _torch_features(features, first, second, device)
    product = (dense[:count] @ dense[count:].T).double().cpu().numpy()
    return np.asarray(1.0 - product, dtype=np.float64)
