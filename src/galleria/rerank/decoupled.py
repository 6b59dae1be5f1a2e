"""Decoupled diffusion (Yang et al., "Efficient Image Retrieval via Decoupling Diffusion into Online
and Offline Processing", AAAI 2019).

Diffusion ranks the gallery by ``f = (I - α S)^{-1} y`` (:mod:`galleria.rerank.diffusion` defines
``S``, the symmetrically normalised mutual k-NN affinity ``a_ij = max(s_ij, 0) ** γ``, and the query
vector ``y``). ``y`` is non-zero only on the query's ``query_k`` nearest gallery items, so ``f`` is a
linear combination of ``query_k`` columns of ``L = (I - α S)^{-1}``, and those can be computed once,
before any query:

* **offline** (:func:`offline_diffusion`) — for every gallery item ``i``, with ``T(i)`` its
  ``truncation`` nearest gallery items (itself first, then by cosine, ties to the lower row), the
  system ``(I - α S)[T(i), T(i)] x = e_i`` is solved by conjugate gradient (from 0, stopped at a
  relative residual ``tol`` or after ``maxiter`` iterations) and ``x`` is kept as item ``i``'s row.
  The truncation is *late*: ``S`` is the normalised affinity of the whole gallery's graph (the
  degrees are the full graph's), and only the system is cut down to ``T(i)``. With ``truncation``
  at least the gallery size the row is exactly row ``i`` of ``(I - α S)^{-1}``.
* **online** — a query with weights ``y_j = max(s(q, j), 0) ** γ`` on its ``query_k`` nearest gallery
  items ``j`` scores item ``g`` by ``f(g) = Σ_j y_j F[j, g]``, ``F[j, ·]`` being item ``j``'s offline
  row (zero outside ``T(j)``): ``query_k · truncation`` work, whatever the gallery's size.

Defaults follow the paper and its authors' code: ``k = 50`` graph neighbours, ``truncation = 1000``,
``query_k = 10``, ``α = 0.99``, ``γ = 3``, ``tol = 1e-6``, at most 20 iterations. The graph is built on
the L2-normalised vectors (cosine similarities) in every space.

* :class:`DecoupledDiffusionReranker` — re-ranks the candidates a store retrieved; the offline part
  is computed on first use (or ahead, with :func:`prepare_offline_diffusion`) and kept in the store,
  whose saved file keeps it (``offline_diffusion`` in :mod:`galleria.store.persistence`).
* :func:`decoupled_diffusion_rerank_features` — the full probe×gallery setting.

The functions on features live in :mod:`galleria.rerank._decoupled_features` and the numeric core in
:mod:`galleria.rerank._decoupled_core`; this module keeps the store's side and the declaration.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from galleria._declare import Component
from galleria._params import Space
from galleria._validation import check_positive_int
from galleria.rerank import _decoupled_record as _decoupled_record  # registers the store record's codec
from galleria.rerank._candidate_checks import check_candidate_lists, check_candidates
from galleria.rerank._consistent import Prepared, read_candidates
from galleria.rerank._decoupled_core import (  # moved there (galleria 0.3); kept importable from here
    LARGEST,
    TRUNCATION,
    _graph_lists,  # noqa: F401
    _neighbour_lists,  # noqa: F401
    _normalised_affinity,  # noqa: F401
    _offline_matrix,  # noqa: F401
    _pool_diffusion,
    _query_weights,
    _truncated_rows,  # noqa: F401
    check_decoupled_params,
)
from galleria.rerank._decoupled_core import offline_rows as _offline
from galleria.rerank._decoupled_features import decoupled_diffusion_rerank_features, offline_diffusion
from galleria.rerank._diffusion_core import WALK_PARAMS
from galleria.rerank.base import check_features, check_store, declared_params, similarities_from_distances
from galleria.rerank.witness import _witnessed
from galleria.store import GallerySnapshot, OfflineDiffusion, gallery_state, take_snapshot
from galleria.store.candidate import Candidate
from galleria.store.store import InMemoryImageEmbeddingStore
from galleria.vectors import stable_smallest

__all__ = [
    "DecoupledDiffusionReranker",
    "check_decoupled_params",
    "decoupled_diffusion_rerank_features",
    "offline_diffusion",
    "prepare_offline_diffusion",
]

#: The parameters of the offline part, in the order :func:`check_decoupled_params` returns them.
OFFLINE_PARAMS = ("k", "truncation", "alpha", "gamma", "tol", "maxiter")


def prepare_offline_diffusion(
    store: InMemoryImageEmbeddingStore,
    *,
    k: int = WALK_PARAMS["k"].default,
    truncation: int = TRUNCATION.default,
    alpha: float = WALK_PARAMS["alpha"].default,
    gamma: float = WALK_PARAMS["gamma"].default,
    tol: float = WALK_PARAMS["tol"].default,
    maxiter: int = WALK_PARAMS["maxiter"].default,
) -> OfflineDiffusion:
    """Compute the offline part over ``store``'s rows (unless it holds it already) and keep it there.

    The store keeps one offline diffusion: computing it with other parameters replaces the one it
    held; ``add_images`` / ``remove_images`` drop it (it no longer matches the rows); its saved
    file keeps it. Returns what the store now holds.

    Raises
    ------
    TypeError, ValueError
        Not a store, a store on an ``ExternalSearchIndex``, a parameter out of range.
    RuntimeError
        The store is not built.
    """
    check_store(store, "decoupled diffusion")
    neighbours, size, _, weight, power, tolerance, iterations = check_decoupled_params(
        k, truncation, 1, alpha, gamma, tol, maxiter
    )
    params = dict(zip(OFFLINE_PARAMS, (neighbours, size, weight, power, tolerance, iterations), strict=True))
    return _offline_of(store, params).value


def _offline_of(
    store: InMemoryImageEmbeddingStore, params: dict[str, Any], snapshot: GallerySnapshot | None = None
) -> Prepared[OfflineDiffusion]:
    """The store's offline diffusion with ``params`` and the gallery state it belongs to: the one the
    store holds when it matches (``snapshot``: for exactly that state), else computed and kept."""
    if not store.is_built:
        raise RuntimeError("the store is not built yet; call build_store() first")
    with store._lock.reading():  # the held table and the state it was kept for, together
        held, state = store._offline_diffusion, gallery_state(store)
    wanted = state if snapshot is None else snapshot.state
    if held is not None and held.params == params and state == wanted:
        if held.source is not None:  # read from a file: checked against the vectors on first use
            held = _witnessed(store, held, state, snapshot)
        return Prepared(state, held)
    source = take_snapshot(store) if snapshot is None else snapshot
    if not len(source.paths):
        raise ValueError("decoupled diffusion needs a store with at least one image")
    positions, values = _offline(
        check_features("store vectors", source.vectors),
        params["k"],
        params["truncation"],
        params["alpha"],
        params["gamma"],
        params["tol"],
        params["maxiter"],
        store,
        source.state,
    )
    computed = OfflineDiffusion(dict(params), positions, values)
    with store._lock.writing():
        if gallery_state(store) == source.state:  # the gallery did not change meanwhile
            store._offline_diffusion = computed
    return Prepared(source.state, computed)


class DecoupledDiffusionReranker:
    """Re-rank a store's retrieved candidates by decoupled diffusion (Yang et al., AAAI 2019).

    A query is represented by its ``query_k`` best candidates (by the store's scores, turned into
    similarities as in :mod:`galleria.rerank.base`); each candidate ``g`` is scored by ``-f(g)``
    (lower is better), ``f`` the combination of those candidates' offline rows (module docstring).
    Candidates outside every one of those rows score 0 and keep their order after the others.

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        The store the candidates come from (not one on an ``ExternalSearchIndex``). Its offline
        diffusion is computed on the first call that needs it (a store loaded from a file that keeps
        one with the same parameters reuses it) and kept in the store.
    k : int, default 50
        Neighbours per node of the gallery's mutual k-NN graph.
    truncation : int, default 1000
        Gallery items in each offline row.
    query_k : int, default 10
        Candidates that represent the query.
    alpha : float, default 0.99
    gamma : float, default 3.0
    tol : float, default 1e-6
    maxiter : int, default 20
        As :func:`offline_diffusion`.

    Raises
    ------
    TypeError, ValueError
        Not a store, a store on an ``ExternalSearchIndex``, a parameter out of range.

    Examples
    --------
    >>> vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c", "d"], vectors)
    >>> candidates = store.retrieve_by_vector([1.0, 0.05], k=4)[0]
    >>> reranker = DecoupledDiffusionReranker(store, k=1, query_k=1)
    >>> [c.path for c in reranker.rerank(candidates, top_k=2)]
    ['a', 'b']
    """

    def __init__(
        self,
        store: InMemoryImageEmbeddingStore,
        *,
        k: int | None = None,
        truncation: int | None = None,
        query_k: int | None = None,
        alpha: float | None = None,
        gamma: float | None = None,
        tol: float | None = None,
        maxiter: int | None = None,
    ) -> None:
        self._store = check_store(store, "decoupled diffusion")
        given = {"k": k, "truncation": truncation, "query_k": query_k, "alpha": alpha, "gamma": gamma}
        declared = declared_params(COMPONENT, "DecoupledDiffusionReranker", **given, tol=tol, maxiter=maxiter)
        values = check_decoupled_params(*(declared[name] for name in COMPONENT.names))
        self._query_k = values[2]
        self._offline_params = dict(zip(OFFLINE_PARAMS, values[:2] + values[3:], strict=True))

    def __repr__(self) -> str:
        settings = ", ".join(f"{name}={value}" for name, value in self.params().items())
        return f"DecoupledDiffusionReranker({settings}, store={self._store!r})"

    @property
    def store(self) -> InMemoryImageEmbeddingStore:
        """The store whose offline diffusion the candidates are re-ranked with."""
        return self._store

    def params(self) -> dict[str, Any]:
        """The re-ranker's parameters, as its constructor takes them."""
        held = self._offline_params
        return {
            "k": held["k"],
            "truncation": held["truncation"],
            "query_k": self._query_k,
            "alpha": held["alpha"],
            "gamma": held["gamma"],
            "tol": held["tol"],
            "maxiter": held["maxiter"],
        }

    def rerank(self, candidates: Sequence[Candidate], top_k: int) -> list[Candidate]:
        """Re-rank one query's candidates and keep the best ``top_k`` (ascending ``-f``, ties in order).

        Raises
        ------
        TypeError, ValueError, KeyError, RuntimeError
            As :meth:`galleria.rerank.KReciprocalReranker.rerank`.
        """
        pool = check_candidates("candidates", candidates, self._store.store_id)
        count = check_positive_int("top_k", top_k)
        return self._rerank_checked([pool], count)[0]

    def rerank_batch(
        self, candidate_lists: Sequence[Sequence[Candidate]], top_k: int
    ) -> list[list[Candidate]]:
        """Re-rank many queries' candidate lists; equal to :meth:`rerank` on each list."""
        pools = check_candidate_lists(candidate_lists, self._store.store_id)
        count = check_positive_int("top_k", top_k)
        if not pools:
            return []
        return self._rerank_checked(pools, count)

    def _prepare_offline(
        self, store: InMemoryImageEmbeddingStore, snapshot: GallerySnapshot | None
    ) -> Prepared[OfflineDiffusion]:
        return _offline_of(store, self._offline_params, snapshot)

    def _rerank_checked(self, pools: list[list[Candidate]], top_k: int) -> list[list[Candidate]]:
        store = self._store
        if not store.is_built:
            raise RuntimeError("the store is not built yet; call build_store() first")
        flat = [candidate for pool in pools for candidate in pool]
        read = read_candidates(store, flat, self._prepare_offline)  # KeyError for unknown paths
        offline: OfflineDiffusion = read.prepared
        bounds = np.cumsum([0] + [len(pool) for pool in pools])
        rows = [read.rows[begin:end] for begin, end in itertools.pairwise(bounds.tolist())]
        gamma = float(self._offline_params["gamma"])
        results = []
        for pool, pool_rows in zip(pools, rows, strict=True):
            scores = np.array([c.score for c in pool], dtype=np.float64)
            similar = similarities_from_distances(scores, store.space)
            chosen = stable_smallest(-similar[None, :], min(self._query_k, len(pool)))[0]
            final = -_pool_diffusion(
                offline, pool_rows, pool_rows[chosen], _query_weights(similar[chosen], gamma)
            )
            order = np.argsort(final, kind="stable")[:top_k]
            results.append(
                [
                    Candidate._from_store(pool[i].path, float(final[i]), store.store_id, pool[i]._where)
                    for i in order.tolist()
                ]
            )
        return results


