"""Approximate search on a faiss HNSW graph, with parameters named for what they do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np

from galleria._declare import Component
from galleria._interrupts import deferred_interrupts
from galleria._params import Param
from galleria._validation import check_choice, is_int
from galleria.distances import prepare_vectors
from galleria.index import _serial
from galleria.index._checks import check_k, check_rows, check_vectors, empty_result
from galleria.index._faiss import FaissPart, LiveRows, deserialize, omp_threads
from galleria.index.base import SPACES
from galleria.index.exact import exact_search

__all__ = ["HNSW_PARAMETERS", "HnswIndex", "HnswParameter", "validate_hnsw_params"]


@dataclass(frozen=True)
class HnswParameter:
    """One tunable of :class:`HnswIndex`: its default, allowed integer range and meaning."""

    default: int | None
    minimum: int
    maximum: int
    meaning: str
    optional: bool = False

    def check(self, name: str, value: Any) -> int | None:
        """Return ``value`` as an int in range (or None where allowed), else raise naming ``name``."""
        if value is None and self.optional:
            return None
        if not is_int(value):
            allowed = "an integer" + (" or None" if self.optional else "")
            kind = type(value).__name__
            raise TypeError(f"index parameter {name!r} must be {allowed}, got {value!r} ({kind})")
        if not self.minimum <= value <= self.maximum:
            raise ValueError(
                f"index parameter {name!r} must lie in [{self.minimum}, {self.maximum}], got {value!r}"
            )
        return int(value)


#: The parameters of :class:`HnswIndex` (name → default, range, meaning); nothing else is accepted.
HNSW_PARAMETERS: dict[str, HnswParameter] = {
    "graph_degree": HnswParameter(
        16, 2, 512, "links kept per node (faiss M): higher gives better recall, more memory and slower builds"
    ),
    "build_candidates": HnswParameter(
        200, 1, 1 << 16, "candidates examined per insertion (efConstruction): higher builds a better graph"
    ),
    "search_candidates": HnswParameter(
        64, 1, 1 << 16, "candidates examined per query (efSearch, at least k): higher recall, slower"
    ),
    "num_threads": HnswParameter(
        None, 1, 4096, "OpenMP threads faiss uses while adding and searching (None: faiss's default)", True
    ),
}


def validate_hnsw_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check HNSW parameters against :data:`HNSW_PARAMETERS`; return all of them, defaults filled in.

    Examples
    --------
    >>> validate_hnsw_params({"graph_degree": 32})["graph_degree"]
    32
    """
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise TypeError(f"index_params must be a mapping of names to values, got {type(params).__name__}")
    unknown = sorted(str(key) for key in params if key not in HNSW_PARAMETERS)
    if unknown:
        valid = sorted(HNSW_PARAMETERS)
        raise ValueError(f"unknown hnsw index parameter(s) {unknown}; valid names are {valid}")
    return {
        name: spec.check(name, params[name]) if name in params else spec.default
        for name, spec in HNSW_PARAMETERS.items()
    }


