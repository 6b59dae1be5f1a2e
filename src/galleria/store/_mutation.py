"""Changing a built store: adding and removing gallery images under the writer lock."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from galleria._interrupts import deferred_interrupts
from galleria._validation import check_bool, check_callback, check_path_list
from galleria.distances import prepare_vectors
from galleria.store._checks import absolute_paths, drop_duplicates
from galleria.store._core import StoreCore
from galleria.store._state import add_rows

__all__ = ["MutationMixin"]


class MutationMixin(StoreCore):
    """``add_images`` and ``remove_images`` of :class:`~galleria.InMemoryImageEmbeddingStore`."""

    # ------------------------------------------------------------------ changing the gallery

    def add_images(
        self,
        paths: Sequence[str | os.PathLike[str]],
        *,
        progress: bool = False,
        skip_errors: bool | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        """Embed and add more images to a built store (no rebuild of what is there).

        ``progress`` and ``on_progress`` report as in :meth:`build_store`.

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
        check_callback("on_progress", on_progress)
        skip = None if skip_errors is None else check_bool("skip_errors", skip_errors)
        self._require_built()
        self._require_own("add images")
        self._require_embedder("new images")
        new = drop_duplicates(new, "paths", known=self._known(new))
        if not new:
            return
        digests: list[bytes] = []
        kept, vectors, skipped = self._embed_files(
            new, progress, "adding images", skip, on_progress, digests=digests
        )
        added = self._digest_rows(digests, len(kept))
        with self._lock.writing(), deferred_interrupts():
            fresh = np.flatnonzero(self._paths.rows_of(kept) < 0).tolist()
            if len(fresh) != len(kept):  # another thread added some of them meanwhile
                kept, vectors, added = [kept[position] for position in fresh], vectors[fresh], added[fresh]
            if kept:
                # Everything that can fail is computed first; then the index and the bookkeeping
                # change together, with Ctrl-C held back until both have (galleria._interrupts).
                own = self._vectors
                if own is not None or (not self._index.can_reconstruct and not self._paths):
                    stored = prepare_vectors(vectors, self._index.space)
                    own = stored if own is None else np.concatenate([own, stored])
                held = self._pixel_digests
                if held is None or len(held) != len(self._paths):
                    held = np.zeros((len(self._paths), 8), dtype=np.uint8)
                digests_after = np.concatenate([held, added])
                paths = self._paths.extended(kept)
                before = len(self._index)
                try:
                    add_rows(self._index, vectors, kept)
                except BaseException:
                    if len(self._index) > before:  # never leave rows the path table does not name
                        self._index.remove(np.arange(before, len(self._index)))
                    raise
                self._vectors = own
                self._pixel_digests = digests_after
                self._paths = paths
                self._offline_diffusion = None  # computed over the old rows
                self._rerank_statistics = None  # the gallery changed: recomputed on next use
                self._extensions = {}  # other records describe the old rows
            self._skipped = self._skipped + skipped

    def _known(self, paths: list[str]) -> set[str]:
        """Those of ``paths`` the gallery holds (one bulk lookup)."""
        found = self._paths.rows_of(paths) >= 0
        return {path for path, held in zip(paths, found.tolist(), strict=True) if held}

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
        self._require_own("remove images")
        with self._lock.writing(), deferred_interrupts():
            rows = np.unique(self._rows_of(gone))
            if len(rows) == 0:
                return
            keep = np.ones(len(self._paths), dtype=bool)
            keep[rows] = False
            own = None if self._vectors is None else self._vectors[keep]
            digests = self._pixel_digests
            if digests is not None and len(digests) == len(keep):
                digests = digests[keep]
            paths = self._paths.select(keep)
            self._index.remove(rows)
            self._vectors = own
            self._pixel_digests = digests
            self._paths = paths
            self._offline_diffusion = None  # computed over the old rows
            self._rerank_statistics = None  # the gallery changed: recomputed on next use
            self._extensions = {}  # other records describe the old rows
