"""Compressed approximate search on a faiss IVF-PQ index (optionally OPQ-rotated), for millions of vectors.

An inverted file splits the gallery into ``lists`` clusters; each vector is stored as a product-
quantisation code of ``subquantizers`` × ``bits`` bits (a few dozen bytes instead of ``4 * dim``).
A query visits the ``probe_lists`` nearest clusters. The index is trained (k-means for the lists and
the codebooks) on a seeded sample of at most ``train_size`` vectors of the first batch it is given.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import faiss as _faiss
import numpy as np

from galleria._validation import check_choice, is_int
from galleria.distances import prepare_vectors
from galleria.index import _serial
from galleria.index._checks import check_k, check_rows, check_vectors, empty_result
from galleria.index._faiss import (
    LiveRows,
    deserialize,
    omp_threads,
    restore_precomputed_table,
    serialize,
    usable_threads,
)
from galleria.index.base import SPACES
from galleria.index.exact import top_k_smallest

# faiss's bundled type stubs miss much of its SWIG API (DirectMap, IVF fields, search parameters).
faiss: Any = _faiss

__all__ = ["IVFPQ_PARAMETERS", "IvfPqIndex", "IvfPqParameter", "validate_ivfpq_params"]

_VECTOR_DTYPES = ("float16", "float32")


@dataclass(frozen=True)
class IvfPqParameter:
    """One tunable of :class:`IvfPqIndex`: its default, kind, allowed range or choices, and meaning."""

    default: Any
    kind: str  # "int", "bool" or "choice"
    meaning: str
    minimum: int = 0
    maximum: int = 0
    optional: bool = False
    choices: tuple[str, ...] = ()

    def check(self, name: str, value: Any) -> Any:
        """Return ``value`` checked (an int in range, a bool or a choice), else raise naming ``name``."""
        if value is None and self.optional:
            return None
        if self.kind == "bool":
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"index parameter {name!r} must be True or False, got {value!r}")
            return bool(value)
        if self.kind == "choice":
            if not isinstance(value, str):
                raise TypeError(
                    f"index parameter {name!r} must be one of {list(self.choices)}, got {value!r}"
                )
            return check_choice(name, value, self.choices)
        if not is_int(value):
            allowed = "an integer" + (" or None" if self.optional else "")
            raise TypeError(
                f"index parameter {name!r} must be {allowed}, got {value!r} ({type(value).__name__})"
            )
        if not self.minimum <= value <= self.maximum:
            raise ValueError(
                f"index parameter {name!r} must lie in [{self.minimum}, {self.maximum}], got {value!r}"
            )
        return int(value)


#: The parameters of :class:`IvfPqIndex` (name → default, kind, range, meaning); nothing else is accepted.
IVFPQ_PARAMETERS: dict[str, IvfPqParameter] = {
    "lists": IvfPqParameter(
        1024, "int", "inverted lists (k-means clusters, faiss nlist); about 4·sqrt(n) is usual", 1, 1 << 20
    ),
    "subquantizers": IvfPqParameter(
        None,
        "int",
        "PQ sub-vectors per code (faiss M); must divide dim. None: the largest divisor of dim up to dim / 4",
        1,
        4096,
        optional=True,
    ),
    "bits": IvfPqParameter(8, "int", "bits per sub-vector code (faiss nbits): 2**bits centroids each", 1, 16),
    "probe_lists": IvfPqParameter(
        16, "int", "lists visited per query (faiss nprobe): higher recall, slower", 1, 1 << 20
    ),
    "train_size": IvfPqParameter(
        100_000,
        "int",
        "vectors (a seeded sample of the first batch) used to train lists and codebooks",
        1,
        1 << 40,
    ),
    "opq": IvfPqParameter(
        False, "bool", "learn an OPQ rotation before quantising (better codes, slower training)"
    ),
    "keep_vectors": IvfPqParameter(
        False, "bool", "keep a separate exact copy of the vectors for reconstruct (αQE, re-ranking)"
    ),
    "vector_dtype": IvfPqParameter(
        "float16", "choice", "dtype of the kept copy (keep_vectors=True)", choices=_VECTOR_DTYPES
    ),
    "rerank_candidates": IvfPqParameter(
        0,
        "int",
        "re-score this many PQ candidates with the kept exact vectors (0: off; needs keep_vectors)",
        0,
        1 << 16,
    ),
    "seed": IvfPqParameter(0, "int", "seed of the training sample and of k-means", 0, (1 << 31) - 1),
    "build_workers": IvfPqParameter(
        1,
        "int",
        "worker processes that encode shards of a large add in parallel (1: in this process)",
        1,
        256,
    ),
    "num_threads": IvfPqParameter(
        None,
        "int",
        "OpenMP threads faiss uses while training, adding and searching (None: default)",
        1,
        4096,
        True,
    ),
}

#: A batch is split over worker processes only when each shard gets at least this many vectors.
MIN_ROWS_PER_WORKER = 20_000


def validate_ivfpq_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check IVF-PQ parameters against :data:`IVFPQ_PARAMETERS`; return all of them, defaults filled in.

    Examples
    --------
    >>> validate_ivfpq_params({"lists": 64})["lists"]
    64
    >>> validate_ivfpq_params({"rerank_candidates": 100})
    Traceback (most recent call last):
    ...
    ValueError: index parameter 'rerank_candidates' needs keep_vectors=True (exact vectors to re-score with)
    """
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise TypeError(f"index_params must be a mapping of names to values, got {type(params).__name__}")
    unknown = sorted(str(key) for key in params if key not in IVFPQ_PARAMETERS)
    if unknown:
        raise ValueError(
            f"unknown ivfpq index parameter(s) {unknown}; valid names are {sorted(IVFPQ_PARAMETERS)}"
        )
    checked = {
        name: spec.check(name, params[name]) if name in params else spec.default
        for name, spec in IVFPQ_PARAMETERS.items()
    }
    if checked["rerank_candidates"] and not checked["keep_vectors"]:
        raise ValueError(
            "index parameter 'rerank_candidates' needs keep_vectors=True (exact vectors to re-score with)"
        )
    return checked


