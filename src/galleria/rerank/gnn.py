"""GNN re-ranking (Zhang et al., "Understanding Image Retrieval Re-Ranking: A Graph Neural Network
Perspective", 2020): neighbour sets propagated twice over a k-NN graph, compared by cosine, blended
with the original similarity.

On a set of items with similarities ``s(i, j)``, let ``R_i`` be the ranking list of item ``i``
(similarities in descending order, ties to the lower position; the item itself normally first).

1. Adjacency: ``A_ij = 1`` if ``j`` is among the first ``k1`` entries of ``R_i``, else 0.
2. Edge weights: ``W_ij = s(i, j) ** 2`` for the first ``k2`` entries ``j`` of ``R_i``, else 0.
3. Unless ``k2 = 1``, two propagation rounds: ``A ← A + Aᵀ``; ``A ← W A`` (each row becomes the
   weighted sum of the rows of its ``k2`` nearest items); every row divided by its L2 norm (a zero
   row stays zero).
4. The new similarity of a query ``q`` and an item ``j`` is
   ``(1 - λ) · A_q · A_j + λ · s(q, j)``; the re-ranker's distance is one minus it.

``λ`` (``lambda_value``) is the blend the authors' current code applies (``lamb = 0.3`` in the
GPU re-ranking code of their repository, added after the 2020 paper): the propagated similarity
alone is zero for every item outside the query's two-hop neighbourhood, so those items would keep no
order at all; ``λ = 0`` gives the 2020 form. Defaults ``k1 = 26``, ``k2 = 7`` are the published
setting for Market-1501.

* :class:`GnnReranker` — one query's pool: the set is the probe followed by its candidates
  (float32, top-k selections, the propagation a sum over each row's ``k2`` neighbours).
* :func:`gnn_rerank_features` — the full probe×gallery setting on the set of probes then gallery
  items: sparse matrices (scipy) on the CPU, or, on another torch ``device`` (e.g. ``"cuda"``), the
  authors' GPU algorithm — ``topk``, a dense adjacency, an ``n²·k2`` sparse-times-dense propagation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria._declare import Component, Param, Space
from galleria._validation import check_fraction, check_positive_int
from galleria.distances import pairwise_distances_batched
from galleria.rerank.base import PoolReranker, check_features, check_store, top_similar
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = [
    "DEFAULT_LAMBDA",
    "ROUNDS",
    "GnnReranker",
    "check_gnn_params",
    "gnn_pools",
    "gnn_rerank_features",
]

#: Propagation rounds of the published method.
ROUNDS = 2
#: Weight of the original similarity in the final one (the authors' current code: ``lamb=0.3``).
DEFAULT_LAMBDA = 0.3


def check_gnn_params(k1: Any, k2: Any, lambda_value: Any = DEFAULT_LAMBDA) -> tuple[int, int, float]:
    """Validate ``k1``, ``k2`` (positive ints, ``k2 <= k1``) and ``lambda_value`` (in [0, 1])."""
    first = check_positive_int("k1", k1)
    second = check_positive_int("k2", k2)
    if second > first:
        raise ValueError(f"k2 must not exceed k1, got k2={k2!r} > k1={k1!r}")
    return first, second, check_fraction("lambda_value", lambda_value)


def _normalise_rows_dense(matrix: np.ndarray) -> np.ndarray:
    norms = np.sqrt(np.einsum("...ij,...ij->...i", matrix, matrix))[..., None]
    result: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return result


def _top_members(values: np.ndarray, k: int) -> np.ndarray:
    """Mask of every row's ``k`` largest entries, ties to the lower position (a top-k, no row sort)."""
    size = values.shape[-1]
    if k >= size:
        return np.ones(values.shape, dtype=bool)
    kth = -np.partition(-values, k - 1, axis=-1)[..., k - 1 : k]
    mask: np.ndarray = values >= kth
    flat = mask.reshape(-1, size)
    over = np.flatnonzero(np.count_nonzero(flat, axis=1) > k)  # a tie at the k-th value: rare
    if over.size:
        rows = values.reshape(-1, size)[over]
        edge = kth.reshape(-1, 1)[over]
        above = rows > edge
        tied = rows == edge
        room = k - np.count_nonzero(above, axis=1, keepdims=True)
        flat[over] = above | (tied & (np.cumsum(tied, axis=1) <= room))
    return mask


