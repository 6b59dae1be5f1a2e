"""Expanded Cross Neighbourhood re-ranking (Sarfraz et al., "A Pose-Sensitive Embedding for Person
Re-Identification with Expanded Cross Neighborhood Re-Ranking", CVPR 2018), original-distance variant.

On a set of items with distances ``d(i, j)``, the *ranking list* of an item is every other item
by ascending distance (the item itself left out, ties to the lower position). The *expanded
neighbourhood* ``E(x)`` of ``x`` is a list of ``M = t + t·q`` items: the first ``t`` of its
ranking list, then, for each of those ``t`` in order, the first ``q`` of *its* ranking list
(an item may appear more than once, ``x`` itself included, and counts as often as it appears).
The ECN distance of two items ``a`` and ``b`` averages the distances from each one's expanded
neighbourhood to the other::

    ECN(a, b) = (Σ_{e in E(a)} d(e, b) + Σ_{e in E(b)} d(e, a)) / (2M)

This module re-orders by ``λ · d(a, b) + (1 − λ) · ECN(a, b)``: ``λ = 0`` (the ``paper`` preset,
with ``t = 3``, ``q = 8``) is the published distance; a ``λ`` above 0 keeps part of the original
order, which the adaptive rule (:func:`ecn_params_from_statistics`) uses where the gallery's
neighbourhoods are not reciprocal enough to be trusted.

* :func:`ecn_pools` — the numeric core: ``B`` sets of ``n`` items (distance matrices) → the
  ECN distance of item 0 to the others;
* :func:`ecn_matrix` — ECN between every pair of one set (for tests and small galleries);
* :func:`ecn_rerank_features` — the full probe×gallery setting from features (cosine), with the
  set of probes then gallery items; cheap, because the cosine distance is linear in each vector;
* :class:`ECNReranker` — one query's pool: the set is the probe followed by its candidates, the
  probe's distances the candidates' scores, the others computed from the store's vectors in the
  store's space (as :mod:`galleria.rerank.base` describes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria._declare import Component
from galleria._params import Param, Space
from galleria.distances import pairwise_distances_batched
from galleria.rerank.base import (
    PoolReranker,
    check_features,
    check_store,
    declared_params,
    resolved_params,
    top_similar,
)
from galleria.statistics import read_statistics
from galleria.store.store import InMemoryImageEmbeddingStore
from galleria.vectors import stable_smallest

__all__ = [
    "COMPONENT",
    "MAX_Q",
    "MAX_T",
    "PAPER_PARAMS",
    "PARAMS",
    "ECNReranker",
    "check_ecn_params",
    "ecn_matrix",
    "ecn_params_from_statistics",
    "ecn_pools",
    "ecn_rerank_features",
]

#: Largest ``t`` (first neighbours) a request may ask for.
MAX_T = 100
#: Largest ``q`` (neighbours of each first neighbour) a request may ask for.
MAX_Q = 100


#: The declared parameters (:mod:`galleria._declare`): ranges, paper values, tuner spaces, help.
PARAMS: tuple[Param, ...] = (
    Param(
        "t", int, 3, 1, MAX_T, paper=3, cost=True, space=Space("int", 1, 5),
        help="first neighbors of each item",
    ),
    Param(
        "q", int, 8, 0, MAX_Q, paper=8, cost=True, space=Space("int", 0, 16),
        help="neighbors of each first neighbor (0: no expansion)",
    ),
    Param(
        "lambda_value", float, 0.0, 0.0, 1.0, paper=0.0, space=Space("float", 0.0, 1.0),
        key="lambda", trial="lambda",
        help="weight of the original distance against the ECN distance",
    ),
)  # fmt: skip
#: The published setting (``--rerank-preset paper``): t = 3, q = 8, the ECN distance alone.
PAPER_PARAMS: dict[str, Any] = {param.name: param.paper for param in PARAMS}
_T, _Q, _LAMBDA = PARAMS


def check_ecn_params(t: Any, q: Any, lambda_value: Any = _LAMBDA.default) -> tuple[int, int, float]:
    """Validate ``t`` (int in [1, MAX_T]), ``q`` (int in [0, MAX_Q]; 0: no expansion) and
    ``lambda_value`` (in [0, 1]) with the declared checks, so every source of values (constructor,
    command line, API, settings file) gives the same message.

    Raises TypeError (not an int / a number; bools rejected) or ValueError (out of range), naming
    the parameter and the value.

    Examples
    --------
    >>> check_ecn_params(3, 8)
    (3, 8, 0.0)
    """
    values = {
        param.name: param.check(value) for param, value in zip(PARAMS, (t, q, lambda_value), strict=True)
    }
    return values["t"], values["q"], values["lambda_value"]


def _effective(t: int, q: int, size: int) -> tuple[int, int]:
    """``t`` and ``q`` capped at the ``size - 1`` other items of a set."""
    return min(t, size - 1), min(q, size - 1)


def _expanded(distances: np.ndarray, t: int, q: int) -> np.ndarray:
    """Expanded neighbourhoods (…, n, t + t·q) of the items of (…, n, n) distances (t, q capped)."""
    size = distances.shape[-1]
    masked = np.array(distances, dtype=np.float64)
    diagonal = np.arange(size)
    masked[..., diagonal, diagonal] = np.inf  # an item is not in its own ranking list
    ranking = stable_smallest(masked, max(t, q, 1))
    first = ranking[..., :t]  # (..., n, t)
    if q == 0:
        return np.ascontiguousarray(first)
    lead = ranking.shape[:-2]
    flat = ranking.reshape(-1, size, ranking.shape[-1])
    heads = first.reshape(flat.shape[0], size, t)
    second = flat[np.arange(flat.shape[0])[:, None, None], heads, :q]  # (B, n, t, q)
    joined = np.concatenate([heads, second.reshape(flat.shape[0], size, t * q)], axis=-1)
    return joined.reshape((*lead, size, t + t * q))


def ecn_pools(distances: np.ndarray, *, t: int, q: int) -> np.ndarray:
    """ECN distance of item 0 to items 1..n−1 of ``B`` sets, from their (B, n, n) distances.

    ``t`` and ``q`` are capped at ``n − 1``. Returns (B, n − 1) float64.

    Examples
    --------
    >>> d = np.array([[[0.0, 0.1, 0.9], [0.1, 0.0, 0.8], [0.9, 0.8, 0.0]]])
    >>> ecn_pools(d, t=1, q=1).round(3).tolist()
    [[0.05, 0.45]]
    """
    values = np.asarray(distances, dtype=np.float64)
    count, size, _ = values.shape
    first, second = _effective(t, q, size)
    expanded = _expanded(values, first, second)  # (B, n, M)
    width = expanded.shape[-1]
    batch = np.arange(count)[:, None]
    # Σ over E(0) of d(e, j) for every j, and Σ over E(j) of d(e, 0).
    from_probe = values[batch, expanded[:, 0, :], :].sum(axis=1)  # (B, n)
    column = values[:, :, 0]
    to_probe = np.take_along_axis(column, expanded.reshape(count, size * width), axis=1)
    to_probe = to_probe.reshape(count, size, width).sum(axis=2)
    result: np.ndarray = (from_probe + to_probe)[:, 1:] / (2.0 * width)
    return result


def ecn_matrix(distances: Any, *, t: int = _T.default, q: int = _Q.default) -> np.ndarray:
    """ECN distance between every pair of one set, from its (n, n) distances (t, q capped at n − 1).

    Memory grows as n²; for the pool and full settings use :class:`ECNReranker` and
    :func:`ecn_rerank_features`.

    Examples
    --------
    >>> d = np.array([[0.0, 0.1, 0.9], [0.1, 0.0, 0.8], [0.9, 0.8, 0.0]])
    >>> ecn_matrix(d, t=1, q=1).round(3)[0].tolist()
    [0.05, 0.05, 0.45]
    """
    values = np.asarray(distances, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] != values.shape[1] or values.shape[0] < 2:
        raise ValueError(f"distances must be a square matrix of at least 2 items, got shape {values.shape}")
    first, second, _ = check_ecn_params(t, q)
    first, second = _effective(first, second, values.shape[0])
    expanded = _expanded(values, first, second)  # (n, M)
    size, width = expanded.shape
    counts = sp.csr_matrix(
        (np.ones(expanded.size), (np.repeat(np.arange(size), width), expanded.ravel())), shape=(size, size)
    )
    sums = np.asarray(counts @ values)  # sums[a, b] = Σ over E(a) of d(e, b)
    result: np.ndarray = (sums + sums.T) / (2.0 * width)
    return result


def ecn_rerank_features(
    probe_features: Any,
    gallery_features: Any,
    *,
    t: int = _T.default,
    q: int = _Q.default,
    lambda_value: float = _LAMBDA.default,
) -> np.ndarray:
    """ECN re-ranking distances of every probe to every gallery item (set: probes then gallery).

    Features are L2-normalised and compared by the cosine distance ``1 − cos``. Because that
    distance is linear in each vector, ``Σ_{e in E(a)} d(e, b) = M − (Σ_{e in E(a)} x_e) · x_b``:
    every item's expanded neighbourhood is summed into one vector once, and the (P, G) result takes
    two matrix products. The ranking lists are found in row blocks (no (P + G)² matrix is kept).

    Parameters
    ----------
    probe_features : array_like, shape (P, d)
    gallery_features : array_like, shape (G, d)
    t, q, lambda_value
        As :class:`ECNReranker` (``t`` and ``q`` capped at ``P + G − 1``).

    Returns
    -------
    numpy.ndarray
        (P, G) float64 distances ``λ · (1 − cos) + (1 − λ) · ECN`` (lower is closer).

    Examples
    --------
    >>> gallery = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> distances = ecn_rerank_features([[1.0, 0.05]], gallery, t=1, q=1)
    >>> np.argsort(distances[0], kind="stable")[:2].tolist()
    [0, 1]
    """
    first, second, lam = check_ecn_params(t, q, lambda_value)
    probes = check_features("probe_features", probe_features)
    gallery = check_features("gallery_features", gallery_features, probes.shape[1])
    features = np.concatenate([probes, gallery], axis=0)
    size = features.shape[0]
    if size < 2:
        raise ValueError("ECN needs at least two items (probes and gallery together)")
    first, second = _effective(first, second, size)
    ranking, _ = top_similar(features, features, max(first, second, 1), exclude_self=True)
    heads = ranking[:, :first]
    members = [heads] if second == 0 else [heads, ranking[heads, :second].reshape(size, first * second)]
    expanded = np.concatenate(members, axis=1)
    width = expanded.shape[1]
    counts = sp.csr_matrix(
        (np.ones(expanded.size), (np.repeat(np.arange(size), width), expanded.ravel())), shape=(size, size)
    )
    sums = np.asarray(counts @ features.astype(np.float64))  # (n, d): each neighbourhood's vector sum
    count = probes.shape[0]
    left, right = features[:count].astype(np.float64), features[count:].astype(np.float64)
    cosine = left @ right.T
    ecn = 1.0 - (sums[:count] @ right.T + left @ sums[count:].T) / (2.0 * width)
    result: np.ndarray = lam * (1.0 - cosine) + (1.0 - lam) * ecn
    return result


def ecn_params_from_statistics(stats: Any) -> dict[str, Any]:
    """ECN's adaptive parameters from a gallery's reciprocal-neighbour statistics.

    ``stats`` is a :class:`~galleria.rerank.adaptive.GalleryStatistics`; ``s`` is its mean share of
    mutual neighbours among a sampled item's first 20, as for the other methods
    (:func:`galleria.rerank.adaptive.params_from_statistics`).

    * ``t = 1``, ``q = 1``: the probe's expanded neighbourhood is its best match and that match's
      own nearest item (often the probe itself), so every candidate is measured from the best match
      too, and the best match gains a zero term ``d(g1, g1)``: the first result is anchored, as
      αQE's two matches and the diffusions' single source anchor it. Larger ``t`` or ``q`` average
      over neighbourhoods that, in a gallery of small classes, reach into other classes: on the
      stamps capped at 12 images per class and on Fashion-MNIST at 12 per class, every ``t ≥ 2``
      or ``q ≥ 2`` lost Recall@1 at the λ below, and the statistics do not tell those galleries from
      the digits, where ``q = 8`` gains (figures in ``docs/reranking.md``).
    * ``λ = clip(1.3 − 1.4·s, 0.3, 0.9)``: the less reciprocal the neighbourhoods, the more of the
      original distance is kept (k-reciprocal's rule of galleria 0.2; with ``t = q = 1`` the first
      result is anchored, so ECN kept Recall@1 on every corpus gallery at this λ, and k-reciprocal's
      higher floor of 0.55 would only halve its lift).
    * No neighbourhood structure (``read_statistics(stats).flat``, as for the other methods), or
      first matches αQE does not trust (:func:`galleria.expansion.trusts_first_matches`: ECN measures
      every candidate from the best match too): ``λ = 1``, the original order.

    Examples
    --------
    >>> from galleria.rerank.adaptive import GalleryStatistics
    >>> ecn_params_from_statistics(GalleryStatistics(1000, 200, (5, 10, 20), (0.6, 0.6, 0.65), (3, 6, 14)))
    {'t': 1, 'q': 1, 'lambda_value': 0.39}
    >>> ecn_params_from_statistics(GalleryStatistics(2, 0, (), (), ()))["lambda_value"]
    1.0
    """
    from galleria.expansion import trusts_first_matches

    reading = read_statistics(stats)
    trusted = trusts_first_matches(stats)  # ECN measures every candidate from the best match too
    lam = round(min(0.9, max(0.3, 1.3 - 1.4 * reading.share)), 2) if trusted else 1.0
    return {"t": 1, "q": 1, "lambda_value": lam}  # λ = 1 where the gallery is flat


class ECNReranker(PoolReranker):
    """Re-rank a store's retrieved candidates with ECN re-ranking (Sarfraz et al., CVPR 2018).

    For one query, the set is the probe followed by its candidates (see the module docstring for
    the ranking lists and expanded neighbourhoods); the probe's distances are the candidates'
    scores, those among candidates are computed from the store's vectors in the store's space.
    Each returned candidate is scored by ``λ · d + (1 − λ) · ECN`` in the store's distance units
    (lower is better; ties keep the candidate order).

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        The store the candidates come from (not one on an ``ExternalSearchIndex``). Vectors are read
        by path at each call, so the re-ranker keeps working after ``add_images`` / ``remove_images``.
    t : int, optional
        First neighbours of each item (the paper: 3; capped at the pool size).
    q : int, optional
        Neighbours of each first neighbour (the paper: 8; 0: no expansion; capped at the pool size).
    lambda_value : float, optional
        Weight ``λ`` of the original distance, in [0, 1] (the paper: 0, ECN alone).

        With none of the three given, all three are read from the gallery
        (:func:`ecn_params_from_statistics` on the store's recorded statistics); with some given,
        the others take the paper's values.

    Raises
    ------
    TypeError
        ``store`` is not an ``InMemoryImageEmbeddingStore``; ``t`` / ``q`` not integers;
        ``lambda_value`` not a number.
    ValueError
        The store searches an ``ExternalSearchIndex``; a parameter out of its range
        (:func:`check_ecn_params`).

    Examples
    --------
    >>> vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c", "d"], vectors)
    >>> candidates = store.retrieve_by_vector([1.0, 0.05], k=4)[0]
    >>> [c.path for c in ECNReranker(store, t=1, q=1).rerank(candidates, top_k=2)]
    ['a', 'b']
    """

    def __init__(
        self,
        store: InMemoryImageEmbeddingStore,
        *,
        t: int | None = None,
        q: int | None = None,
        lambda_value: float | None = None,
    ) -> None:
        self._store = check_store(store, "ECN re-ranking")
        self._adaptive = t is None and q is None and lambda_value is None
        values = declared_params(COMPONENT, "ECNReranker", t=t, q=q, lambda_value=lambda_value)
        self._t, self._q, self._lambda = values["t"], values["q"], values["lambda_value"]
        if self._adaptive and store.is_built:  # else on first use, once the store is built
            self._resolve()

    def _resolve(self) -> None:
        if self._adaptive:
            params = resolved_params(COMPONENT, self._store)
            self._t, self._q, self._lambda = params["t"], params["q"], params["lambda_value"]
            self._adaptive = False

    def __repr__(self) -> str:
        if self._adaptive:
            return f"ECNReranker(adaptive, store={self._store!r})"
        return f"ECNReranker(t={self._t}, q={self._q}, lambda_value={self._lambda}, store={self._store!r})"

    def params(self) -> dict[str, Any]:
        """The re-ranker's parameters, as its constructor takes them (read from the gallery if needed)."""
        if self._adaptive:
            if not self._store.is_built:
                raise RuntimeError("the store is not built yet; the parameters are read from its gallery")
            self._resolve()
        return {"t": self._t, "q": self._q, "lambda_value": self._lambda}

    def _rerank_checked(self, pools: list[Any], top_k: int) -> list[Any]:
        if self._store.is_built:
            self._resolve()
        return super()._rerank_checked(pools, top_k)

    def _scores_from_vectors(self, probe: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        space = self._store.space
        count, size = probe.shape
        distances = np.empty((count, size + 1, size + 1), dtype=np.float64)
        distances[:, 1:, 1:] = pairwise_distances_batched(vectors, vectors, space)
        # the candidates' scores back from the similarities the base class made of them
        original = (1.0 - probe) * (2.0 if space == "l2" else 1.0)
        distances[:, 0, 1:] = original
        distances[:, 1:, 0] = original
        distances[:, 0, 0] = 0.0
        ecn = ecn_pools(distances, t=self._t, q=self._q)
        result: np.ndarray = self._lambda * original + (1.0 - self._lambda) * ecn
        return result


#: The declaration of ECN re-ranking (:mod:`galleria._declare`): the registry finds it here.
COMPONENT = Component(
    kind="reranker",
    name="ecn",
    label="ECN",
    summary="expanded cross neighborhood (Sarfraz et al., CVPR 2018): mean distance of each item's "
    "expanded neighborhood to the other",
    params=PARAMS,
    build=ECNReranker,
    adaptive=ecn_params_from_statistics,
    pool_power=2,  # every pair of the pool is ranked: pool² · t · q bounded by the default MAX_WORK
    order=50,
)
