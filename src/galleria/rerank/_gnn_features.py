"""GNN re-ranking of whole feature sets: sparse numpy rounds, or torch on a device when asked."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria.rerank._gnn_core import DEFAULT_LAMBDA, K1, K2, ROUNDS, check_gnn_params
from galleria.rerank.base import check_features, top_similar


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
    k1: int = K1.default,
    k2: int = K2.default,
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
