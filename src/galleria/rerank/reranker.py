"""The store-bound k-reciprocal re-ranker: re-orders the candidates a store retrieved for a query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from galleria._declare import Component
from galleria._params import Param, Space
from galleria._validation import check_positive_int
from galleria.distances import pairwise_distances, pairwise_distances_batched
from galleria.index import ExternalSearchIndex
from galleria.rerank import _common
from galleria.rerank._candidate_checks import (  # moved there; importable from here as before
    MAX_SCORE as MAX_SCORE,
)
from galleria.rerank._candidate_checks import (
    _check_candidate_lists as _check_candidate_lists,
)
from galleria.rerank._candidate_checks import (
    _check_candidates as _check_candidates,
)
from galleria.rerank._candidate_checks import (
    _fits as _fits,
)
from galleria.rerank._candidate_checks import (
    _plainly_valid as _plainly_valid,
)
from galleria.rerank._common import check_hyperparameters, check_mode, one_blas_thread
from galleria.rerank._consistent import read_candidates
from galleria.rerank.batched import chunk_counts, scale_pools, scaled_pools_core
from galleria.rerank.pool import reference_pool
from galleria.rerank.sparse_pool import VectorRows, sparse_pool_core
from galleria.store.candidate import Candidate
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = ["KReciprocalReranker"]


class KReciprocalReranker:
    """Re-rank a store's retrieved candidates with k-reciprocal encoding (Zhong et al., CVPR 2017).

    For one query, the pool is the probe followed by its candidates. ``d(p, g_i)`` is each
    candidate's score; the distances among candidates are computed from the store's vectors in the
    store's space. The candidates are re-ordered by ``d* = (1 - λ) · d_J + λ · d`` (Eq. 12, with ``d``
    scaled per row as docs/reranking.md defines), and each returned :class:`~galleria.store.Candidate` is
    scored by its ``d*`` (in [0, 1], lower is better).

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        The store the candidates come from (not one on an ``ExternalSearchIndex``). The vectors are
        read by path at each call, so the re-ranker keeps working after ``add_images`` /
        ``remove_images``.
    k1 : int, optional
        Neighbourhood size of the k-reciprocal sets (capped at the pool size).
    k2 : int, optional
        Neighbourhood size of the local query expansion (``k2 <= k1``; 1 skips it).
    lambda_value : float, optional
        Weight of the original distance in ``d*``, in [0, 1].
    mode : {"paper", "reference"}, default "paper"
        ``"reference"`` re-ranks each pool with the authors' published algorithm (see
        :func:`~galleria.rerank.rerank_pool`), so results equal torchreid's and fast-reid's on the
        same pool; it goes pool by pool.

        With none of the three given, all three are read from the gallery
        (:func:`galleria.rerank.adaptive.default_rerank_params`: reciprocal-neighbour statistics
        of a sample of the store's items, recorded in the store when it was built). With some
        given, the others take the paper's values (k1 = 20, k2 = 6, λ = 0.3), as before.

    Notes
    -----
    Pools of ``galleria.rerank._common.SPARSE_POOL_SIZE`` (1,000) candidates or more are re-ranked by
    the sparse pool core (:mod:`galleria.rerank.sparse_pool`), with the same results and memory near
    O(N·k1) instead of O(N²): a pool of 50,000 candidates needs a few hundred MB. While a call runs,
    the BLAS libraries run their matrix products on one thread (threadpoolctl; the setting is
    process-wide, so other threads' BLAS calls meanwhile do too, and it is restored when the last
    concurrent call ends): pool products are small, and BLAS threads competing with other work for
    the cores made re-ranking several times slower.

    Raises
    ------
    TypeError
        ``store`` is not an ``InMemoryImageEmbeddingStore``; ``k1`` / ``k2`` not integers;
        ``lambda_value`` not a real number (bools are rejected).
    ValueError
        The store searches an ``ExternalSearchIndex``; ``k1`` / ``k2`` below 1; ``k2 > k1``;
        ``lambda_value`` outside [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from galleria.store import InMemoryImageEmbeddingStore
    >>> vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c", "d"], vectors)
    >>> candidates = store.retrieve_by_vector([1.0, 0.05], k=4)[0]
    >>> reranker = KReciprocalReranker(store, k1=2, k2=1)
    >>> [c.path for c in reranker.rerank(candidates, top_k=2)]
    ['a', 'b']
    """

    def __init__(
        self,
        store: InMemoryImageEmbeddingStore,
        *,
        k1: int | None = None,
        k2: int | None = None,
        lambda_value: float | None = None,
        mode: str = "paper",
    ) -> None:
        if not isinstance(store, InMemoryImageEmbeddingStore):
            raise TypeError(f"store must be an InMemoryImageEmbeddingStore, got {type(store).__name__}")
        if isinstance(store.search_index, ExternalSearchIndex):
            raise ValueError(
                "store must not search an ExternalSearchIndex: its scores are not distances the "
                "re-ranker can combine with the store's own"
            )
        self._mode = check_mode(mode)
        self._store = store
        self._adaptive = k1 is None and k2 is None and lambda_value is None
        self._k1, self._k2, self._lambda = check_hyperparameters(
            20 if k1 is None else k1, 6 if k2 is None else k2, 0.3 if lambda_value is None else lambda_value
        )
        if self._adaptive and store.is_built:  # else on first use, once the store is built
            self._resolve()

    def _resolve(self) -> None:
        """Read the parameters from the gallery, once (only when none was given)."""
        if self._adaptive:
            from galleria.rerank.adaptive import default_rerank_params

            params = default_rerank_params(self._store, "k-reciprocal")
            self._k1, self._k2, self._lambda = params["k1"], params["k2"], params["lambda_value"]
            self._adaptive = False

    @property
    def store(self) -> InMemoryImageEmbeddingStore:
        """The store whose vectors the candidates are re-ranked with."""
        return self._store

    @property
    def k1(self) -> int:
        """Neighbourhood size of the k-reciprocal sets."""
        self._resolve_built()
        return self._k1

    @property
    def k2(self) -> int:
        """Neighbourhood size of the local query expansion."""
        self._resolve_built()
        return self._k2

    @property
    def lambda_value(self) -> float:
        """Weight of the original distance in the final one."""
        self._resolve_built()
        return self._lambda

    def _resolve_built(self) -> None:
        if self._adaptive:
            if not self._store.is_built:
                raise RuntimeError("the store is not built yet; the parameters are read from its gallery")
            self._resolve()

    @property
    def mode(self) -> str:
        """``"paper"`` or ``"reference"`` (the authors' published algorithm)."""
        return self._mode

    def __repr__(self) -> str:
        mode = "" if self._mode == "paper" else f"mode={self._mode!r}, "
        if self._adaptive:
            return f"KReciprocalReranker(adaptive, {mode}store={self._store!r})"
        return (
            f"KReciprocalReranker(k1={self._k1}, k2={self._k2}, lambda_value={self._lambda}, "
            f"{mode}store={self._store!r})"
        )

    def rerank(self, candidates: Sequence[Candidate], top_k: int) -> list[Candidate]:
        """Re-rank one query's candidates and keep the best ``top_k``.

        Parameters
        ----------
        candidates : sequence of Candidate
            One query's candidates as :meth:`InMemoryImageEmbeddingStore.retrieve_top_k_similar`
            returns them (scores are distances in the store's space). Retrieve more than ``top_k``,
            and at least ``k1``, for the neighbourhoods to mean something.
        top_k : int
            How many to return; more than the pool returns the whole pool.

        Returns
        -------
        list of Candidate
            The best ``top_k`` by ``d*`` (ascending, ties in candidate order), each scored by ``d*``.

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
        """Re-rank many queries' candidate lists together; equal to :meth:`rerank` on each list.

        The lists may differ in length; the heavy steps run on all of them at once.

        Parameters
        ----------
        candidate_lists : sequence of sequences of Candidate
            One candidate list per query, as :meth:`rerank` takes it.
        top_k : int
            How many to keep per query.

        Returns
        -------
        list of list of Candidate
            One re-ranked list per query, in input order.

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
        """Re-rank validated candidate lists: pools of one size go through the batched core together."""
        store = self._store
        if not store.is_built:
            raise RuntimeError("the store is not built yet; call build_store() first")
        self._resolve()
        # Pools are taken by size, so that the candidates of each chunk lie next to each other.
        lengths = np.array([len(pool) for pool in pools], dtype=np.int64)
        by_size = np.argsort(lengths, kind="stable").tolist()
        ordered = [pools[position] for position in by_size]
        flat = [candidate for pool in ordered for candidate in pool]
        scores = np.fromiter((candidate.score for candidate in flat), np.float64, len(flat))
        results: list[list[Candidate]] = [[] for _ in pools]
        make, store_id = Candidate._from_store, store.store_id
        first = start = 0
        # BLAS on one thread: the per-pool products are small, and threads would only compete for the
        # cores with whatever else runs (4x slower beside one busy process on 2 cores).
        with one_blas_thread():
            for length, total in zip(*np.unique(lengths, return_counts=True), strict=True):
                large = length >= _common.SPARSE_POOL_SIZE  # large pools go one by one
                for count in [1] * int(total) if large else chunk_counts(int(total), int(length) + 1):
                    end = start + count * int(length)
                    final = self._chunk_finals(flat[start:end], scores[start:end], count, int(length))
                    order = np.argsort(final, axis=1, kind="stable")[:, :top_k]
                    best = np.take_along_axis(final, order, axis=1)
                    for position, picked, values in zip(
                        by_size[first : first + count], order.tolist(), best.tolist(), strict=True
                    ):
                        pool = pools[position]
                        results[position] = [
                            make(pool[i].path, value, store_id, pool[i]._where)
                            for i, value in zip(picked, values, strict=True)
                        ]
                    first += count
                    start = end
        return results

    def _chunk_finals(
        self, candidates: list[Candidate], scores: np.ndarray, count: int, length: int
    ) -> np.ndarray:
        """``d*`` of ``count`` pools of ``length`` candidates, (count, length): dense, or one large pool."""
        store = self._store
        vectors = read_candidates(store, candidates).vectors  # one state; KeyError: unknown paths
        if self._mode == "reference":
            return self._reference_finals(vectors, scores, count, length)
        if length >= _common.SPARSE_POOL_SIZE:  # one pool, in memory near O(N·k1)
            source = VectorRows(vectors, scores, self._store.space)
            return sparse_pool_core(source, self._k1, self._k2, self._lambda)[None, :]
        return self._pool_finals(vectors, scores, count, length)

    def _reference_finals(
        self, vectors: np.ndarray, scores: np.ndarray, count: int, length: int
    ) -> np.ndarray:
        """``mode="reference"``: each pool's (N + 1)² distances through the authors' algorithm."""
        finals = np.empty((count, length), dtype=np.float64)
        stacked = vectors.reshape(count, length, -1)
        probe = scores.reshape(count, length)
        for position in range(count):
            matrix = np.zeros((length + 1, length + 1), dtype=np.float64)
            matrix[1:, 1:] = pairwise_distances(stacked[position], stacked[position], self._store.space)
            matrix[0, 1:] = matrix[1:, 0] = probe[position]
            finals[position] = reference_pool(matrix, self._k1, self._k2, self._lambda)
        return finals

    def _pool_finals(self, vectors: np.ndarray, scores: np.ndarray, count: int, length: int) -> np.ndarray:
        """``d*`` of ``count`` pools of ``length`` candidates from their vectors and scores, pool by pool."""
        stacked = vectors.reshape(count, length, -1)
        between = pairwise_distances_batched(stacked, stacked, self._store.space)
        scaled = scale_pools(between, scores.reshape(count, length))
        sizes = np.full(count, length + 1, dtype=np.int64)
        return scaled_pools_core(scaled, sizes, self._k1, self._k2, self._lambda)


def _adaptive(stats: Any) -> dict[str, Any]:
    """k1 = clip(2m, 4, 20), k2 = clip(m·s/2, 2, 6) (≤ k1), λ = clip(1.45 − 1.4·s, 0.55, 0.9); λ 1 if flat."""
    from galleria.statistics import clip_round, read_statistics

    reading = read_statistics(stats)
    k1 = reading.capped(2 * reading.mutual, 4, 20)
    return {"k1": k1, "k2": min(k1, clip_round(reading.reach, 2, 6)), "lambda_value": reading.lam}


#: The declaration of k-reciprocal re-ranking (:mod:`galleria._declare`): the registry finds it here.
COMPONENT = Component(
    kind="reranker",
    name="k-reciprocal",
    summary="k-reciprocal encoding (Zhong et al., CVPR 2017): Jaccard distance of reciprocal neighborhoods",
    params=(
        Param(
            "k1",
            int,
            20,
            1,
            10_000,
            paper=20,
            cost=True,
            space=Space("int", 4, 60),
            help="size of the k-reciprocal neighborhoods",
        ),
        Param(
            "k2",
            int,
            6,
            1,
            10_000,
            paper=6,
            at_most="k1",
            space=Space("int", 1, 10),
            help="neighbors averaged in the local query expansion (at most k1)",
        ),
        Param(
            "lambda_value",
            float,
            0.3,
            0.0,
            1.0,
            paper=0.3,
            space=Space("float", 0.0, 1.0),
            help="weight of the original distance against the Jaccard distance",
        ),
    ),
    build=KReciprocalReranker,
    adaptive=_adaptive,
    pool_power=2,  # every pair of the pool is compared
    order=0,
)
