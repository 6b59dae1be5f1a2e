"""The validated contents of a built store, handed from a constructor or a loader to the store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from galleria.index import SearchIndex

__all__ = ["GalleryState", "OfflineDiffusion", "add_rows"]


@dataclass(frozen=True)
class OfflineDiffusion:
    """The offline half of decoupled diffusion (:mod:`galleria.rerank.decoupled`) over a store's rows.

    Attributes
    ----------
    params : dict
        ``{"k", "truncation", "alpha", "gamma", "tol", "maxiter"}`` it was computed with.
    positions : (n, T) int32 array
        Row i: the gallery rows of item i's truncated diffusion, i itself first, all distinct.
    values : (n, T) float32 array
        Row i: the diffusion from item i at those rows.
    source : str or None
        Where it was read from (the file, the record and its tensors, as errors name them:
        ``"'g.safetensors': header key 'extensions.offline_diffusion' (tensors ...)"``) while it is
        not yet checked against the store's vectors
        (:func:`galleria.rerank.witness.check_offline_witness` runs on its first use); None once
        checked, or for one computed here.
    """

    params: dict[str, Any]
    positions: np.ndarray
    values: np.ndarray
    source: str | None = field(default=None, compare=False)


@dataclass
class GalleryState:
    """Everything a built store holds, already checked against itself.

    Attributes
    ----------
    index : SearchIndex
        Holds exactly ``len(paths)`` rows, row i being ``paths[i]``.
    embedder : object or None
        The embedder for image / text queries.
    paths : sequence of str
        Unique gallery paths in row order: a list, or the compact
        :class:`~galleria.store._paths.PathTable` a loaded store keeps.
    vectors : (len(paths), d) float32 array or None
        The store's own copy of the vectors, as the index's space stores them; only kept where the
        index cannot give its vectors back.
    skipped : list of str
        Paths left out because they could not be read.
    augmentation : dict or None
        How the vectors were augmented on the database side (``galleria.rerank.dba``), if they were.
    offline_diffusion : OfflineDiffusion or None
        The offline part of decoupled diffusion over exactly these rows, if it was computed.
    rerank_statistics : dict or None
        The reciprocal-neighbour statistics the adaptive re-ranking defaults read
        (:meth:`galleria.rerank.adaptive.GalleryStatistics.record`), if computed.
    labels_root : str or None
        The folder the gallery's labels were drawn from at build (each image's label is its first
        folder under it), if recorded.
    pixel_digests : (len(paths), 8) uint8 array or None
        Each image's digest of its decoded pixels (zero rows: unknown), if recorded.
    extensions : dict
        Other extension records by name (:mod:`galleria.store.extensions`).
    """

    index: SearchIndex
    embedder: Any
    paths: Sequence[str]
    vectors: np.ndarray | None
    skipped: list[str]
    augmentation: dict[str, Any] | None = None
    offline_diffusion: OfflineDiffusion | None = None
    #: The gallery's re-ranking statistics record (galleria.rerank.adaptive), checked on load.
    rerank_statistics: dict[str, Any] | None = None
    #: The folder whose first-level sub-folders are the gallery's labels (recorded at build).
    labels_root: str | None = None
    #: Each row's pixel digest (galleria.store._embedding.pixel_digest), if recorded.
    pixel_digests: np.ndarray | None = None
    #: Extension records kept by name (galleria.store.extensions): the values of codecs without a
    #: ``state_field``, and the opaque records no registered codec reads.
    extensions: dict[str, Any] = field(default_factory=dict)


def add_rows(index: SearchIndex, vectors: np.ndarray, paths: Sequence[str]) -> None:
    """Append ``vectors`` to ``index`` as the rows of ``paths`` (one per vector, as the store spells
    them); an index that keeps each row's path beside it (``stores_paths``: a
    :class:`~galleria.index.MilvusIndex`, whose collection other services read) is given them."""
    if getattr(index, "stores_paths", False):
        index.add(vectors, paths=list(paths))  # type: ignore[call-arg]
    else:
        index.add(vectors)
