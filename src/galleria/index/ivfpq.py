"""Compressed approximate search on a faiss IVF-PQ index (optionally OPQ-rotated), for millions of vectors.

An inverted file splits the gallery into ``lists`` clusters; each vector is stored as a product-
quantisation code of ``subquantizers`` × ``bits`` bits (a few dozen bytes instead of ``4 * dim``).
A query visits the ``probe_lists`` nearest clusters. The index is trained (k-means for the lists and
the codebooks) on a seeded sample of at most ``train_size`` vectors of the first batch it is given.

Parameters left unset are chosen from that batch (:mod:`galleria.index._ivfpq_params`): the shape
from its size, dimension and ``memory_budget``, and ``probe_lists`` by measuring recall@10 on a
sample of the gallery against exact search until ``recall_target`` is met
(:mod:`galleria.index._ivfpq_build`), reported in :attr:`IvfPqIndex.build_report` (saved with the
index; its file: :mod:`galleria.index._ivfpq_files`)."""

from __future__ import annotations

import time
from typing import Any, cast

import faiss as _faiss
import numpy as np

from galleria._declare import Component
from galleria._interrupts import deferred_interrupts
from galleria._moved import moved_names
from galleria._validation import check_choice
from galleria.distances import prepare_vectors
from galleria.index import _serial
from galleria.index._checks import check_k, check_rows, check_vectors, empty_result
from galleria.index._faiss import (
    LiveRows,
    omp_threads,
    usable_threads,
)
from galleria.index._ivfpq_build import add_in_threads, add_parallel, choose_probes
from galleria.index._ivfpq_files import pack_ivfpq, read_ivfpq
from galleria.index._ivfpq_params import IVFPQ_PARAMETERS, declared_params, validate_ivfpq_params
from galleria.index._ivfpq_ray import add_on_ray
from galleria.index._ivfpq_train import TrainingBudget, train_ivfpq
from galleria.index.base import SPACES
from galleria.index.exact import appended, rescore_candidates

# faiss's bundled type stubs miss much of its SWIG API (DirectMap, IVF fields, search parameters).
faiss: Any = _faiss

__all__ = ["IVFPQ_PARAMETERS", "IvfPqIndex", "validate_ivfpq_params"]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(
    __name__,
    {
        "IvfPqParameter": "galleria.index._ivfpq_params",
        "default_subquantizers": "galleria.index._ivfpq_params",
    },
)

#: A batch is split over worker processes only when each shard gets at least this many vectors.
MIN_ROWS_PER_WORKER = 20_000