def gnn_pools(similarities: np.ndarray, *, k1: int, k2: int) -> np.ndarray:
    """The propagated neighbour features ``A`` of ``B`` sets of ``n`` items, from (B, n, n) similarities.

    ``k1`` is capped at ``n`` and ``k2`` at the capped ``k1``. Works in float32 with top-k
    selections (a partition per row, not a sort); each propagation is one sparse-times-dense
    product with ``k2`` non-zeros per row (``n²·k2`` work per set). Returns (B, n, n) float32.
    """
    count, size, _ = similarities.shape
    first = min(k1, size)
    second = min(k2, first)
    sims = np.asarray(similarities, dtype=np.float32)
    members = _top_members(sims, first)
    adjacency = members.astype(np.float32)
    if second == 1:
        return adjacency
    # W's non-zeros: the k2 nearest among each row's k1 (stable on -s over ascending positions).
    chosen = np.nonzero(members)[2].reshape(count, size, first)
    values = np.take_along_axis(sims, chosen, axis=2)
    order = np.argsort(-values, axis=2, kind="stable")[:, :, :second]
    near = np.take_along_axis(chosen, order, axis=2)
    weights = np.take_along_axis(values, order, axis=2) ** 2  # (B, n, k2)
    # Block-diagonal W over all sets: row (b, i) has its k2 non-zeros at columns (b, near_bij).
    columns = (near + (np.arange(count) * size)[:, None, None]).ravel()
    total = count * size
    propagation = sp.csr_matrix(
        (weights.ravel(), columns, np.arange(0, total * second + 1, second)), shape=(total, total)
    )
    for _ in range(ROUNDS):
        adjacency = adjacency + adjacency.transpose(0, 2, 1)
        adjacency = _normalise_rows_dense(
            np.asarray(propagation @ adjacency.reshape(total, size)).reshape(count, size, size)
        )
    return adjacency