def _adaptive(stats: Any) -> dict[str, Any]:
    """As diffusion's rule (query_k 1, k = clip(2m, 10, 30), α 0.9 or 0), truncation as the paper."""
    from galleria.rerank.diffusion import COMPONENT as DIFFUSION

    assert DIFFUSION.adaptive is not None
    walk = DIFFUSION.adaptive(stats)
    truncation = TRUNCATION.paper  # as the paper
    return {
        "k": walk["k"],
        "truncation": truncation,
        "query_k": 1,
        "alpha": walk["alpha"],
        "gamma": walk["gamma"],
    }


_LARGEST = LARGEST
#: The declaration of decoupled diffusion (:mod:`galleria._declare`): the registry finds it here.
#: ``k`` and ``alpha`` are searched over a few values each: each pair is one offline part, which
#: the tuner's trials come back to; ``query_k`` is online and free.
COMPONENT = Component(
    kind="reranker",
    name="decoupled-diffusion",
    summary="decoupled diffusion (Yang et al., AAAI 2019): an offline walk per item, a cheap online step",
    params=(
        # k and maxiter shape the offline part (once per gallery), not a request: no cost
        replace(
            WALK_PARAMS["k"], high=_LARGEST, cost=False, space=Space("categorical", choices=(10, 20, 30, 50))
        ),
        TRUNCATION,
        WALK_PARAMS["query_k"],
        replace(WALK_PARAMS["alpha"], space=Space("categorical", choices=(0.0, 0.9, 0.99))),
        replace(WALK_PARAMS["gamma"], space=None),
        WALK_PARAMS["tol"],
        replace(WALK_PARAMS["maxiter"], high=_LARGEST, cost=False),
    ),
    build=DecoupledDiffusionReranker,
    adaptive=_adaptive,
    prepared=True,
    pools=(100, 200, 400, 1000),
    order=40,
    extra={"offline": OFFLINE_PARAMS, "precompute": prepare_offline_diffusion},
)