class IvfPqIndex:
    """Approximate search on compressed vectors: a faiss ``IndexIVFPQ``, optionally behind an OPQ rotation.

    Cosine and inner-product spaces use faiss's inner-product metric (distance ``1 - <q, v>``, the
    vectors L2-normalised first for cosine); l2 uses squared Euclidean distance. Scores are computed
    from the PQ codes, so they approximate the exact distances. The first :meth:`add` trains the
    index on a seeded sample of at most ``train_size`` of its vectors; it needs at least
    ``max(lists, 2 ** bits)`` vectors.

    Vectors given back by :meth:`reconstruct` (what the store's ``embeddings_of``, αQE and the
    re-rankers use) are the **PQ reconstructions** — approximations — unless ``keep_vectors=True``,
    which keeps a separate exact copy (``vector_dtype`` float16 halves its memory). With a copy,
    ``rerank_candidates=R`` re-scores the best ``max(R, k)`` PQ candidates of every query exactly.

    Removed rows are deleted from the inverted lists (no mask); the remaining rows are renumbered.
    A query that finds fewer than ``min(k, len)`` rows in its ``probe_lists`` lists is searched
    again over all lists, so every search returns ``min(k, len)`` rows.

    Parameters
    ----------
    space : {"cosine", "ip", "l2"}
        Distance space.
    lists, subquantizers, bits, probe_lists, train_size, opq, keep_vectors, vector_dtype, \
rerank_candidates, seed, build_workers, num_threads, build_engine
        See :data:`IVFPQ_PARAMETERS`.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> index = IvfPqIndex("l2", lists=8, bits=6, keep_vectors=True, rerank_candidates=20)
    >>> index.add(rng.normal(size=(500, 16)).astype(np.float32))
    >>> ids, scores = index.search(index.reconstruct(np.array([7])), k=1)
    >>> int(ids[0, 0])
    7
    """

    name = "ivfpq"
    #: How much work training does (sample sizes, k-means iterations); see :class:`TrainingBudget`.
    training_budget = TrainingBudget()
    #: Scores are distances: lower is better.
    higher_is_better = False

    def __init__(
        self,
        space: str = "cosine",
        *,
        lists: int | None = None,
        subquantizers: int | None = None,
        bits: int | None = None,
        probe_lists: int | None = None,
        recall_target: float | None = None,
        memory_budget: int | None = None,
        train_size: int = 100_000,
        opq: bool = False,
        keep_vectors: bool = False,
        vector_dtype: str = "float16",
        rerank_candidates: int = 0,
        seed: int = 0,
        build_workers: int = 1,
        num_threads: int | None = None,
        build_engine: str = "processes",
    ) -> None:
        self._space = check_choice("space", space, SPACES)
        self._params = validate_ivfpq_params(
            {
                "lists": lists,
                "subquantizers": subquantizers,
                "bits": bits,
                "probe_lists": probe_lists,
                "recall_target": recall_target,
                "memory_budget": memory_budget,
                "train_size": train_size,
                "opq": opq,
                "keep_vectors": keep_vectors,
                "vector_dtype": vector_dtype,
                "rerank_candidates": rerank_candidates,
                "seed": seed,
                "build_workers": build_workers,
                "num_threads": num_threads,
                "build_engine": build_engine,
            }
        )
        self._index: Any = None  # the faiss index (IndexIVFPQ or IndexPreTransform); None until trained
        self._ivf: Any = None  # the IndexIVFPQ inside it (a non-owning view; _index keeps it alive)
        self._rows = LiveRows.identity(0)
        self._dim: int | None = None
        self._kept = np.zeros((0, 0), dtype=self._params["vector_dtype"])
        self._kept_size = 0
        self._report: dict[str, Any] | None = None
        self._seconds: dict[str, float] = {}

    def __repr__(self) -> str:
        settings = ", ".join(f"{key}={value!r}" for key, value in self.params().items())
        return f"IvfPqIndex(space={self._space!r}, {settings}, rows={len(self)})"

    @property
    def space(self) -> str:
        """The distance space: ``"cosine"``, ``"ip"`` or ``"l2"``."""
        return self._space

    @property
    def dim(self) -> int | None:
        """Vector dimension, or None before the first vectors are added."""
        return self._dim

    @property
    def can_reconstruct(self) -> bool:
        """Always True: exact vectors with ``keep_vectors=True``, PQ reconstructions otherwise."""
        return True

    @property
    def is_trained(self) -> bool:
        """Whether the lists and codebooks have been trained (by the first :meth:`add`)."""
        return self._index is not None

    @property
    def faiss_index(self) -> Any:
        """The underlying faiss index (None before the first add)."""
        return self._index

    @property
    def code_size(self) -> int | None:
        """Bytes per stored PQ code (None before training)."""
        return None if self._ivf is None else int(self._ivf.code_size)

    def __len__(self) -> int:
        return int(self._rows.internal.size)

    def params(self) -> dict[str, Any]:
        """The construction parameters, JSON-able; once trained, with the values chosen filled in."""
        return dict(self._params)

    @property
    def build_report(self) -> dict[str, Any] | None:
        """What the first :meth:`add` chose and measured (None before it): ``chosen`` (the parameters
        chosen from the gallery), ``recall_at_10`` on ``sample_queries`` gallery vectors at
        ``probe_lists`` (None when not measured), and the ``recall_target``."""
        return None if self._report is None else dict(self._report)

    @property
    def build_seconds(self) -> dict[str, float]:
        """Wall seconds of each phase of the first :meth:`add` in this process (not saved): OPQ
        rotation, coarse k-means, PQ codebooks, encoding, exact sample neighbours, probe search."""
        return dict(self._seconds)

    # ------------------------------------------------------------------ building

    def _metric(self) -> int:
        return int(faiss.METRIC_L2 if self._space == "l2" else faiss.METRIC_INNER_PRODUCT)

    def _train(self, vectors: np.ndarray) -> None:
        """Create and train the faiss index on a seeded sample of ``vectors`` (already prepared)."""
        params = self._params
        chosen = [name for name in ("lists", "subquantizers", "bits", "probe_lists") if params[name] is None]
        self._seconds = {}
        self._index, self._ivf = train_ivfpq(
            vectors, params, self._metric(), self.training_budget, self._seconds
        )
        self._dim = vectors.shape[1]
        self._report = {"chosen": chosen}

    def add(self, vectors: np.ndarray) -> None:
        """Insert an (n, dim) batch of finite vectors as rows ``len(self) .. len(self) + n - 1``.

        The first call trains the index on (a sample of) its batch. With ``build_workers > 1`` and
        a large batch, shards are encoded in worker processes and their inverted lists merged; with
        ``build_engine="ray"`` in Ray tasks (:mod:`galleria.index._ivfpq_ray`). When encoding fails
        the index is left as it was before the call (untrained again if this call trained it).
        """
        array = prepare_vectors(check_vectors("vectors", vectors, self._dim, self.space), self._space)
        count = array.shape[0]
        if count == 0:
            return
        training, params = self._index is None, dict(self._params)
        if training:
            self._train(array)
        start = time.perf_counter()
        try:
            self._encode(array)
        except BaseException:
            if training:  # training filled in the chosen shape: back to the parameters given
                self._index, self._ivf, self._dim, self._report, self._params = None, None, None, None, params
            raise
        if training:
            self._seconds["encoding"] = time.perf_counter() - start
            assert self._report is not None
            choose_probes(
                lambda queries, k, probes: self.search(queries, k, probe_lists=probes)[0],
                array,
                self._space,
                self._params,
                self._report,
                self._seconds,
                self.training_budget.stop_at_plateau,
            )

    def _encode(self, array: np.ndarray) -> None:
        """Add the prepared ``array`` to the trained index: here, in worker processes or on Ray."""
        count, first = array.shape[0], self._rows.total
        on_ray = self._params["build_engine"] == "ray" and count >= MIN_ROWS_PER_WORKER
        # A file's params never choose more processes than this machine lets the process use.
        workers = min(usable_threads(self._params["build_workers"]), count // MIN_ROWS_PER_WORKER)
        with deferred_interrupts():  # lists, kept copy and row bookkeeping change together
            if on_ray:
                add_on_ray(self._index, self._ivf, array, first)
            elif workers > 1:
                self._add_parallel(array, first, workers)
            elif count >= MIN_ROWS_PER_WORKER:  # the Ray shards, on this process's threads
                threads = usable_threads(self._params["num_threads"] or faiss.omp_get_max_threads())
                add_in_threads(self._index, self._ivf, array, first, threads)
            else:
                with omp_threads(self._params["num_threads"]):
                    self._index.add_with_ids(array, np.arange(first, first + count, dtype=np.int64))
            if self._params["keep_vectors"]:
                self._keep(array)
            self._rows.append(count)

    def _add_parallel(self, array: np.ndarray, first: int, workers: int) -> None:
        add_parallel(self._index, self._ivf, array, first, workers)  # in ``workers`` processes

    def _keep(self, array: np.ndarray) -> None:
        """Append ``array`` to the exact copy (grown geometrically, like the exact index)."""
        self._kept = appended(self._kept, self._kept_size, array)
        self._kept_size += array.shape[0]

    # ------------------------------------------------------------------ searching

    def _faiss_search(self, queries: np.ndarray, width: int, probes: int) -> tuple[np.ndarray, np.ndarray]:
        ivf_settings = faiss.SearchParametersIVF()
        ivf_settings.nprobe = min(probes, int(self._ivf.nlist))
        settings = ivf_settings
        if self._params["opq"]:
            settings = faiss.SearchParametersPreTransform()
            settings.index_params = ivf_settings
        with omp_threads(self._params["num_threads"]):
            scores, labels = self._index.search(queries, width, params=settings)
        return labels, scores

    def search(
        self, queries: np.ndarray, k: int, *, probe_lists: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return the approximate ``k`` nearest rows of each query: (q, min(k, len)) ids and distances.

        ``probe_lists`` overrides the index's setting for this call only. Equal distances are
        ordered by row.
        """
        k = check_k(k)
        probes = self._params["probe_lists"]
        if probe_lists is not None:
            probes = IVFPQ_PARAMETERS["probe_lists"].check("probe_lists", probe_lists)
        array = check_vectors("queries", queries, self._dim, self.space)
        live = len(self)
        if live == 0:
            return empty_result(array.shape[0])
        array = prepare_vectors(array, self._space)
        k = min(k, live)
        width = min(live, max(k, self._params["rerank_candidates"]))
        labels, scores = self._faiss_search(array, width, probes)
        short = np.flatnonzero((labels < 0).any(axis=1))
        if short.size:
            # Too few rows in the probed lists: search those queries over every list.
            labels[short], scores[short] = self._faiss_search(array[short], width, int(self._ivf.nlist))
        ids = self._rows.to_positions(labels)
        if self._params["rerank_candidates"]:
            return rescore_candidates(self._kept, self._space, array, ids, k)
        scores = scores.astype(np.float32, copy=False)
        if self._space != "l2":
            np.subtract(1.0, scores, out=scores)
        if k > 1 and (scores[:, 1:] == scores[:, :-1]).any():
            order = np.lexsort((ids, scores), axis=1)
            ids, scores = np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)
        return ids, scores

    def reconstruct(self, rows: np.ndarray) -> np.ndarray:
        """Return vectors of the given rows: the kept exact copy, else the PQ reconstructions.

        The vectors are normalised for cosine when exact; PQ reconstructions are approximations
        and only approximately of unit norm.
        """
        ids = check_rows(rows, len(self))
        if ids.size == 0:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        if self._params["keep_vectors"]:
            return np.asarray(self._kept[ids], dtype=np.float32)
        if self._ivf.direct_map.type == faiss.DirectMap.NoMap:
            self._ivf.set_direct_map_type(faiss.DirectMap.Hashtable)
        return np.asarray(self._index.reconstruct_batch(self._rows.internal[ids]), dtype=np.float32)

    def remove(self, rows: np.ndarray) -> None:
        """Delete the given rows (duplicates count once); the rest are renumbered compactly, order kept."""
        ids = np.unique(check_rows(rows, len(self)))
        if ids.size == 0:
            return
        internal = np.ascontiguousarray(self._rows.internal[ids])
        self._index.remove_ids(faiss.IDSelectorArray(internal.size, faiss.swig_ptr(internal)))
        if self._params["keep_vectors"]:
            keep = np.ones(self._kept_size, dtype=bool)
            keep[ids] = False
            self._kept = np.ascontiguousarray(self._kept[: self._kept_size][keep])
            self._kept_size = self._kept.shape[0]
        self._rows.remove(ids)

    # ------------------------------------------------------------------ files

    def to_bytes(self) -> bytes:
        """Serialise the index: codes and codebooks in faiss's binary format, the kept copy raw (no pickle).

        A float16 copy is written as its raw bytes (a uint8 array) and read back as float16.
        """
        return self.packed().to_bytes()

    def packed(self) -> _serial.Packed:
        """What :meth:`to_bytes` returns, as parts written without joining them (faiss streamed)."""
        return pack_ivfpq(self)

    @classmethod
    def from_bytes(cls, data: bytes | _serial.Unpacked) -> IvfPqIndex:
        """Rebuild an index written by :meth:`to_bytes`; raise ValueError on corrupt or mismatched data."""
        return cast(IvfPqIndex, read_ivfpq(cls, data))


#: The declaration of the IVF-PQ index (:mod:`galleria._declare`), its parameters those of
#: :data:`IVFPQ_PARAMETERS` (whose own check, :func:`validate_ivfpq_params`, the registry calls).
COMPONENT = Component(
    kind="index",
    name="ivfpq",
    summary="faiss IVF-PQ: compressed codes, shape and probes chosen from the data and a recall target",
    params=declared_params(),
    build=IvfPqIndex,
    order=20,
    extra={
        "creatable": True,
        "validate": validate_ivfpq_params,
        "from_bytes": IvfPqIndex.from_bytes,
        "faiss_blobs": frozenset({"faiss"}),
    },
)
