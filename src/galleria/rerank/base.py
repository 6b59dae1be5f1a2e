"""The contract every re-ranker follows, and the pool machinery the graph re-rankers share.

A re-ranker re-orders the candidates a store retrieved for one query (:meth:`Reranker.rerank`) or
for many at once (:meth:`Reranker.rerank_batch`); each returned
:class:`~galleria.store.Candidate` carries the re-ranker's own score, lower is better.
:class:`~galleria.rerank.KReciprocalReranker` satisfies the protocol as it is.

The pool re-rankers here (diffusion, GNN, αQE on an augmented store) see the probe only through
its candidates' scores. Their similarities are read from the store's distances: ``s = 1 - d`` in
the ``cosine`` and ``ip`` spaces (the cosine, or the inner product) and ``s = 1 - d / 2`` in
``l2`` (the cosine when the vectors have unit norm); the distances among candidates are computed
from the store's vectors in the store's space, as the k-reciprocal re-ranker does.

:func:`make_reranker` builds any of them by name (:data:`RERANK_METHODS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from galleria._validation import check_choice, check_positive_int
from galleria.distances import normalize_rows, pairwise_distances_batched
from galleria.index import ExternalSearchIndex
from galleria.rerank._common import as_float_matrix, stable_smallest
from galleria.rerank.batched import chunk_counts
from galleria.rerank.reranker import _check_candidate_lists, _check_candidates
from galleria.store.candidate import Candidate
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = [
    "DEFAULT_METHOD",
    "METHOD_PARAMS",
    "RERANK_METHODS",
    "PoolReranker",
    "Reranker",
    "check_features",
    "check_method_params",
    "check_store",
    "make_reranker",
    "similarities_from_distances",
    "top_similar",
]

#: The re-ranking methods :func:`make_reranker` knows, the default first.
RERANK_METHODS: tuple[str, ...] = ("k-reciprocal", "diffusion", "gnn", "dba")
#: The method used when none is named.
DEFAULT_METHOD = "k-reciprocal"
#: Elements of one block of similarity rows in the full settings (float32: 16 MB).
_BLOCK_ELEMENTS = 1 << 22


@runtime_checkable
class Reranker(Protocol):
    """Re-orders retrieved candidates; scores of the returned candidates are lower-is-better.

    ``store`` is the store to retrieve the candidates from (for DBA + αQE the augmented store).
    """

    @property
    def store(self) -> InMemoryImageEmbeddingStore:
        """The store the candidates must come from."""
        ...

    def rerank(self, candidates: Sequence[Candidate], top_k: int) -> list[Candidate]:
        """Re-rank one query's candidates and keep the best ``top_k``."""
        ...

    def rerank_batch(
        self, candidate_lists: Sequence[Sequence[Candidate]], top_k: int
    ) -> list[list[Candidate]]:
        """Re-rank many queries' candidate lists; equal to :meth:`rerank` on each."""
        ...


def similarities_from_distances(distances: np.ndarray, space: str) -> np.ndarray:
    """Similarities from a store's distances: ``1 - d`` (cosine, ip) or ``1 - d / 2`` (l2).

    Examples
    --------
    >>> similarities_from_distances(np.array([0.0, 0.5, 2.0]), "l2").tolist()
    [1.0, 0.75, 0.0]
    """
    if space == "l2":
        return 1.0 - np.asarray(distances, dtype=np.float64) / 2.0
    return 1.0 - np.asarray(distances, dtype=np.float64)


def check_store(store: Any, what: str) -> InMemoryImageEmbeddingStore:
    """``store`` if it is an ``InMemoryImageEmbeddingStore`` not on an external index (``what``: who asks)."""
    if not isinstance(store, InMemoryImageEmbeddingStore):
        raise TypeError(f"store must be an InMemoryImageEmbeddingStore, got {type(store).__name__}")
    if isinstance(store.search_index, ExternalSearchIndex):
        raise ValueError(
            f"store must not search an ExternalSearchIndex: its scores are not distances {what} can "
            "combine with the store's own"
        )
    return store


