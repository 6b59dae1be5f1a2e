"""The contract every search index follows, and the distance spaces they share.

Row ids are positions: the index holds rows ``0 .. len(index) - 1`` in insertion order. ``add``
appends rows; ``remove`` deletes rows and renumbers the rest compactly (like deleting items from a
list), so row ``i`` of the index always matches item ``i`` of the store that owns it. Indexes that
cannot delete natively (faiss HNSW) hide removed rows behind a mask and compact when it pays.

Scores of the built-in indexes are **distances**, lower is better:

=========  ===============================================  ===========================
space      stored vectors                                   distance
=========  ===============================================  ===========================
cosine     L2-normalised on ``add`` (and queries on search)  ``1 - cos(q, v)``
ip         as given                                          ``1 - <q, v>``
l2         as given                                          squared Euclidean distance
=========  ===============================================  ===========================

An :class:`~galleria.index.external.ExternalSearchIndex` keeps its own index's scores.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

__all__ = ["SPACES", "SearchIndex", "Space"]

Space = Literal["cosine", "ip", "l2"]
SPACES: tuple[str, ...] = ("cosine", "ip", "l2")


@runtime_checkable
class SearchIndex(Protocol):
    """A searchable, serialisable collection of float32 vectors addressed by row."""

    #: Short registry name: ``"exact"``, ``"hnsw"`` or ``"external"``.
    name: str

    @property
    def space(self) -> str:
        """The distance space: ``"cosine"``, ``"ip"`` or ``"l2"``."""
        ...

    @property
    def dim(self) -> int | None:
        """Vector dimension, or None while the index is empty and has never seen a vector."""
        ...

    @property
    def can_reconstruct(self) -> bool:
        """Whether :meth:`reconstruct` can return stored vectors."""
        ...

    def __len__(self) -> int:
        """Number of live rows."""
        ...

    def params(self) -> dict[str, Any]:
        """The index's JSON-able construction parameters (saved in the store's header)."""
        ...

    def add(self, vectors: np.ndarray) -> None:
        """Append rows: an (n, dim) float32 array; they get ids ``len(self) .. len(self) + n - 1``."""
        ...

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search a (q, dim) float32 batch for its ``k`` nearest rows.

        Returns ``(ids, scores)``, both of shape (q, min(k, len(self))): int64 row ids and float32
        scores, best first. For the built-in indexes, ties in distance are broken by the lower row
        where the index can see them (the exact index always).
        """
        ...

    def reconstruct(self, rows: np.ndarray) -> np.ndarray:
        """Return the stored (len(rows), dim) float32 vectors of the given row ids."""
        ...

    def remove(self, rows: np.ndarray) -> None:
        """Delete the given row ids; the remaining rows are renumbered compactly, order kept."""
        ...

    def to_bytes(self) -> bytes:
        """Serialise the whole index (never with pickle)."""
        ...
