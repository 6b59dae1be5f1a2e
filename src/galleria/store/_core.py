"""The state every gallery store holds, and the read-only views and lookups over it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from galleria._validation import check_labels_root, check_path_list
from galleria.distances import prepare_vectors
from galleria.index import SearchIndex
from galleria.store._checks import describe_paths
from galleria.store._embedding import embed_files
from galleria.store._paths import PathTable
from galleria.store._rwlock import ReadWriteLock
from galleria.store._state import OfflineDiffusion

if TYPE_CHECKING:
    from galleria.store.candidate import Candidate

__all__ = ["StoreCore"]


class StoreCore:
    """The fields of :class:`~galleria.InMemoryImageEmbeddingStore` and what only reads them.

    Retrieval (:mod:`galleria.store._retrieval`) and mutation (:mod:`galleria.store._mutation`)
    build on it; the public class (:mod:`galleria.store.store`) adds construction and persistence.
    """

    _index: SearchIndex
    _embedder: Any
    _pending: list[str]  # paths build_store will read
    _paths: PathTable  # gallery paths in row order, with path -> row lookup (replaced, never changed)
    _vectors: np.ndarray | None  # a copy, kept only when the index cannot reconstruct
    _skipped: list[str]
    _built: bool
    _augmentation: dict[str, Any] | None  # set by galleria.rerank.dba.augment_store
    _query_transform: Any  # galleria.rerank.normalise.QueryTransform of a normalised view, or None
    _offline_diffusion: OfflineDiffusion | None  # set by galleria.rerank.decoupled; None once rows change
    _rerank_statistics: Any  # galleria.rerank.adaptive.GalleryStatistics, or None until computed
    _labels_root: str | None  # the folder the labels were drawn from at build, if recorded
    _pixel_digests: np.ndarray | None  # (n, 8) uint8 digests of the decoded pixels; zero rows unknown
    _extensions: dict[str, Any]  # other extension records of its file (store.extensions); {} once rows change
    _skip_errors: bool
    _num_workers: int
    _num_prefetch_batches: int
    _embed_pace: list[float]  # seconds per image of the last embedding, for the progress's pace
    _lock: ReadWriteLock
    _id: str

    def _init_state(self, index: SearchIndex, embedder: Any) -> None:
        self._index = index
        self._embedder = embedder
        self._pending = []
        self._paths = PathTable.from_paths([])
        self._vectors = None
        self._skipped = []
        self._built = False
        self._augmentation = None
        self._query_transform = None
        self._offline_diffusion = None
        self._rerank_statistics = None
        self._labels_root = None
        self._pixel_digests = None
        self._extensions = {}
        self._skip_errors = False
        self._num_workers = 4
        self._num_prefetch_batches = 4
        self._embed_pace = []
        self._lock = ReadWriteLock()
        self._id = uuid.uuid4().hex

    def _set_gallery(self, paths: Sequence[str], vectors: np.ndarray | None) -> None:
        """Adopt ``paths`` (the filled index's row order); keep ``vectors`` if the index can't give them."""
        self._paths = paths if isinstance(paths, PathTable) else PathTable.from_paths(paths)
        if vectors is not None and not self._index.can_reconstruct:
            stored = prepare_vectors(vectors, self._index.space)
            # Never a view of the caller's array: changing it later must not change the store.
            self._vectors = stored.copy() if np.shares_memory(stored, vectors) else stored
        self._pending = []
        self._built = True

    def _embed_files(
        self,
        paths: list[str],
        progress: bool,
        description: str,
        skip_errors: bool | None = None,
        on_images: Any = None,
        digests: list[bytes] | None = None,
    ) -> tuple[list[str], np.ndarray, list[str]]:
        """Decode and embed ``paths``; return the paths kept, their (n, d) vectors and the paths skipped
        (``digests`` receives the kept images' pixel digests)."""
        return embed_files(
            paths,
            self._embedder,
            self.dim,
            self._index.space,
            num_workers=self._num_workers,
            num_prefetch_batches=self._num_prefetch_batches,
            skip_errors=self._skip_errors if skip_errors is None else skip_errors,
            progress=progress,
            description=description,
            on_images=on_images,
            pace=self._embed_pace,
            digests=digests,
        )

    # ------------------------------------------------------------------ read-only views

    @property
    def embedder(self) -> Any:
        """The embedder (None for a store made from vectors without one)."""
        return self._embedder

    @property
    def store_id(self) -> str:
        """This store object's identity, carried by the candidates it returns (a re-ranker bound to
        another store refuses them)."""
        return self._id

    @property
    def search_index(self) -> SearchIndex:
        """The search index object (``ExactIndex``, ``HnswIndex`` or ``ExternalSearchIndex``)."""
        return self._index

    @property
    def space(self) -> str:
        """The distance space: ``"cosine"``, ``"ip"`` or ``"l2"``."""
        return self._index.space

    @property
    def dim(self) -> int | None:
        """The vector dimension, or None before anything was embedded."""
        if self._index.dim is not None:
            return self._index.dim
        return None if self._vectors is None else int(self._vectors.shape[1])

    @property
    def pixel_digests(self) -> np.ndarray | None:
        """(n, 8) uint8 digests of each gallery image's decoded pixels, in row order (a copy), recorded
        when the images were read (:func:`~galleria.store._embedding.pixel_digest`); an all-zero row
        is an image whose pixels were never read here (vectors given by the caller). None when no
        row has one. Equal digests mean the same pixels: ``galleria duplicates`` groups them."""
        with self._lock.reading():
            digests = self._pixel_digests
            if digests is None or len(digests) != len(self._paths):
                return None
            copy: np.ndarray = digests.copy()
            return copy

    def _digest_rows(self, digests: list[bytes], count: int) -> np.ndarray:
        """``digests`` (``count`` of them, or none) as an (count, 8) uint8 array (zeros: unknown)."""
        if len(digests) != count:
            return np.zeros((count, 8), dtype=np.uint8)
        rows: np.ndarray = np.frombuffer(b"".join(digests), dtype=np.uint8).reshape(count, 8).copy()
        return rows

    @property
    def labels_root(self) -> str | None:
        """The folder the gallery's labels are drawn from (each image's label is its first folder
        under it), recorded when the store was built from a labelled folder; None if not recorded.

        ``galleria evaluate`` and ``tune`` refuse to score a store whose paths have left it (for
        example after ``galleria add`` of an outside folder), instead of drawing labels from a
        common folder that moved up a level. Setting it checks that it is an absolute path without
        control characters; it is saved with the store.
        """
        return self._labels_root

    @labels_root.setter
    def labels_root(self, value: str | os.PathLike[str] | None) -> None:
        self._labels_root = None if value is None else check_labels_root("labels_root", value)

    @property
    def augmentation(self) -> dict[str, Any] | None:
        """How the stored vectors were augmented (``{"method": "dba", ...}``); None for plain ones."""
        return None if self._augmentation is None else dict(self._augmentation)

    @property
    def vector_transform(self) -> dict[str, Any] | None:
        """``{"vector_power": p, "centre": bool}`` for a normalised view
        (:func:`galleria.rerank.normalise.normalised_store`), which applies them to every query and
        is read-only; None for a store of its own."""
        return None if self._query_transform is None else dict(self._query_transform.record())

    def _require_own(self, action: str) -> None:
        """Refuse ``action`` on a normalised view: its rows are the original store's, transformed."""
        if self._query_transform is not None:
            raise ValueError(
                f"cannot {action}: this store is a read-only normalised view ({self.vector_transform}) of "
                "another store; change or save the original store"
            )

    @property
    def is_built(self) -> bool:
        """Whether the gallery has been embedded and indexed."""
        return self._built

    @property
    def paths(self) -> list[str]:
        """The gallery paths in row order (a copy; empty before the store is built)."""
        return list(self._paths)

    @property
    def skipped(self) -> list[str]:
        """Paths left out because they could not be read (``skip_errors=True``)."""
        return list(self._skipped)

    def __len__(self) -> int:
        """Number of gallery images in the store (0 before it is built)."""
        return len(self._paths)

    def __contains__(self, path: object) -> bool:
        """Whether ``path`` (str or os.PathLike) is in the gallery; O(log n)."""
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, str):
            return False
        rows = self._paths
        return path in rows or (bool(path) and os.path.abspath(path) in rows)

    def __repr__(self) -> str:
        state = f"{len(self)} images" if self._built else f"unbuilt, {len(self._pending)} paths"
        return f"InMemoryImageEmbeddingStore({state}, index={self._index.name!r}, space={self.space!r})"

    @property
    def embeddings(self) -> np.ndarray:
        """The (len(store), d) float32 gallery vectors in row order, as stored (unit rows for cosine).

        Raises
        ------
        RuntimeError
            If the store is not built, or its index cannot give vectors back and the store holds none.
        """
        self._require_built()
        with self._lock.reading():
            return self._gallery_vectors(np.arange(len(self._paths), dtype=np.int64))

    def embeddings_of(self, paths: Sequence[str | os.PathLike[str]]) -> np.ndarray:
        """The stored vectors of ``paths``, one row per path in the order given (float32).

        Raises
        ------
        KeyError
            Naming the paths that are not in the store.
        RuntimeError
            As for :attr:`embeddings`.
        """
        self._require_built()
        wanted = check_path_list("paths", paths, allow_empty=True)
        with self._lock.reading():
            return self._gallery_vectors(self._rows_of(wanted))

    def _rows_of(self, paths: list[str]) -> np.ndarray:
        table = self._paths
        rows = table.rows_of(paths)
        unknown = []
        for number in np.flatnonzero(rows < 0).tolist():  # the relative spelling of an absolute gallery path
            path = paths[number]
            row = table.row(os.path.abspath(path)) if path else None
            if row is None:
                unknown.append(path)
            else:
                rows[number] = row
        if unknown:
            raise KeyError(f"{len(unknown)} path(s) not in the store: {describe_paths(unknown)}")
        return rows

    def _candidate_rows(self, candidates: Sequence[Candidate]) -> np.ndarray:
        """The rows of checked candidates (call it holding the reading lock): the row a candidate
        carries when this store's current path table placed it, else its path's (KeyError naming
        the paths that are not in the store)."""
        token = self._paths.token
        places = np.array([candidate._where for candidate in candidates], dtype=np.int64).reshape(-1, 2)
        rows: np.ndarray = places[:, 1].copy()
        stale = np.flatnonzero(places[:, 0] != token)
        if stale.size:  # made by hand, or retrieved before the gallery changed
            rows[stale] = self._rows_of([candidates[number].path for number in stale.tolist()])
        return rows

    def _gallery_vectors(self, rows: np.ndarray) -> np.ndarray:
        if self._vectors is not None:
            return np.asarray(self._vectors[rows])
        if self._index.can_reconstruct:
            if len(rows) == 0:
                return np.zeros((0, self.dim or 0), dtype=np.float32)
            return np.asarray(self._index.reconstruct(rows), dtype=np.float32)
        raise RuntimeError(
            f"the gallery vectors are not available: the {self._index.name!r} index cannot reconstruct "
            "them and the store holds no copy (load the store from a file saved with vectors=, or "
            "build it from the images)"
        )

    def _require_built(self) -> None:
        if not self._built:
            raise RuntimeError("the store is not built yet; call build_store() first")

    def _require_embedder(self, what: str) -> Any:
        if self._embedder is None:
            raise RuntimeError(
                f"this store has no embedder, so it cannot embed {what}; pass embedder= when creating or "
                "loading it, or use retrieve_by_vector"
            )
        return self._embedder