class HnswIndex:
    """Approximate nearest-neighbour search on a faiss ``IndexHNSWFlat`` graph.

    Cosine and inner-product spaces use faiss's inner-product metric (distance ``1 - <q, v>``, the
    vectors L2-normalised first for cosine); l2 uses squared Euclidean distance. Each search
    examines ``max(search_candidates, k)`` candidates, passed per call, so the graph's own setting
    never changes. faiss HNSW cannot delete, so removed rows are masked (searches skip them) and the
    graph is rebuilt from the live vectors once more than :attr:`compact_fraction` of it is masked.

    Parameters
    ----------
    space : {"cosine", "ip", "l2"}
        Distance space.
    graph_degree, build_candidates, search_candidates, num_threads
        See :data:`HNSW_PARAMETERS` for their meaning and ranges.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> index = HnswIndex("cosine", graph_degree=8)
    >>> index.add(rng.normal(size=(100, 16)).astype(np.float32))
    >>> ids, scores = index.search(index.reconstruct(np.array([7])), k=1)
    >>> int(ids[0, 0])
    7
    """

    name = "hnsw"
    #: Scores are distances: lower is better.
    higher_is_better = False
    #: Share of masked rows above which :meth:`remove` rebuilds the graph from the live vectors.
    compact_fraction = 0.25

    def __init__(
        self,
        space: str = "cosine",
        *,
        graph_degree: int = 16,
        build_candidates: int = 200,
        search_candidates: int = 64,
        num_threads: int | None = None,
    ) -> None:
        self._space = check_choice("space", space, SPACES)
        params = validate_hnsw_params(
            {
                "graph_degree": graph_degree,
                "build_candidates": build_candidates,
                "search_candidates": search_candidates,
                "num_threads": num_threads,
            }
        )
        self._graph_degree: int = params["graph_degree"]
        self._build_candidates: int = params["build_candidates"]
        self._search_candidates: int = params["search_candidates"]
        self._num_threads: int | None = params["num_threads"]
        self._index: Any = None
        self._rows = LiveRows.identity(0)
        self._settings_cache: dict[int, Any] = {}

    def __repr__(self) -> str:
        settings = ", ".join(f"{key}={value!r}" for key, value in self.params().items())
        return f"HnswIndex(space={self._space!r}, {settings}, rows={len(self)})"

    @property
    def space(self) -> str:
        """The distance space: ``"cosine"``, ``"ip"`` or ``"l2"``."""
        return self._space

    @property
    def dim(self) -> int | None:
        """Vector dimension, or None before the first vectors are added."""
        return None if self._index is None else int(self._index.d)

    @property
    def can_reconstruct(self) -> bool:
        """Always True: the graph keeps the full vectors."""
        return True

    @property
    def faiss_index(self) -> Any:
        """The underlying ``faiss.IndexHNSWFlat`` (None before the first add); masked rows included."""
        return self._index

    @property
    def removed_count(self) -> int:
        """Rows removed but still held (masked) inside the faiss graph."""
        return self._rows.removed

    def __len__(self) -> int:
        return int(self._rows.internal.size)

    def params(self) -> dict[str, Any]:
        """The construction parameters, JSON-able."""
        return {
            "graph_degree": self._graph_degree,
            "build_candidates": self._build_candidates,
            "search_candidates": self._search_candidates,
            "num_threads": self._num_threads,
        }

    def _new_faiss_index(self, dim: int) -> Any:
        metric = faiss.METRIC_L2 if self._space == "l2" else faiss.METRIC_INNER_PRODUCT
        index = faiss.IndexHNSWFlat(dim, self._graph_degree, metric)
        index.hnsw.efConstruction = self._build_candidates
        index.hnsw.efSearch = self._search_candidates
        return index

    def add(self, vectors: np.ndarray) -> None:
        """Insert an (n, dim) batch of finite vectors as rows ``len(self) .. len(self) + n - 1``."""
        array = prepare_vectors(check_vectors("vectors", vectors, self.dim, self.space), self._space)
        if self._index is None:
            self._index = self._new_faiss_index(array.shape[1])
        # The graph and the row bookkeeping change together: Ctrl-C (which faiss also checks
        # inside its own loop) is held back until both have.
        with deferred_interrupts(), omp_threads(self._num_threads):
            self._index.add(array)
            self._rows.append(array.shape[0])

    def _search_settings(self, width: int) -> Any:
        """Per-call faiss search parameters (cached per width while no row is masked)."""
        if self._rows.removed:
            settings = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
            settings.efSearch = width
            settings.sel = self._rows.selector()
            return settings
        cached = self._settings_cache.get(width)
        if cached is None:
            if len(self._settings_cache) > 64:
                self._settings_cache.clear()
            cached = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
            cached.efSearch = width
            self._settings_cache[width] = cached
        return cached

    def search(
        self, queries: np.ndarray, k: int, *, search_candidates: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return the approximate ``k`` nearest rows of each query: (q, min(k, len)) ids and distances.

        ``search_candidates`` overrides the index's setting for this call only (the width used is
        still at least ``k``). Ties in distance among the returned rows are ordered by row.
        """
        k = check_k(k)
        width = self._search_candidates
        if search_candidates is not None:
            checked = HNSW_PARAMETERS["search_candidates"].check("search_candidates", search_candidates)
            assert checked is not None
            width = checked
        array = check_vectors("queries", queries, self.dim, self.space)
        live = len(self)
        if live == 0:
            return empty_result(array.shape[0])
        if self._space == "cosine":
            array = prepare_vectors(array, "cosine")
        k = min(k, live)
        settings = self._search_settings(max(width, k))
        if self._num_threads is None:
            scores, labels = self._index.search(array, k, params=settings)
        else:
            with omp_threads(self._num_threads):
                scores, labels = self._index.search(array, k, params=settings)
        ids = self._rows.to_positions(labels)
        if self._space != "l2":
            np.subtract(1.0, scores, out=scores)
        if self._space != "ip":  # cosine and squared l2 distances are never negative
            np.maximum(scores, 0.0, out=scores)
        if (ids < 0).any():
            # The graph walk found fewer than k live rows (tiny or heavily masked graphs): answer exactly.
            missing = np.flatnonzero((ids < 0).any(axis=1))
            gallery = self._index.reconstruct_batch(self._rows.internal)
            ids[missing], scores[missing] = exact_search(gallery, array[missing], k, self._space)
        if k > 1 and (scores[:, 1:] == scores[:, :-1]).any():
            # Rows come sorted by distance; order equal distances by row.
            order = np.lexsort((ids, scores), axis=1)
            ids, scores = np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)
        return ids, scores

    def reconstruct(self, rows: np.ndarray) -> np.ndarray:
        """Return the stored vectors of the given rows (normalised for cosine), shape (len(rows), dim)."""
        ids = check_rows(rows, len(self))
        if ids.size == 0:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        return np.asarray(self._index.reconstruct_batch(self._rows.internal[ids]), dtype=np.float32)

    def remove(self, rows: np.ndarray) -> None:
        """Delete the given rows (duplicates count once); the rest are renumbered compactly, order kept."""
        ids = check_rows(rows, len(self))
        if ids.size == 0:
            return
        self._rows.remove(ids)
        if self._rows.removed > self.compact_fraction * self._rows.total:
            self.compact()

    def compact(self) -> None:
        """Rebuild the graph from the live vectors only, dropping masked rows (row ids are unchanged)."""
        if self._index is None or self._rows.removed == 0:
            return
        live = self._index.reconstruct_batch(self._rows.internal) if len(self) else None
        rebuilt = self._new_faiss_index(int(self._index.d))
        if live is not None:
            with omp_threads(self._num_threads):
                rebuilt.add(live)
        self._index = rebuilt
        self._rows = LiveRows.identity(int(rebuilt.ntotal))

    def packed(self) -> _serial.Packed:
        """What :meth:`to_bytes` returns, as parts written without joining them (the graph streamed)."""
        arrays: dict[str, np.ndarray | _serial.Streamed] = {"live": self._rows.internal}
        if self._index is not None and int(self._index.ntotal) != self._rows.total:
            raise RuntimeError(
                f"the hnsw graph holds {int(self._index.ntotal)} vectors but its row table "
                f"{self._rows.total}; refusing to write an index that would not load"
            )
        if self._index is not None:
            arrays["graph"] = FaissPart(self._index)
        meta = {"space": self._space, "dim": self.dim, "params": self.params(), "total": self._rows.total}
        return _serial.pack_parts("hnsw", meta, arrays)

    def to_bytes(self) -> bytes:
        """Serialise the index with its graph (faiss's binary format inside a JSON-headed container)."""
        return self.packed().to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes | _serial.Unpacked) -> HnswIndex:
        """Rebuild an index written by :meth:`to_bytes`, graph included; ValueError if corrupt."""
        meta, arrays = _serial.unpack(data, "hnsw")
        space, dim, params, total = meta.get("space"), meta.get("dim"), meta.get("params"), meta.get("total")
        if space not in SPACES or not isinstance(params, dict) or not is_int(total):
            raise ValueError("serialised hnsw index has a corrupt header")
        try:
            index = cls(space, **params)
        except (TypeError, ValueError) as error:
            raise ValueError(f"serialised hnsw index has invalid parameters: {error}") from error
        live = arrays.get("live")
        if live is None or live.dtype != np.int64 or live.ndim != 1:
            raise ValueError("serialised hnsw index lacks its 'live' row array")
        if "graph" not in arrays:
            if dim is not None or total != 0 or live.size:
                raise ValueError("serialised hnsw index lacks its graph")
            return index
        graph = deserialize(arrays["graph"], "hnsw index")
        expected_metric = faiss.METRIC_L2 if space == "l2" else faiss.METRIC_INNER_PRODUCT
        if not isinstance(graph, faiss.IndexHNSWFlat) or graph.metric_type != expected_metric:
            raise ValueError("serialised hnsw index holds a faiss index of the wrong type or metric")
        if graph.d != dim or graph.ntotal != total:
            raise ValueError("serialised hnsw index header does not match its graph")
        if live.size and (live[0] < 0 or live[-1] >= total or (np.diff(live) <= 0).any()):
            raise ValueError("serialised hnsw index has an invalid 'live' row array")
        index._index = graph
        index._rows = LiveRows(live, int(total))
        return index


#: The declaration of the HNSW index (:mod:`galleria._declare`), its parameters those of
#: :data:`HNSW_PARAMETERS` (whose own check, :func:`validate_hnsw_params`, the registry calls).
COMPONENT = Component(
    kind="index",
    name="hnsw",
    summary="faiss HNSW graph: approximate, fast to search, no training",
    params=tuple(
        Param(name, int, spec.default, spec.minimum, spec.maximum, optional=spec.optional, help=spec.meaning)
        for name, spec in HNSW_PARAMETERS.items()
    ),
    build=HnswIndex,
    order=10,
    extra={
        "creatable": True,
        "validate": validate_hnsw_params,
        "from_bytes": HnswIndex.from_bytes,
        "faiss_blobs": frozenset({"graph"}),
    },
)
