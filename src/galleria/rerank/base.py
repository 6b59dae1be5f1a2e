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

:func:`galleria.rerank.registry.make_reranker` builds any of them by name; this module imports
none of the implementations (they import it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from galleria._validation import check_choice, check_positive_int
from galleria.distances import normalize_rows, pairwise_distances_batched
from galleria.index import ExternalSearchIndex
from galleria.rerank._candidate_checks import check_candidate_lists, check_candidates
from galleria.rerank._common import as_float_matrix
from galleria.rerank._consistent import Prepare, read_candidates
from galleria.rerank.batched import chunk_counts
from galleria.store import store_statistics
from galleria.store.candidate import Candidate
from galleria.store.store import InMemoryImageEmbeddingStore
from galleria.vectors import stable_smallest

__all__ = [
    "PRESETS",
    "PoolReranker",
    "Reranker",
    "check_features",
    "check_store",
    "declared_params",
    "resolved_params",
    "similarities_from_distances",
    "top_similar",
]

#: Where values left out come from: the gallery (``"adaptive"``, the default) or the published
#: values (``"paper"``); the one list every caller shares.
PRESETS: tuple[str, ...] = ("adaptive", "paper")
#: Elements of one block of similarity rows in the full settings (float32: 16 MB).
_BLOCK_ELEMENTS = 1 << 22


@runtime_checkable
class Reranker(Protocol):
    """The re-ranker contract: what galleria calls, and the one base a re-ranker may subclass.

    Re-orders the candidates a store retrieved; scores of the returned candidates are lower-is-better.
    A re-ranker implements :meth:`rerank` (one query's candidates) and has a :attr:`store`, the store
    the candidates must come from (for DBA + αQE the augmented store). :meth:`rerank_batch` (many
    queries at once, what :class:`galleria.retrieval.Searcher` calls) has a default here: a subclass
    that implements only :meth:`rerank` gets it, and a plugin's re-ranker that does not subclass this
    gets the same default from the registry. Exported as :class:`galleria.components.Reranker`.

    Examples
    --------
    >>> class Reverse(Reranker):
    ...     def __init__(self, store):
    ...         self.store = store
    ...     def rerank(self, candidates, top_k):
    ...         return [c.rescored(-c.score) for c in candidates][::-1][:top_k]
    >>> lists = [[Candidate("a", 0.1), Candidate("b", 0.2)]] * 2
    >>> [[c.path for c in found] for found in Reverse(None).rerank_batch(lists, 1)]
    [['b'], ['b']]
    """

    store: Any
    """The store the candidates must come from."""

    def rerank(self, candidates: Sequence[Candidate], top_k: int) -> list[Candidate]:
        """Re-rank one query's candidates (best first) and keep the best ``top_k``."""
        ...

    def rerank_batch(
        self, candidate_lists: Sequence[Sequence[Candidate]], top_k: int
    ) -> list[list[Candidate]]:
        """Re-rank many queries' candidate lists; equal to :meth:`rerank` on each (the default
        calls it on each list)."""
        return [self.rerank(candidates, top_k) for candidates in candidate_lists]


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
    """``store`` if it is an ``InMemoryImageEmbeddingStore`` not on an external index (``what``: who
    asks, named in the error): a re-ranker that reads the store's vectors checks its store so.

    Raises TypeError for another object, ValueError for a store on an
    :class:`~galleria.index.ExternalSearchIndex` (its scores are not distances)."""
    if not isinstance(store, InMemoryImageEmbeddingStore):
        raise TypeError(f"store must be an InMemoryImageEmbeddingStore, got {type(store).__name__}")
    if isinstance(store.search_index, ExternalSearchIndex):
        raise ValueError(
            f"store must not search an ExternalSearchIndex: its scores are not distances {what} can "
            "combine with the store's own"
        )
    return store


def declared_params(component: Any, where: str, **given: Any) -> dict[str, Any]:
    """The parameters a constructor was ``given`` (None: left out), checked by ``component``'s
    declaration as every other entry point checks them (:meth:`galleria._declare.Component.check`),
    the others filled in from its defaults; errors name ``where`` (the class).

    A re-ranker's constructor calls this with its keywords, so that the class, :func:`make_reranker`,
    :class:`~galleria.retrieval.RetrievalConfig`, the command line, settings files and the API
    refuse the same value with the same message; the signature repeats no default.
    """
    values: dict[str, Any] = component.check(
        {key: value for key, value in given.items() if value is not None}, where=where
    )
    return values


def resolved_params(component: Any, store: Any, preset: str = "adaptive", **context: Any) -> dict[str, Any]:
    """The values ``component``'s adaptive rule reads from ``store``'s gallery (``preset="paper"``,
    or a component without a rule: its paper preset, else its defaults).

    The one place a re-ranker's adaptive values are resolved: :class:`KReciprocalReranker` and
    :class:`~galleria.rerank.ecn.ECNReranker` without parameters,
    :func:`galleria.rerank.adaptive.default_rerank_params` and through it
    :meth:`galleria.retrieval.RetrievalConfig.resolve` and the page all call it.
    """
    values: dict[str, Any] = component.resolve(
        lambda: store_statistics(store), check_choice("preset", preset, PRESETS), **context
    )
    return values


class PoolReranker:
    """Shared shell of the pool re-rankers: validation, grouping pools by size, building similarities.

    A subclass calls ``super().__init__(store, name)`` (the store is checked by :func:`check_store`)
    and implements :meth:`pool_scores`, which maps the probe's similarities to its candidates
    ``(B, N)`` and the candidates' similarities among themselves ``(B, N, N)`` to scores ``(B, N)``,
    lower is better; candidates are then sorted stably by score (ties keep the candidate order).
    :meth:`rerank` and :meth:`rerank_batch` (pools of one size at once) come from here. Exported as
    :class:`galleria.components.PoolReranker`; the built-in pool re-rankers set ``_store`` and
    override ``_pool_scores`` themselves.

    A subclass that scores against a structure derived from the whole gallery (a graph, a table)
    returns its builder from :meth:`_gallery_structure` and receives the structure in
    :meth:`_scores_for_pools`: the base reads it and the candidates' rows from one state of the
    gallery (:func:`galleria.rerank._consistent.read_candidates`), whatever a writer does meanwhile.
    """

    _store: InMemoryImageEmbeddingStore

    def __init__(self, store: Any, name: str = "this re-ranker") -> None:
        self._store = check_store(store, name)

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
        pool = check_candidates("candidates", candidates, self._store.store_id)
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
        pools = check_candidate_lists(candidate_lists, self._store.store_id)
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
                flat = [candidate for pool in chunk_pools for candidate in pool]
                read = read_candidates(store, flat, self._gallery_structure())  # KeyError: unknown paths
                vectors = read.vectors.reshape(count, length, -1)
                scores = np.array([[c.score for c in pool] for pool in chunk_pools], dtype=np.float64)
                final = self._scores_for_pools(
                    similarities_from_distances(scores, store.space),
                    vectors,
                    read.rows.reshape(count, length),
                    read.prepared,
                )
                order = np.argsort(final, axis=1, kind="stable")[:, :top_k]
                best = np.take_along_axis(final, order, axis=1)
                for position, pool, picked, values in zip(
                    chunk, chunk_pools, order.tolist(), best.tolist(), strict=True
                ):
                    results[position] = [
                        Candidate._from_store(pool[i].path, float(v), store.store_id, pool[i]._where)
                        for i, v in zip(picked, values, strict=True)
                    ]
        return results

    def _gallery_structure(self) -> Prepare | None:
        """The builder of the gallery-derived structure this re-ranker scores against, or None."""
        return None

    def _scores_for_pools(
        self, probe: np.ndarray, vectors: np.ndarray, rows: np.ndarray, structure: Any = None
    ) -> np.ndarray:
        """Scores of ``B`` pools given their candidates' gallery ``rows`` (B, N) and the gallery
        ``structure`` of the same state (None without one), pool by pool."""
        return self._scores_from_vectors(probe, vectors)

    def _scores_from_vectors(self, probe: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """Scores from the probe's similarities (B, N) and the candidates' vectors (B, N, d)."""
        among = pairwise_distances_batched(vectors, vectors, self._store.space)
        return self._pool_scores(probe, similarities_from_distances(among, self._store.space))

    def _pool_scores(self, probe: np.ndarray, among: np.ndarray) -> np.ndarray:
        return self.pool_scores(probe, among)

    def pool_scores(self, probe: np.ndarray, among: np.ndarray) -> np.ndarray:
        """Scores ``(B, N)``, lower is better, of ``B`` pools of ``N`` candidates from the probe's
        similarities to them ``probe`` (B, N) and theirs among themselves ``among`` (B, N, N).

        The similarities are read from the store's distances (:func:`similarities_from_distances`).
        A subclass implements this."""
        raise NotImplementedError(f"{type(self).__name__} must implement pool_scores(probe, among)")


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