def default_subquantizers(dim: int) -> int:
    """The largest divisor of ``dim`` that is at most ``dim // 4`` (1 for tiny dims).

    Examples
    --------
    >>> default_subquantizers(512), default_subquantizers(100), default_subquantizers(3)
    (128, 25, 1)
    """
    limit = max(1, dim // 4)
    return max(m for m in range(1, limit + 1) if dim % m == 0)


def _list_ids(ivf: Any) -> np.ndarray:
    """All ids stored in the inverted lists of ``ivf`` (any order)."""
    lists = ivf.invlists
    chunks = []
    for number in range(ivf.nlist):
        size = lists.list_size(number)
        if size:
            chunks.append(faiss.rev_swig_ptr(lists.get_ids(number), size).copy())
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def _add_shard(trained: bytes, vectors: np.ndarray, first_id: int) -> bytes:
    """Worker: encode ``vectors`` (ids from ``first_id``) into a copy of the trained index; its bytes."""
    faiss.omp_set_num_threads(1)
    index = faiss.deserialize_index(np.frombuffer(trained, dtype=np.uint8).copy())
    ids = np.arange(first_id, first_id + vectors.shape[0], dtype=np.int64)
    index.add_with_ids(vectors, ids)
    return bytes(faiss.serialize_index(index))


def _add_shard_shared(
    trained: bytes, memory_name: str, shape: tuple[int, int], start: int, stop: int
) -> bytes:
    """Worker entry point: read rows ``start:stop`` of a shared-memory block and encode them."""
    from multiprocessing import shared_memory

    block = shared_memory.SharedMemory(name=memory_name)
    try:
        vectors = np.ndarray(shape, dtype=np.float32, buffer=block.buf)[start:stop]
        return _add_shard(trained, np.ascontiguousarray(vectors), start)
    finally:
        block.close()


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
rerank_candidates, seed, build_workers, num_threads
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
    #: Scores are distances: lower is better.
    higher_is_better = False

    def __init__(
        self,
        space: str = "cosine",
        *,
        lists: int = 1024,
        subquantizers: int | None = None,
        bits: int = 8,
        probe_lists: int = 16,
        train_size: int = 100_000,
        opq: bool = False,
        keep_vectors: bool = False,
        vector_dtype: str = "float16",
        rerank_candidates: int = 0,
        seed: int = 0,
        build_workers: int = 1,
        num_threads: int | None = None,
    ) -> None:
        self._space = check_choice("space", space, SPACES)
        self._params = validate_ivfpq_params(
            {
                "lists": lists,
                "subquantizers": subquantizers,
                "bits": bits,
                "probe_lists": probe_lists,
                "train_size": train_size,
                "opq": opq,
                "keep_vectors": keep_vectors,
                "vector_dtype": vector_dtype,
                "rerank_candidates": rerank_candidates,
                "seed": seed,
                "build_workers": build_workers,
                "num_threads": num_threads,
            }
        )
        self._index: Any = None  # the faiss index (IndexIVFPQ or IndexPreTransform); None until trained
        self._ivf: Any = None  # the IndexIVFPQ inside it (a non-owning view; _index keeps it alive)
        self._rows = LiveRows.identity(0)
        self._dim: int | None = None
        self._kept = np.zeros((0, 0), dtype=self._params["vector_dtype"])
        self._kept_size = 0

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
        """The construction parameters, JSON-able."""
        return dict(self._params)

    # ------------------------------------------------------------------ building

    def _metric(self) -> int:
        return int(faiss.METRIC_L2 if self._space == "l2" else faiss.METRIC_INNER_PRODUCT)

    def _train(self, vectors: np.ndarray) -> None:
        """Create and train the faiss index on a seeded sample of ``vectors`` (already prepared)."""
        count, dim = vectors.shape
        params = self._params
        lists, bits = params["lists"], params["bits"]
        subquantizers = params["subquantizers"] or default_subquantizers(dim)
        if dim % subquantizers:
            raise ValueError(
                f"index parameter 'subquantizers' ({subquantizers}) must divide the dimension {dim}"
            )
        needed = max(lists, 1 << bits)
        sample_size = min(count, params["train_size"])
        if sample_size < needed:
            raise ValueError(
                f"the ivfpq index trains on its first batch and needs at least max(lists, 2**bits) = "
                f"{needed} vectors (lists={lists}, bits={bits}); got {sample_size} "
                f"(train_size={params['train_size']}, batch of {count}). Add more vectors at once or "
                "lower lists/bits"
            )
        rng = np.random.default_rng(params["seed"])
        sample = (
            vectors
            if sample_size == count
            else vectors[np.sort(rng.choice(count, sample_size, replace=False))]
        )
        description = f"IVF{lists},PQ{subquantizers}x{bits}"
        if params["opq"]:
            description = f"OPQ{subquantizers}," + description
        index = faiss.index_factory(dim, description, self._metric())
        ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
        ivf.do_polysemous_training = False  # only serves Hamming pre-filtering, which is not used
        ivf.cp.seed = params["seed"]
        ivf.cp.min_points_per_centroid = 1
        ivf.pq.cp.seed = params["seed"] + 1
        ivf.pq.cp.min_points_per_centroid = 1
        with omp_threads(params["num_threads"]):
            index.train(np.ascontiguousarray(sample))
        self._index, self._ivf, self._dim = index, ivf, dim

    def add(self, vectors: np.ndarray) -> None:
        """Insert an (n, dim) batch of finite vectors as rows ``len(self) .. len(self) + n - 1``.

        The first call trains the index on (a sample of) its batch. With ``build_workers > 1`` and
        a large batch, shards are encoded in worker processes and their inverted lists merged.
        """
        array = prepare_vectors(check_vectors("vectors", vectors, self._dim), self._space)
        count = array.shape[0]
        if count == 0:
            return
        if self._index is None:
            self._train(array)
        first = self._rows.total
        # A file's params never choose more processes than this machine lets the process use.
        workers = min(usable_threads(self._params["build_workers"]), count // MIN_ROWS_PER_WORKER)
        if workers > 1:
            self._add_parallel(array, first, workers)
        else:
            with omp_threads(self._params["num_threads"]):
                self._index.add_with_ids(array, np.arange(first, first + count, dtype=np.int64))
        if self._params["keep_vectors"]:
            self._keep(array)
        self._rows.append(count)

    def _add_parallel(self, array: np.ndarray, first: int, workers: int) -> None:
        """Encode ``array`` in ``workers`` processes (train once, add shards, merge the inverted lists)."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import shared_memory

        empty = faiss.clone_index(self._index)
        empty.reset()
        trained = bytes(faiss.serialize_index(empty))
        del empty
        count = array.shape[0]
        block = shared_memory.SharedMemory(create=True, size=array.nbytes)
        try:
            np.ndarray(array.shape, dtype=np.float32, buffer=block.buf)[:] = array
            bounds = np.linspace(0, count, workers + 1).astype(int)
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                futures = [
                    pool.submit(_add_shard_shared, trained, block.name, array.shape, int(a), int(b))
                    for a, b in itertools.pairwise(bounds)
                ]
                shards = [future.result() for future in futures]
        finally:
            block.close()
            block.unlink()
        if self._ivf.direct_map.type != faiss.DirectMap.NoMap:
            self._ivf.set_direct_map_type(faiss.DirectMap.NoMap)  # faiss merges only without one
        for data in shards:
            shard = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8).copy())
            # The shard's ids count from the start of the batch; merge_from shifts them to the index's ids.
            self._ivf.merge_from(faiss.extract_index_ivf(shard), first)
            del shard

    def _keep(self, array: np.ndarray) -> None:
        """Append ``array`` to the exact copy (grown geometrically, like the exact index)."""
        if self._kept.shape[1] != array.shape[1]:
            self._kept = np.zeros((0, array.shape[1]), dtype=self._kept.dtype)
        needed = self._kept_size + array.shape[0]
        if needed > self._kept.shape[0]:
            grown = np.empty(
                (max(needed, 2 * self._kept.shape[0], 16), array.shape[1]), dtype=self._kept.dtype
            )
            grown[: self._kept_size] = self._kept[: self._kept_size]
            self._kept = grown
        self._kept[self._kept_size : needed] = array
        self._kept_size = needed

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
        array = check_vectors("queries", queries, self._dim)
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
            return self._rerank(array, ids, k)
        scores = scores.astype(np.float32, copy=False)
        if self._space != "l2":
            np.subtract(1.0, scores, out=scores)
        if k > 1 and (scores[:, 1:] == scores[:, :-1]).any():
            order = np.lexsort((ids, scores), axis=1)
            ids, scores = np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)
        return ids, scores

    def _rerank(self, queries: np.ndarray, candidates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Re-score each query's candidate rows with the kept exact vectors; keep the best ``k``."""
        count, width = candidates.shape
        ids = np.empty((count, k), dtype=np.int64)
        scores = np.empty((count, k), dtype=np.float32)
        step = max(1, (1 << 22) // max(1, width * queries.shape[1]))
        for start in range(0, count, step):
            rows = candidates[start : start + step]
            block = np.asarray(self._kept[rows], dtype=np.float32)  # (b, width, dim)
            query = queries[start : start + step]
            if self._space == "l2":
                difference = block - query[:, None, :]
                distances = np.einsum("bwd,bwd->bw", difference, difference)
            else:
                distances = 1.0 - np.einsum("bwd,bd->bw", block, query)
            # Order by (distance, row): sort the candidates by row first, then take the k smallest stably.
            by_row = np.argsort(rows, axis=1, kind="stable")
            rows = np.take_along_axis(rows, by_row, axis=1)
            distances = np.take_along_axis(distances, by_row, axis=1).astype(np.float32, copy=False)
            chosen, values = top_k_smallest(distances, k)
            ids[start : start + step] = np.take_along_axis(rows, chosen, axis=1)
            scores[start : start + step] = values
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
        arrays: dict[str, np.ndarray] = {"live": self._rows.internal}
        if self._index is not None:
            index = self._index
            if self._ivf.direct_map.type != faiss.DirectMap.NoMap:
                # The lookup table built for reconstruct is rebuilt on demand: write the index without it.
                index = faiss.clone_index(self._index)
                faiss.extract_index_ivf(index).set_direct_map_type(faiss.DirectMap.NoMap)
            arrays["faiss"] = serialize(index)
        if self._params["keep_vectors"] and self._dim is not None:
            kept = np.ascontiguousarray(self._kept[: self._kept_size])
            arrays["kept"] = kept if kept.dtype == np.float32 else kept.view(np.uint8)
        meta = {"space": self._space, "dim": self._dim, "params": self.params(), "total": self._rows.total}
        return _serial.pack("ivfpq", meta, arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> IvfPqIndex:
        """Rebuild an index written by :meth:`to_bytes`; raise ValueError on corrupt or mismatched data."""
        meta, arrays = _serial.unpack(data, "ivfpq")
        space, dim, params, total = meta.get("space"), meta.get("dim"), meta.get("params"), meta.get("total")
        if space not in SPACES or not isinstance(params, dict) or not isinstance(total, int) or total < 0:
            raise ValueError("serialised ivfpq index has a corrupt header")
        try:
            index = cls(space, **params)
        except (TypeError, ValueError) as error:
            raise ValueError(f"serialised ivfpq index has invalid parameters: {error}") from error
        live = arrays.get("live")
        if live is None or live.dtype != np.int64 or live.ndim != 1:
            raise ValueError("serialised ivfpq index lacks its 'live' row array")
        if "faiss" not in arrays:
            if dim is not None or total != 0 or live.size or "kept" in arrays:
                raise ValueError("serialised ivfpq index lacks its faiss index")
            return index
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise ValueError(f"serialised ivfpq index has an invalid dimension {dim!r}")
        if live.size and (live[0] < 0 or live[-1] >= total or (np.diff(live) <= 0).any()):
            raise ValueError("serialised ivfpq index has an invalid 'live' row array")
        loaded = deserialize(arrays["faiss"], "ivfpq index", id_limit=total)
        index._check_loaded(loaded, int(dim), live)
        index._index, index._ivf, index._dim = (
            loaded,
            faiss.downcast_index(faiss.extract_index_ivf(loaded)),
            int(dim),
        )
        restore_precomputed_table(loaded, len(data))
        index._rows = LiveRows(live, int(total))
        if index._params["keep_vectors"]:
            index._load_kept(arrays.get("kept"), int(dim), live.size)
        elif "kept" in arrays:
            raise ValueError("serialised ivfpq index holds kept vectors but keep_vectors is False")
        return index

    def _check_loaded(self, loaded: Any, dim: int, live: np.ndarray) -> None:
        """Check that a deserialised faiss index has the type, shape and ids this index's header says."""
        if self._params["opq"]:
            # The OPQ rotation comes back as a LinearTransform (OPQMatrix is one): a square rotation.
            rotation = (
                faiss.downcast_VectorTransform(loaded.chain.at(0))
                if isinstance(loaded, faiss.IndexPreTransform) and loaded.chain.size() == 1
                else None
            )
            ok = (
                isinstance(rotation, faiss.LinearTransform)
                and rotation.d_in == dim
                and rotation.d_out == dim
                and bool(rotation.is_trained)
            )
            inner = faiss.downcast_index(loaded.index) if ok else None
        else:
            ok, inner = True, loaded
        if not ok or not isinstance(inner, faiss.IndexIVFPQ):
            raise ValueError("serialised ivfpq index holds a faiss index of the wrong type")
        params = self._params
        if (
            int(loaded.metric_type) != self._metric()
            or loaded.d != dim
            or not loaded.is_trained
            or inner.nlist != params["lists"]
            or inner.pq.nbits != params["bits"]
            or (params["subquantizers"] is not None and inner.pq.M != params["subquantizers"])
        ):
            raise ValueError("serialised ivfpq index header does not match its faiss index")
        if inner.ntotal != live.size or not np.array_equal(np.sort(_list_ids(inner)), live):
            raise ValueError(
                "serialised ivfpq index: the ids in its inverted lists do not match its live rows"
            )

    def _load_kept(self, kept: np.ndarray | None, dim: int, count: int) -> None:
        dtype = np.dtype(self._params["vector_dtype"])
        if kept is not None and dtype == np.float16 and kept.dtype == np.uint8 and kept.ndim == 2:
            kept = kept.view("<f2") if kept.shape[1] == 2 * dim else None
        if kept is None or kept.dtype != dtype or kept.shape != (count, dim):
            raise ValueError(f"serialised ivfpq index lacks its kept ({count}, {dim}) {dtype} vectors")
        if not np.isfinite(kept).all():
            raise ValueError("serialised ivfpq index holds non-finite kept vectors")
        self._kept = np.ascontiguousarray(kept)
        self._kept_size = count
