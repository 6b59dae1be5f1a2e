"""The in-memory gallery store: image paths, their embeddings, and a search index over them."""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from galleria._validation import check_bool, check_path_list, check_positive_int
from galleria.distances import prepare_vectors
from galleria.embedders.base import batch_size_of
from galleria.expansion import alpha_query_expansion
from galleria.index import SearchIndex
from galleria.store._checks import (
    absolute_paths,
    check_embedder,
    check_query_vectors,
    check_retrieval_args,
    describe_paths,
    drop_duplicates,
    resolve_index,
)
from galleria.store._embedding import check_directions, embed_files, embed_queries
from galleria.store._rwlock import ReadWriteLock
from galleria.store._state import GalleryState
from galleria.store.candidate import Candidate
from galleria.store.queries import as_image_list, as_text_list
from galleria.store.reading import reader_for

__all__ = ["InMemoryImageEmbeddingStore"]

#: Queries expanded together in one αQE block (bounds the (q, m, d) neighbour array).
_EXPANSION_BLOCK = 256


class InMemoryImageEmbeddingStore:
    """Embed a gallery of image files once, then search it by image, text or vector.

    Parameters
    ----------
    image_paths : sequence of str or os.PathLike
        The gallery's image files. Duplicates are dropped (first kept) with a warning. Nothing is
        read until :meth:`build_store`.
    embedder : object with ``embed(images) -> (n, d)``
        Turns RGB uint8 images into vectors (e.g. :class:`~galleria.PixelEmbedder`,
        :class:`~galleria.ClipEmbedder`). Its optional ``batch_size`` sets the batch size.
    search_index : None, ``"exact"``, ``"hnsw"`` or a SearchIndex object
        ``None`` means ``"exact"``. A name creates a fresh index in ``space`` with
        ``index_params``. An index object (such as :class:`~galleria.ExternalSearchIndex`) is
        used as it is; it must be empty, and its space is its own.
    space : {"cosine", "ip", "l2"} or None
        The distance space of a named index (``None`` means ``"cosine"``). With an index object,
        ``None`` takes the object's space, and any other value must agree with it.
    index_params : dict, optional
        Parameters of a named index (for ``"hnsw"``: ``graph_degree``, ``build_candidates``,
        ``search_candidates``, ``num_threads``); checked here, before any image is read.
    skip_errors : bool
        If True, unreadable images are skipped with a warning and listed in :attr:`skipped`;
        if False (the default) the first one raises :class:`~galleria.store.ImageReadError`.
    num_workers : int
        Threads decoding images while the embedder works.
    num_prefetch_batches : int
        At most this many batches are decoded ahead of the embedder.

    Raises
    ------
    TypeError, ValueError
        For any invalid argument, before anything is read.

    Notes
    -----
    Scores of the built-in indexes are distances (lower is better): ``1 - cos`` for cosine
    (vectors stored L2-normalised), ``1 - <q, v>`` for ip, squared Euclidean for l2. An external
    index keeps its own scores.

    Where the index cannot give vectors back (some external FAISS indexes), the store keeps a copy
    of the vectors it embedded or was given, so :attr:`embeddings`, query expansion and the
    re-ranker still work; a store loaded without such vectors raises RuntimeError there.

    Image paths are kept absolute (made so against the working directory when the store is
    created), so a store can be searched and its candidates read from any working directory;
    lookups (``path in store``, :meth:`embeddings_of`, :meth:`remove_images`) accept the relative
    spelling too. A gallery that moved with its store is re-anchored with ``load_from_disk(...,
    root=DIR)``. :meth:`from_embeddings` keeps its paths as given (they may be any identifiers).

    **Thread safety.** One store may be shared between threads. Readers — every ``retrieve_*``
    method, :attr:`embeddings`, :meth:`embeddings_of`, re-ranking through the store and
    :meth:`save_to_disk` — run concurrently; writers — :meth:`add_images` and
    :meth:`remove_images` — run alone, so a reader sees the gallery wholly before or wholly after
    each change. Every :class:`Candidate` carries the distance of its own path, and every file
    :meth:`save_to_disk` writes loads. Images are decoded and embedded outside the lock, so a long
    ``add_images`` blocks readers only while the index is updated. :meth:`build_store` must finish
    before the store is shared.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> from PIL import Image
    >>> from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
    >>> folder, rng = tempfile.mkdtemp(), np.random.default_rng(0)
    >>> paths = []
    >>> for i in range(3):
    ...     path = f"{folder}/{i}.png"
    ...     Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(path)
    ...     paths.append(path)
    >>> store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(), num_workers=2)
    >>> store.build_store(progress=False)
    >>> len(store), paths[1] in store
    (3, True)
    >>> [c.path for c in store.retrieve_top_k_similar(paths[2], k=1)[0]] == [paths[2]]
    True
    """

    _index: SearchIndex
    _embedder: Any
    _pending: list[str]  # paths build_store will read
    _paths: list[str]  # gallery paths in row order
    _rows: dict[str, int]  # path -> row
    _vectors: np.ndarray | None  # a copy, kept only when the index cannot reconstruct
    _skipped: list[str]
    _built: bool
    _augmentation: dict[str, Any] | None  # set by galleria.rerank.dba.augment_store
    _skip_errors: bool
    _num_workers: int
    _num_prefetch_batches: int
    _lock: ReadWriteLock
    _id: str

    def __init__(
        self,
        image_paths: Sequence[str | os.PathLike[str]],
        embedder: Any,
        search_index: str | SearchIndex | None = None,
        *,
        space: str | None = None,
        index_params: dict[str, Any] | None = None,
        skip_errors: bool = False,
        num_workers: int = 4,
        num_prefetch_batches: int = 4,
    ) -> None:
        paths = check_path_list("image_paths", image_paths)
        check_embedder(embedder, allow_none=False)
        skip = check_bool("skip_errors", skip_errors)
        workers = check_positive_int("num_workers", num_workers)
        prefetch = check_positive_int("num_prefetch_batches", num_prefetch_batches)
        index = resolve_index(search_index, space, index_params)
        if len(index) != 0:
            raise ValueError(
                f"search_index already holds {len(index)} vectors; pass an empty index, or use "
                "InMemoryImageEmbeddingStore.from_embeddings for vectors computed elsewhere"
            )
        self._init_state(index, embedder)
        self._pending = drop_duplicates(absolute_paths(paths), "image_paths")
        self._skip_errors = skip
        self._num_workers = workers
        self._num_prefetch_batches = prefetch

    def _init_state(self, index: SearchIndex, embedder: Any) -> None:
        self._index = index
        self._embedder = embedder
        self._pending = []
        self._paths = []
        self._rows = {}
        self._vectors = None
        self._skipped = []
        self._built = False
        self._augmentation = None
        self._skip_errors = False
        self._num_workers = 4
        self._num_prefetch_batches = 4
        self._lock = ReadWriteLock()
        self._id = uuid.uuid4().hex

    @classmethod
    def _from_state(cls, state: GalleryState) -> InMemoryImageEmbeddingStore:
        """The one internal constructor of a built store, from a validated :class:`GalleryState`."""
        store = cls.__new__(cls)
        store._init_state(state.index, state.embedder)
        store._skipped = list(state.skipped)
        store._augmentation = None if state.augmentation is None else dict(state.augmentation)
        store._set_gallery(state.paths, state.vectors)
        return store

    # ------------------------------------------------------------------ construction from vectors

    @classmethod
    def from_embeddings(
        cls,
        paths: Sequence[str | os.PathLike[str]],
        embeddings: Any,
        embedder: Any = None,
        search_index: str | SearchIndex | None = None,
        *,
        space: str | None = None,
        index_params: dict[str, Any] | None = None,
    ) -> InMemoryImageEmbeddingStore:
        """Make a built store over vectors computed elsewhere (clip-retrieval, a previous run).

        Parameters
        ----------
        paths : sequence of str or os.PathLike
            One path per row of ``embeddings``. A repeated path keeps its first row (warning).
        embeddings : array of shape (len(paths), d), or None
            The vectors. None only when ``search_index`` is an index object that already holds
            exactly ``len(paths)`` rows (it is then used as it is, row i being ``paths[i]``).
        embedder : object with ``embed``, optional
            Needed only for image (and, with ``embed_text``, text) queries; without it the store
            answers :meth:`retrieve_by_vector` only.
        search_index, space, index_params
            As in the constructor. An index object may be empty (the vectors are added to it) or
            already hold ``len(paths)`` rows. With such a filled index, ``embeddings`` must equal
            the rows it can give back (ValueError otherwise); where it cannot give them back,
            they are kept as the store's copy.

        Examples
        --------
        >>> import numpy as np
        >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2))
        >>> [(c.path, c.score) for c in store.retrieve_by_vector([2.0, 0.0], k=2)[0]]
        [('a', 0.0), ('b', 1.0)]
        """
        from galleria.store._from_vectors import state_from_embeddings

        return cls._from_state(
            state_from_embeddings(paths, embeddings, embedder, search_index, space, index_params)
        )

    def _set_gallery(self, paths: list[str], vectors: np.ndarray | None) -> None:
        """Adopt ``paths`` (the filled index's row order); keep ``vectors`` if the index can't give them."""
        self._paths = list(paths)
        self._rows = {path: row for row, path in enumerate(self._paths)}
        if vectors is not None and not self._index.can_reconstruct:
            stored = prepare_vectors(vectors, self._index.space)
            # Never a view of the caller's array: changing it later must not change the store.
            self._vectors = stored.copy() if np.shares_memory(stored, vectors) else stored
        self._pending = []
        self._built = True

    # ------------------------------------------------------------------ building

    def build_store(self, progress: bool = True) -> None:
        """Read, embed and index every gallery image (a no-op on a store that is already built).

        Images are decoded on ``num_workers`` threads, at most ``num_prefetch_batches`` batches
        ahead of the embedder, and embedded in order. Nothing is kept if any step fails: the
        store stays unbuilt.

        Parameters
        ----------
        progress : bool
            Show a tqdm progress bar (only when writing to a terminal).

        Raises
        ------
        ImageReadError
            An image could not be read (names the path), unless ``skip_errors=True``.
        ValueError
            The embedder returned the wrong shape, NaN, or a dimension other than the index's.

        Warns
        -----
        SkippedImageWarning
            For every image skipped (``skip_errors=True``; also a RuntimeWarning).
        RuntimeWarning
            When none could be read (the store is then built and empty).
        """
        progress = check_bool("progress", progress)
        if self._built:
            return
        paths, vectors, skipped = self._embed_files(self._pending, progress, "building gallery")
        with self._lock.writing():
            if self._built:
                return
            if paths:
                self._index.add(vectors)
            else:
                warnings.warn(
                    f"none of the {len(self._pending)} gallery images could be read; the store is empty",
                    RuntimeWarning,
                    stacklevel=2,
                )
            self._skipped = skipped
            self._set_gallery(paths, vectors)

    def _embed_files(
        self, paths: list[str], progress: bool, description: str, skip_errors: bool | None = None
    ) -> tuple[list[str], np.ndarray, list[str]]:
        """Decode and embed ``paths``; return the paths kept, their (n, d) vectors and the paths skipped."""
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
    def augmentation(self) -> dict[str, Any] | None:
        """How the stored vectors were augmented (``{"method": "dba", ...}``); None for plain ones."""
        return None if self._augmentation is None else dict(self._augmentation)

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
        """Whether ``path`` (str or os.PathLike) is in the gallery; O(1)."""
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, str):
            return False
        rows = self._rows
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
        rows = self._rows
        try:
            return np.fromiter((rows[path] for path in paths), dtype=np.int64, count=len(paths))
        except KeyError:
            pass
        found = []
        unknown = []
        for path in paths:  # the relative spelling of an absolute gallery path
            row = rows.get(path)
            if row is None and path:
                row = rows.get(os.path.abspath(path))
            if row is None:
                unknown.append(path)
            else:
                found.append(row)
        if unknown:
            raise KeyError(f"{len(unknown)} path(s) not in the store: {describe_paths(unknown)}")
        return np.asarray(found, dtype=np.int64)

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

    # ------------------------------------------------------------------ retrieval

    def retrieve_top_k_similar(
        self,
        queries: Any,
        k: int,
        *,
        query_expansion: bool = False,
        expansion_alpha: float = 3.0,
        expansion_neighbors: int = 50,
    ) -> list[list[Candidate]]:
        """Find the ``k`` gallery images nearest to each query image.

        Parameters
        ----------
        queries
            One image ((H, W, 3) uint8 array, PIL image or path), a list of them, or an
            (N, H, W, 3) uint8 array.
        k : int
            Results per query; above the gallery size the whole gallery is returned.
        query_expansion : bool
            Apply alpha query expansion (DESIGN.md §4) before the final search.
        expansion_alpha : float
            αQE exponent (finite, ≥ 0).
        expansion_neighbors : int
            Matches αQE reads back per query (fewer if the gallery is smaller).

        Returns
        -------
        list of list of Candidate
            One list per query, best first, no padding.

        Raises
        ------
        TypeError, ValueError
            Bad arguments; query arrays of the wrong dtype (TypeError) or shape (ValueError); an
            embedder output of the wrong shape, NaN, or another dimension (ValueError).
        RuntimeError
            The store is not built, or has no embedder.
        ImageReadError
            A query path cannot be read.
        """
        checked = check_retrieval_args(k, expansion_alpha, expansion_neighbors, query_expansion)
        self._require_built()
        embedder = self._require_embedder("query images")
        images = as_image_list(queries, reader=reader_for(embedder))
        vectors = self._embed_queries(embedder.embed, images, "query images")
        return self._search(vectors, *checked)

    def retrieve_by_vector(
        self,
        vectors: Any,
        k: int,
        *,
        query_expansion: bool = False,
        expansion_alpha: float = 3.0,
        expansion_neighbors: int = 50,
    ) -> list[list[Candidate]]:
        """Find the ``k`` gallery images nearest to each query vector.

        ``vectors`` is one (d,) vector or a (q, d) array in the store's embedding space; the other
        arguments and the result are as in :meth:`retrieve_top_k_similar`.
        """
        checked = check_retrieval_args(k, expansion_alpha, expansion_neighbors, query_expansion)
        self._require_built()
        queries = check_query_vectors("vectors", vectors, self.dim)
        check_directions(queries, self._index.space, "vectors")
        return self._search(queries, *checked)

    def retrieve_by_text(
        self,
        texts: str | Sequence[str],
        k: int,
        *,
        query_expansion: bool = False,
        expansion_alpha: float = 3.0,
        expansion_neighbors: int = 50,
    ) -> list[list[Candidate]]:
        """Find the ``k`` gallery images nearest to each text (needs an embedder with ``embed_text``).

        Raises
        ------
        TypeError
            The embedder has no text side, or ``texts`` is not a string / list of strings.
        """
        checked = check_retrieval_args(k, expansion_alpha, expansion_neighbors, query_expansion)
        self._require_built()
        embedder = self._require_embedder("texts")
        if not callable(getattr(embedder, "embed_text", None)):
            raise TypeError(f"the store's embedder ({type(embedder).__name__}) has no embed_text method")
        vectors = self._embed_queries(embedder.embed_text, as_text_list(texts), "texts")
        return self._search(vectors, *checked)

    def _embed_queries(self, embed: Any, items: list[Any], what: str) -> np.ndarray:
        batch = batch_size_of(self._embedder)
        return embed_queries(embed, items, batch, self.dim, self._index.space, what)

    def _search(
        self, queries: np.ndarray, k: int, alpha: float, neighbors: int, expand: bool
    ) -> list[list[Candidate]]:
        """Search (q, d) float32 queries, optionally after αQE, and turn rows into candidates."""
        with self._lock.reading():
            size = len(self._paths)
            if size == 0:
                return [[] for _ in range(len(queries))]
            if expand:
                queries = np.concatenate(
                    [
                        self._expand(queries[start : start + _EXPANSION_BLOCK], alpha, min(neighbors, size))
                        for start in range(0, len(queries), _EXPANSION_BLOCK)
                    ]
                )
            ids, scores = self._index.search(queries, k)
            paths = self._paths
        make, token = Candidate._from_store, self._id
        return [
            [make(paths[row], score, token) for row, score in zip(id_row, score_row, strict=True) if row >= 0]
            for id_row, score_row in zip(ids.tolist(), scores.tolist(), strict=True)
        ]

    def _expand(self, queries: np.ndarray, alpha: float, neighbors: int) -> np.ndarray:
        ids, _ = self._index.search(queries, neighbors)
        valid = ids >= 0
        padded = np.zeros((*ids.shape, queries.shape[1]), dtype=np.float32)
        padded[valid] = self._gallery_vectors(ids[valid])
        return alpha_query_expansion(queries, padded, alpha=alpha, mask=valid)

    # ------------------------------------------------------------------ changing the gallery

    def add_images(
        self,
        paths: Sequence[str | os.PathLike[str]],
        *,
        progress: bool = False,
        skip_errors: bool | None = None,
    ) -> None:
        """Embed and add more images to a built store (no rebuild of what is there).

        Paths already in the store, or repeated, are dropped with a warning. Unreadable images
        follow ``skip_errors`` (None: the store's own setting) as in :meth:`build_store`; skipped
        ones are appended to :attr:`skipped`. Nothing changes if an error is raised.

        Raises
        ------
        RuntimeError
            The store is not built or has no embedder.
        """
        new = absolute_paths(check_path_list("paths", paths))
        progress = check_bool("progress", progress)
        skip = None if skip_errors is None else check_bool("skip_errors", skip_errors)
        self._require_built()
        self._require_embedder("new images")
        new = drop_duplicates(new, "paths", known=self._rows)
        if not new:
            return
        kept, vectors, skipped = self._embed_files(new, progress, "adding images", skip)
        with self._lock.writing():
            fresh = [position for position, path in enumerate(kept) if path not in self._rows]
            if len(fresh) != len(kept):  # another thread added some of them meanwhile
                kept, vectors = [kept[position] for position in fresh], vectors[fresh]
            if kept:
                self._index.add(vectors)
                if self._vectors is not None or (not self._index.can_reconstruct and not self._paths):
                    stored = prepare_vectors(vectors, self._index.space)
                    self._vectors = (
                        stored if self._vectors is None else np.concatenate([self._vectors, stored])
                    )
                paths_now = list(self._paths)
                rows_now = dict(self._rows)
                for path in kept:
                    rows_now[path] = len(paths_now)
                    paths_now.append(path)
                self._paths, self._rows = paths_now, rows_now
            self._skipped = self._skipped + skipped

    def remove_images(self, paths: Sequence[str | os.PathLike[str]]) -> None:
        """Remove images from the store; they never appear in results, embeddings or saved files.

        Raises
        ------
        KeyError
            Naming the paths that are not in the store (nothing is removed then).
        RuntimeError
            The store is not built.
        """
        gone = check_path_list("paths", paths, allow_empty=True)
        self._require_built()
        with self._lock.writing():
            rows = np.unique(self._rows_of(gone))
            if len(rows) == 0:
                return
            self._index.remove(rows)
            keep = np.ones(len(self._paths), dtype=bool)
            keep[rows] = False
            if self._vectors is not None:
                self._vectors = self._vectors[keep]
            self._paths = [path for path, kept in zip(self._paths, keep.tolist(), strict=True) if kept]
            self._rows = {path: row for row, path in enumerate(self._paths)}

    # ------------------------------------------------------------------ persistence

    def save_to_disk(self, path: str | os.PathLike[str], vectors: Any = None) -> None:
        """Write the store to one safetensors file, atomically (see :mod:`galleria.store.persistence`).

        The store is read under its lock (concurrent queries go on; an ``add_images`` or
        ``remove_images`` waits), then the file is written outside it.

        Parameters
        ----------
        path : str or os.PathLike
            The file to write (replaced if it exists). Hidden temporary files that earlier saves to
            the same target left behind (a process killed mid-save) are removed.
        vectors : array of shape (len(store), d), optional
            The gallery vectors in row order, required when the index cannot reconstruct them and
            the store holds no copy; they are written to the file.
        """
        from galleria.store import persistence

        target = persistence.check_store_path(path)
        self._require_built()
        with self._lock.reading():
            snapshot = GalleryState(
                self._index, self._embedder, self._paths, self._vectors, self._skipped, self._augmentation
            )
            tensors, metadata = persistence.encode_store(snapshot, vectors)
        persistence.write_store(target, tensors, metadata)

    @classmethod
    def load_from_disk(
        cls,
        path: str | os.PathLike[str],
        embedder: Any = None,
        search_index: SearchIndex | None = None,
        *,
        checkpoint: str | os.PathLike[str] | None = None,
        root: str | os.PathLike[str] | None = None,
        connect: bool = False,
    ) -> InMemoryImageEmbeddingStore:
        """Read a store written by :meth:`save_to_disk`; the file is untrusted input.

        Loading never runs code from the file (nothing is unpickled), never opens another file the
        file names, and never lets the file choose memory or threads: every byte is covered by a
        checksum, every size is checked against the file's real size, FAISS bytes are walked against
        an allow-list of in-memory index types before FAISS reads them. See ``docs/security.md``.

        Parameters
        ----------
        path : str or os.PathLike
            The file (a regular file: a FIFO, device or folder is refused at once).
        embedder : object with ``embed``, optional
            Used instead of the embedder rebuilt from the saved config; its output dimension is
            checked against the store's. Required when the saved store's embedder had no
            ``config()``.
        search_index : SearchIndex, optional
            An index to use instead of the saved one: one already holding the store's rows, or an
            empty one to fill from the saved vectors. Required when the file holds no serialised
            index (an external index that could not be serialised).
        checkpoint : str or os.PathLike, optional
            The local model checkpoint a store built from one needs: the file records only its name
            and SHA-256, and the file you pass must match that digest.
        root : str or os.PathLike, optional
            Re-anchor a gallery that moved together with its store: the gallery paths' common
            folder is replaced by ``root``.
        connect : bool
            Allow a store whose index lives in a vector database (:class:`~galleria.MilvusIndex`)
            to reconnect to the uri and collection its file records. Off by default: a file never
            chooses what galleria opens or contacts (the token, if any, comes from
            ``GALLERIA_MILVUS_TOKEN``, never from the file).

        Raises
        ------
        OSError
            The file is missing or unreadable.
        ValueError
            The file is not a regular file, truncated, tampered with, not a galleria store, from a
            newer format, or holds a FAISS index type galleria does not read (all naming the file).
        """
        from galleria.store.persistence import read_store

        return cls._from_state(
            read_store(
                path,
                embedder=embedder,
                search_index=search_index,
                checkpoint=checkpoint,
                root=root,
                connect=connect,
            )
        )
