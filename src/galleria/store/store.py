"""The in-memory gallery store: image paths, their embeddings, and a search index over them.

This module holds construction, building and persistence; the fields and read-only views are in
:mod:`galleria.store._core`, searching in :mod:`galleria.store._retrieval`, and adding/removing
images in :mod:`galleria.store._mutation`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from galleria._interrupts import deferred_interrupts
from galleria._validation import check_bool, check_callback, check_path_list, check_positive_int
from galleria.distances import prepare_vectors
from galleria.index import SearchIndex
from galleria.store._checks import (
    absolute_paths,
    check_embedder,
    drop_duplicates,
    resolve_index,
)
from galleria.store._mutation import MutationMixin
from galleria.store._records import ExtensionRecordsMixin
from galleria.store._retrieval import RetrievalMixin
from galleria.store._state import GalleryState, add_rows

__all__ = ["InMemoryImageEmbeddingStore"]


class InMemoryImageEmbeddingStore(RetrievalMixin, MutationMixin, ExtensionRecordsMixin):
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
    faiss index's scores are turned into the same distances (its inner products into ``1 - <q, v>``).

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

    @classmethod
    def _from_state(cls, state: GalleryState) -> InMemoryImageEmbeddingStore:
        """The one internal constructor of a built store, from a validated :class:`GalleryState`."""
        store = cls.__new__(cls)
        store._init_state(state.index, state.embedder)
        store._skipped = list(state.skipped)
        store._augmentation = None if state.augmentation is None else dict(state.augmentation)
        store._offline_diffusion = state.offline_diffusion
        store._labels_root = state.labels_root
        store._set_gallery(state.paths, state.vectors)
        store._pixel_digests = state.pixel_digests
        store._extensions = dict(state.extensions)
        if state.rerank_statistics is not None:
            from galleria.statistics import GalleryStatistics

            store._rerank_statistics = GalleryStatistics.from_record(state.rerank_statistics)
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
        skipped: Sequence[str | os.PathLike[str]] | None = None,
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
        skipped : sequence of str or os.PathLike, optional
            Paths that were left out because they could not be read where the vectors were
            computed; recorded as the store's :attr:`skipped` (and saved with it), as
            :meth:`build_store` records its own.

        Examples
        --------
        >>> import numpy as np
        >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2))
        >>> [(c.path, c.score) for c in store.retrieve_by_vector([2.0, 0.0], k=2)[0]]
        [('a', 0.0), ('b', 1.0)]
        """
        from galleria.store._from_vectors import state_from_embeddings

        return cls._from_state(
            state_from_embeddings(paths, embeddings, embedder, search_index, space, index_params, skipped)
        )

    # ------------------------------------------------------------------ building

    def build_store(self, progress: bool = True, *, on_progress: Callable[[int], None] | None = None) -> None:
        """Read, embed and index every gallery image (a no-op on a store that is already built).

        Images are decoded on ``num_workers`` threads, at most ``num_prefetch_batches`` batches
        ahead of the embedder, and embedded in order. Nothing is kept if any step fails: the
        store stays unbuilt.

        Parameters
        ----------
        progress : bool
            Show progress: a tqdm bar on a terminal, a plain line every few seconds elsewhere
            (it moves per image: while a batch is embedded, at the pace of the batches before).
        on_progress : callable, optional
            Called with 1 per image, instead of the bar (a caller's own progress display): for a
            skipped image at once, for the images of a batch one by one while it is embedded (at
            the pace measured on earlier batches) and the rest when it is done, so the calls add
            up to the number of images. Some come from a small pacing thread; never two at once.

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
        check_callback("on_progress", on_progress)
        if self._built:
            return
        digests: list[bytes] = []
        paths, vectors, skipped = self._embed_files(
            self._pending, progress, "building gallery", on_images=on_progress, digests=digests
        )
        statistics = None
        if paths:  # the adaptive re-ranking defaults' statistics, recorded at build time (bounded sample)
            from galleria.statistics import gallery_statistics

            space = self._index.space
            statistics = gallery_statistics(prepare_vectors(vectors, space), space=space)
        with self._lock.writing(), deferred_interrupts():
            if self._built:
                return
            if paths:
                add_rows(self._index, vectors, paths)
            else:
                warnings.warn(
                    f"none of the {len(self._pending)} gallery images could be read; the store is empty",
                    RuntimeWarning,
                    stacklevel=2,
                )
            self._skipped = skipped
            self._set_gallery(paths, vectors)
            self._pixel_digests = self._digest_rows(digests, len(paths))
            self._rerank_statistics = statistics

    # ------------------------------------------------------------------ persistence

    def save_to_disk(self, path: str | os.PathLike[str], vectors: Any = None) -> None:
        """Write the store to one safetensors file, atomically (see :mod:`galleria.store.persistence`).

        The file is written under the store's lock (concurrent queries go on; an ``add_images`` or
        ``remove_images`` waits), straight from the arrays the index holds: no copy of the vectors
        is made, and faiss indexes are streamed into the file.

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
        from galleria.store._writing import encode_store

        target = persistence.check_store_path(path)
        self._require_built()
        self._require_own("save it")
        with self._lock.reading():
            statistics = self._rerank_statistics
            snapshot = GalleryState(
                self._index,
                self._embedder,
                self._paths,
                self._vectors,
                self._skipped,
                self._augmentation,
                self._offline_diffusion,
                rerank_statistics=None
                if statistics is None or statistics.n_items != len(self._paths)
                else statistics.record(),
                labels_root=self._labels_root,
                pixel_digests=self._pixel_digests
                if self._pixel_digests is not None and len(self._pixel_digests) == len(self._paths)
                else None,
                extensions=dict(self._extensions),
            )
            tensors, header = encode_store(snapshot, vectors)
            persistence.write_store(target, tensors, header)

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
        mmap: bool = False,
        runtime: str | None = None,
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
            ``GALLERIA_MILVUS_TOKEN``, never from the file, and is sent only to the server named
            by ``GALLERIA_MILVUS_URI``: a file whose uri differs is refused).
        mmap : bool
            Memory-map the exact vectors (an exact index's, or the copy a store keeps for an
            external index) read-only from the file instead of reading them into memory: loading
            costs no memory for them and pages come in as searches touch them. They are verified
            (checksum, finiteness) once while loading; the file must then not be modified in place
            while the store is in use (galleria's saves replace the file, which keeps the mapping
            valid). Adding or removing rows copies them into memory. Other indexes are read into
            memory either way, each tensor once.
        runtime : {"torch", "onnx"} or None
            Where the rebuilt embedder's network runs; None uses the runtime the store was built
            with (when installed). See :mod:`galleria.embedders._runtime`.

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
                mmap=mmap,
                runtime=runtime,
            )
        )