class PoolReranker:
    """Shared shell of the pool re-rankers: validation, grouping pools by size, building similarities.

    A subclass sets ``_store`` and implements :meth:`_pool_scores`, which maps the probe's
    similarities to its candidates ``(B, N)`` and the candidates' similarities among themselves
    ``(B, N, N)`` to scores ``(B, N)``, lower is better; candidates are then sorted stably by score
    (ties keep the candidate order).
    """

    _store: InMemoryImageEmbeddingStore

    @property
    def store(self) -> InMemoryImageEmbeddingStore:
        """The store whose vectors the candidates are re-ranked with."""
        return self._store

    def rerank(self, candidates: Sequence[Candidate], top_k: int) -> list[Candidate]:
        """Re-rank one query's candidates and keep the best ``top_k``.

        Parameters
        ----------
        candidates : sequence of Candidate
            One query's candidates as the store returned them (scores are its distances).
        top_k : int
            How many to return; more than the pool returns the whole pool.

        Returns
        -------
        list of Candidate
            The best ``top_k`` (ascending score, ties in candidate order), scored by this re-ranker.

        Raises
        ------
        TypeError
            ``candidates`` not a sequence of ``Candidate``; a non-numeric score; ``top_k`` not an int.
        ValueError
            No candidates, a non-finite score, a path given twice, ``top_k`` below 1.
        KeyError
            A candidate path the store does not hold.
        RuntimeError
            The store is not built.
        """
        pool = _check_candidates("candidates", candidates, self._store.store_id)
        count = check_positive_int("top_k", top_k)
        return self._rerank_checked([pool], count)[0]

    def rerank_batch(
        self, candidate_lists: Sequence[Sequence[Candidate]], top_k: int
    ) -> list[list[Candidate]]:
        """Re-rank many queries' candidate lists; equal to :meth:`rerank` on each list.

        Raises
        ------
        TypeError, ValueError, KeyError, RuntimeError
            As :meth:`rerank`, naming the offending list (``candidate_lists[i]``).
        """
        pools = _check_candidate_lists(candidate_lists, self._store.store_id)
        count = check_positive_int("top_k", top_k)
        if not pools:
            return []
        return self._rerank_checked(pools, count)

    def _rerank_checked(self, pools: list[list[Candidate]], top_k: int) -> list[list[Candidate]]:
        store = self._store
        if not store.is_built:
            raise RuntimeError("the store is not built yet; call build_store() first")
        results: list[list[Candidate]] = [[] for _ in pools]
        lengths = np.array([len(pool) for pool in pools], dtype=np.int64)
        for length in np.unique(lengths).tolist():
            members = np.flatnonzero(lengths == length).tolist()
            start = 0
            for count in chunk_counts(len(members), int(length) + 1):
                chunk = members[start : start + count]
                start += count
                chunk_pools = [pools[position] for position in chunk]
                paths = [candidate.path for pool in chunk_pools for candidate in pool]
                vectors = store.embeddings_of(paths).reshape(count, length, -1)  # KeyError for unknown
                scores = np.array([[c.score for c in pool] for pool in chunk_pools], dtype=np.float64)
                final = self._scores_from_vectors(similarities_from_distances(scores, store.space), vectors)
                order = np.argsort(final, axis=1, kind="stable")[:, :top_k]
                best = np.take_along_axis(final, order, axis=1)
                for position, pool, picked, values in zip(
                    chunk, chunk_pools, order.tolist(), best.tolist(), strict=True
                ):
                    results[position] = [
                        Candidate._from_store(pool[i].path, float(v), store.store_id)
                        for i, v in zip(picked, values, strict=True)
                    ]
        return results

    def _scores_from_vectors(self, probe: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """Scores from the probe's similarities (B, N) and the candidates' vectors (B, N, d)."""
        among = pairwise_distances_batched(vectors, vectors, self._store.space)
        return self._pool_scores(probe, similarities_from_distances(among, self._store.space))

    def _pool_scores(self, probe: np.ndarray, among: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError


def check_features(name: str, value: Any, dim: int | None = None) -> np.ndarray:
    """``value`` as finite (n, d) features, L2-normalised in float32; ``dim`` must match when given."""
    array = as_float_matrix(name, value)
    if dim is not None and array.shape[1] != dim:
        raise ValueError(f"{name} has dimension {array.shape[1]}, but the probes have {dim}")
    return normalize_rows(np.asarray(array, dtype=np.float32))


def top_similar(
    left: np.ndarray, right: np.ndarray, k: int, *, exclude_self: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` rows of ``right`` most similar to each row of ``left`` (inner products), in row blocks.

    Ties go to the lower row. With ``exclude_self`` (``left`` is ``right``) a row is not its own
    neighbour. Returns ``(positions, similarities)``, both (len(left), k).

    Examples
    --------
    >>> features = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=np.float32)
    >>> top_similar(features, features, 1, exclude_self=True)[0].ravel().tolist()
    [2, 0, 0]
    """
    count = left.shape[0]
    positions = np.empty((count, k), dtype=np.int64)
    values = np.empty((count, k), dtype=np.float32)
    step = max(1, _BLOCK_ELEMENTS // max(1, right.shape[0]))
    for start in range(0, count, step):
        block = left[start : start + step] @ right.T
        if exclude_self:
            rows = np.arange(block.shape[0])
            block[rows, start + rows] = -np.inf
        top = stable_smallest(-block, k)
        positions[start : start + step] = top
        values[start : start + step] = np.take_along_axis(block, top, axis=1)
    return positions, values


def make_reranker(method: str, store: InMemoryImageEmbeddingStore, **params: Any) -> Reranker:
    """Build the re-ranker named ``method`` (one of :data:`RERANK_METHODS`) on ``store``.

    ``params`` are the re-ranker's keyword arguments (``k1``, ``k2``, ``lambda_value`` for
    k-reciprocal; ``k``, ``query_k``, ``alpha``, ``gamma`` for diffusion; ``k1``, ``k2`` for gnn;
    ``neighbors``, ``alpha``, ``aqe_neighbors``, ``aqe_alpha`` for dba).

    Raises
    ------
    TypeError, ValueError
        An unknown method, and whatever the re-ranker's constructor raises for its parameters.

    Examples
    --------
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c"], np.eye(3))
    >>> type(make_reranker("diffusion", store, k=2)).__name__
    'DiffusionReranker'
    """
    check_choice("method", method, RERANK_METHODS)
    if method == "k-reciprocal":
        from galleria.rerank.reranker import KReciprocalReranker

        return KReciprocalReranker(store, **params)
    if method == "diffusion":
        from galleria.rerank.diffusion import DiffusionReranker

        return DiffusionReranker(store, **params)
    if method == "gnn":
        from galleria.rerank.gnn import GnnReranker

        return GnnReranker(store, **params)
    from galleria.rerank.dba import DBAReranker

    return DBAReranker(store, **params)


#: The keyword parameters each method takes (besides the store).
METHOD_PARAMS: dict[str, tuple[str, ...]] = {
    "k-reciprocal": ("k1", "k2", "lambda_value"),
    "diffusion": ("k", "query_k", "alpha", "gamma", "tol", "maxiter"),
    "gnn": ("k1", "k2"),
    "dba": ("neighbors", "alpha", "aqe_neighbors", "aqe_alpha"),
}


def check_method_params(method: Any, params: Any) -> dict[str, Any]:
    """Validate a method name and its parameters without a store; return all of them, defaults filled in.

    Raises TypeError / ValueError naming the method, an unknown parameter, or a bad value.

    Examples
    --------
    >>> check_method_params("gnn", {"k1": 10})
    {'k1': 10, 'k2': 7}
    """
    name = check_choice("method", method, RERANK_METHODS)
    if not isinstance(params, dict):
        raise TypeError(f"the {name} parameters must be a dict, got {type(params).__name__}")
    unknown = sorted(set(params) - set(METHOD_PARAMS[name]))
    if unknown:
        raise ValueError(f"unknown {name} parameter(s) {unknown}; it takes {list(METHOD_PARAMS[name])}")
    if name == "k-reciprocal":
        from galleria.rerank._common import check_hyperparameters

        k1, k2, lam = check_hyperparameters(
            params.get("k1", 20), params.get("k2", 6), params.get("lambda_value", 0.3)
        )
        checked: dict[str, Any] = {"k1": k1, "k2": k2, "lambda_value": lam}
    elif name == "diffusion":
        from galleria.rerank.diffusion import check_diffusion_params

        values = check_diffusion_params(
            params.get("k", 50),
            params.get("query_k", 10),
            params.get("alpha", 0.99),
            params.get("gamma", 3.0),
            params.get("tol", 1e-6),
            params.get("maxiter", 20),
        )
        checked = dict(zip(METHOD_PARAMS[name], values, strict=True))
    elif name == "gnn":
        from galleria.rerank.gnn import check_gnn_params

        checked = dict(
            zip(("k1", "k2"), check_gnn_params(params.get("k1", 26), params.get("k2", 7)), strict=True)
        )
    else:
        from galleria.expansion import check_expansion_alpha

        checked = {
            "neighbors": check_positive_int("neighbors", params.get("neighbors", 10)),
            "alpha": check_expansion_alpha("alpha", params.get("alpha", 3.0)),
            "aqe_neighbors": check_positive_int("aqe_neighbors", params.get("aqe_neighbors", 10)),
            "aqe_alpha": check_expansion_alpha("aqe_alpha", params.get("aqe_alpha", 3.0)),
        }
    return checked