class GnnReranker(PoolReranker):
    """Re-rank a store's retrieved candidates with GNN re-ranking (Zhang et al. 2020).

    For one query, the set is the probe (similarity 1 to itself) followed by its candidates; the
    probe's similarities come from the candidates' scores, those among candidates from the store's
    vectors (see :mod:`galleria.rerank.base`). Each returned candidate is scored by
    ``1 - ((1 - λ) · A_probe · A_candidate + λ · s(probe, candidate))`` (lower is better).

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        The store the candidates come from (not one on an ``ExternalSearchIndex``).
    k1 : int, default 26
        Neighbours in the initial adjacency (capped at the set size).
    k2 : int, default 7
        Neighbours each propagation sums over (``k2 <= k1``; 1 skips the propagation).
    lambda_value : float, default 0.3
        Weight ``λ`` of the original similarity in the final one, in [0, 1]: 0.3 as the authors'
        current code, 0 for the 2020 paper's propagated similarity alone.

    Raises
    ------
    TypeError
        ``store`` is not an ``InMemoryImageEmbeddingStore``; ``k1`` / ``k2`` not integers;
        ``lambda_value`` not a number.
    ValueError
        The store searches an ``ExternalSearchIndex``; ``k1`` / ``k2`` below 1; ``k2 > k1``;
        ``lambda_value`` outside [0, 1].

    Examples
    --------
    >>> vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c", "d"], vectors)
    >>> candidates = store.retrieve_by_vector([1.0, 0.05], k=4)[0]
    >>> [c.path for c in GnnReranker(store, k1=2, k2=2).rerank(candidates, top_k=2)]
    ['a', 'b']
    """

    def __init__(
        self,
        store: InMemoryImageEmbeddingStore,
        *,
        k1: int = 26,
        k2: int = 7,
        lambda_value: float = DEFAULT_LAMBDA,
    ) -> None:
        self._store = check_store(store, "GNN re-ranking")
        self._k1, self._k2, self._lambda = check_gnn_params(k1, k2, lambda_value)

    def __repr__(self) -> str:
        return (
            f"GnnReranker(k1={self._k1}, k2={self._k2}, lambda_value={self._lambda}, store={self._store!r})"
        )

    def params(self) -> dict[str, Any]:
        """The re-ranker's parameters, as its constructor takes them."""
        return {"k1": self._k1, "k2": self._k2, "lambda_value": self._lambda}

    def _scores_from_vectors(self, probe: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """As the base class, with the similarities among candidates kept in float32."""
        space = self._store.space
        among = pairwise_distances_batched(vectors, vectors, space)
        sims = 1.0 - (among * np.float32(0.5) if space == "l2" else among)
        return self._pool_scores(probe, sims)

    def _pool_scores(self, probe: np.ndarray, among: np.ndarray) -> np.ndarray:
        count, size = probe.shape
        sims = np.empty((count, size + 1, size + 1), dtype=np.float32)
        sims[:, 1:, 1:] = among
        sims[:, 0, 1:] = probe
        sims[:, 1:, 0] = probe
        sims[:, 0, 0] = 1.0
        features = gnn_pools(sims, k1=self._k1, k2=self._k2)
        propagated = np.einsum("bj,bij->bi", features[:, 0], features[:, 1:]).astype(np.float64)
        result: np.ndarray = 1.0 - ((1.0 - self._lambda) * propagated + self._lambda * probe)
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


def _torch_device(device: Any) -> Any:
    try:
        import torch
    except ImportError as error:
        raise ImportError(
            "gnn_rerank_features(device=...) needs torch; install it with: pip install -e '.[timm]'"
        ) from error
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device {device!r} is not a valid torch device: {error}") from error


def _torch_features(x: Any, k1: int, k2: int) -> Any:
    """The authors' GPU algorithm on the (n, d) torch tensor ``x``: dense (n, n) ``A``, float32.

    ``topk`` instead of a sort; each propagation is ``W A`` with ``W`` a sparse (COO) matrix of
    ``k2`` entries per row, ``n²·k2`` work as the authors' propagation kernel. Ties within a row are
    broken as ``torch.topk`` breaks them.
    """
    import torch

    size = x.shape[0]
    values, ranks = torch.topk(x @ x.T, k1, dim=1, largest=True, sorted=True)
    adjacency = torch.zeros((size, size), dtype=x.dtype, device=x.device)
    adjacency.scatter_(1, ranks, 1.0)
    if k2 == 1:
        return adjacency
    columns, slots = torch.sort(ranks[:, :k2], dim=1)  # coalesced: (row, column) in ascending order
    rows = torch.arange(size, device=x.device).repeat_interleave(k2)
    weights = torch.sparse_coo_tensor(
        torch.stack([rows, columns.reshape(-1)]),
        (torch.gather(values[:, :k2], 1, slots) ** 2).reshape(-1),
        (size, size),
        is_coalesced=True,
        check_invariants=False,
    )
    for _ in range(ROUNDS):
        adjacency = adjacency + adjacency.T
        adjacency = torch.sparse.mm(weights, adjacency)
        norms = torch.linalg.vector_norm(adjacency, dim=1, keepdim=True)
        adjacency.div_(torch.where(norms > 0, norms, torch.ones_like(norms)))
    return adjacency


def gnn_rerank_features(
    probe_features: Any,
    gallery_features: Any,
    *,
    k1: int = 26,
    k2: int = 7,
    lambda_value: float = DEFAULT_LAMBDA,
    device: Any = None,
) -> np.ndarray:
    """GNN re-ranking distances of every probe to every gallery item (set: probes then gallery).

    Features are L2-normalised and compared by cosine; the distance is
    ``1 - ((1 - λ) · A_p · A_g + λ · cos(p, g))``. Without ``device``, or with a CPU device, the
    adjacency and its propagation are scipy.sparse matrices (a few hundred non-zeros per row after
    two rounds; on the CPU that is faster and smaller than the dense form). With another torch
    ``device`` (e.g. ``"cuda"``) they are dense float32 tensors of size (P + G)², as in the authors'
    GPU code: ``topk`` for the ranking lists and an ``n²·k2`` sparse-times-dense propagation. The
    two agree to float32 rounding (and up to how ``topk`` breaks exact ties).

    Parameters
    ----------
    probe_features : array_like, shape (P, d)
    gallery_features : array_like, shape (G, d)
    k1, k2, lambda_value
        As :class:`GnnReranker` (``k1`` capped at ``P + G``, ``k2`` at the capped ``k1``).
    device : str or torch.device, optional
        A torch device to run on instead of scipy.sparse (a CPU device runs on scipy.sparse).

    Returns
    -------
    numpy.ndarray
        (P, G) float64 distances (lower is closer).

    Raises
    ------
    TypeError, ValueError
        Bad features (as :func:`~galleria.rerank.k_reciprocal_rerank_features`), bad ``k1`` / ``k2`` /
        ``lambda_value``, an invalid device.
    ImportError
        ``device`` given without torch installed.

    Examples
    --------
    >>> gallery = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> distances = gnn_rerank_features([[1.0, 0.05]], gallery, k1=3, k2=2)
    >>> np.argsort(distances[0], kind="stable")[:2].tolist()
    [0, 1]
    """
    first, second, lam = check_gnn_params(k1, k2, lambda_value)
    probes = check_features("probe_features", probe_features)
    gallery = check_features("gallery_features", gallery_features, probes.shape[1])
    where = None if device is None else _torch_device(device)
    features = np.concatenate([probes, gallery], axis=0)
    first = min(first, features.shape[0])
    second = min(second, first)
    count = probes.shape[0]
    if where is None or where.type == "cpu":
        adjacency = _sparse_features(features, first, second)
        result = np.asarray((adjacency[:count] @ adjacency[count:].T).toarray(), dtype=np.float64)
    else:
        import torch

        dense = _torch_features(torch.from_numpy(features).to(where), first, second)
        result = (dense[:count] @ dense[count:].T).double().cpu().numpy()
        del dense
    # 1 - ((1 - λ) · propagated + λ · cos), in place on the (P, G) float64 array.
    result *= -(1.0 - lam)
    result += 1.0
    if lam > 0:
        step = max(1, (1 << 22) // max(1, gallery.shape[0]))
        for begin in range(0, count, step):
            result[begin : begin + step] -= lam * (probes[begin : begin + step] @ gallery.T)
    return result


def _adaptive(stats: Any) -> dict[str, Any]:
    """k1 = clip(2m, 4, 26); k2 and λ as k-reciprocal's at a majority of mutual neighbors, else 2 and 0.9."""
    from galleria.rerank.adaptive import GNN_MINORITY_LAMBDA, clip_round, read_statistics

    reading = read_statistics(stats)
    k1 = reading.capped(2 * reading.mutual, 4, 26)
    return {
        "k1": k1,
        "k2": min(k1, clip_round(reading.reach, 1, 7)) if reading.majority else 2,
        "lambda_value": reading.lam if reading.majority or reading.flat else GNN_MINORITY_LAMBDA,
    }


#: The declaration of GNN re-ranking (:mod:`galleria._declare`): the registry finds it here.
COMPONENT = Component(
    kind="reranker",
    name="gnn",
    label="GNN",
    summary="GNN re-ranking (Zhang et al. 2020): neighbor similarities aggregated over a kNN graph",
    params=(
        Param(
            "k1",
            int,
            26,
            1,
            10_000,
            paper=26,
            cost=True,
            space=Space("int", 3, 60),
            help="neighbors of each item in the graph",
        ),
        Param(
            "k2",
            int,
            7,
            1,
            10_000,
            paper=7,
            at_most="k1",
            space=Space("int", 1, 10),
            help="neighbors aggregated (at most k1)",
        ),
        Param(
            "lambda_value",
            float,
            DEFAULT_LAMBDA,
            0.0,
            1.0,
            paper=0.3,
            space=Space("float", 0.0, 1.0),
            help="weight of the original similarity",
        ),
    ),
    build=GnnReranker,
    adaptive=_adaptive,
    pool_power=2,  # every pair of the pool is compared
    order=20,
)
