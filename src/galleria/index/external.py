"""A faiss index built by the user, wrapped to follow the :class:`~galleria.index.base.SearchIndex` API."""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np

from galleria._declare import Component
from galleria._validation import is_int
from galleria.index import _serial
from galleria.index._checks import check_k, check_rows, check_vectors, empty_result
from galleria.index._faiss import FaissPart, LiveRows, deserialize, restore_precomputed_table

__all__ = ["ExternalSearchIndex"]

_SPACE_OF_METRIC = {faiss.METRIC_L2: "l2", faiss.METRIC_INNER_PRODUCT: "ip"}


def _unwrap(index: Any) -> Any:
    """Return the most specific faiss class of ``index``; TypeError if it is not a faiss index.

    A downcast wrapper does not own the C++ object: the caller must keep ``index`` alive too.
    """
    if not isinstance(index, faiss.Index):
        raise TypeError(f"index must be a faiss index (faiss.Index), got {type(index).__name__}")
    return faiss.downcast_index(index) if type(index) is faiss.Index else index


def _space_of(index: Any) -> str:
    space = _SPACE_OF_METRIC.get(int(index.metric_type))
    if space is None:
        raise ValueError(
            "only faiss indexes with metric L2 or INNER_PRODUCT can be wrapped, "
            f"got metric_type {index.metric_type}"
        )
    return space


class ExternalSearchIndex:
    """A user's faiss index (L2 or inner product) behind the galleria index contract.

    The space is inferred from the faiss metric (``METRIC_L2`` → ``"l2"``, ``METRIC_INNER_PRODUCT``
    → ``"ip"``). Scores stay the wrapped index's own — squared L2 distances (lower is better) or
    inner products (higher is better, see :attr:`higher_is_better`) — in faiss's order. Vectors
    are added as given (normalise them yourself for cosine similarity). Rows are positions: rows
    already in the index when it is wrapped are ``0 .. ntotal - 1``.

    Removal uses faiss's ``remove_ids`` where it renumbers compactly (flat-code indexes such as
    ``IndexFlatL2``); for other indexes removed rows are masked and searches fetch extra results
    to skip them. Where an approximate index (IVF with a small ``nprobe``) returns fewer than
    ``min(k, len)`` results, the missing entries have id -1 and score +inf (l2) or -inf (ip).

    Create it with :meth:`from_faiss_index`.

    Examples
    --------
    >>> import faiss, numpy as np
    >>> flat = faiss.IndexFlatL2(2)
    >>> flat.add(np.array([[0.0, 0.0], [1.0, 0.0]], dtype=np.float32))
    >>> index = ExternalSearchIndex.from_faiss_index(flat, name="my-flat")
    >>> index.space, len(index), index.search(np.array([[0.9, 0.0]]), k=1)[0].tolist()
    ('l2', 2, [[1]])
    """

    name = "external"

    def __init__(self, index: Any, *, label: str = "faiss") -> None:
        faiss_index = _unwrap(index)
        if isinstance(faiss_index, (faiss.IndexIDMap, faiss.IndexIDMap2)):
            raise ValueError(
                "index must number its vectors 0 .. ntotal - 1; "
                "IndexIDMap/IndexIDMap2 (custom ids) are not supported"
            )
        self._space = _space_of(faiss_index)
        if not isinstance(label, str):
            raise TypeError(f"name must be a string, got {label!r} ({type(label).__name__})")
        if not label:
            raise ValueError("name must be a non-empty string, got ''")
        self._owner = index  # keeps the C++ object alive when faiss_index is a non-owning downcast
        self._index = faiss_index
        self.label = label
        self._rows = LiveRows.identity(int(faiss_index.ntotal))
        self._native_remove = isinstance(faiss_index, faiss.IndexFlatCodes)
        self._reconstructs: bool | None = None

    @classmethod
    def from_faiss_index(cls, index: Any, name: str = "faiss") -> ExternalSearchIndex:
        """Wrap a faiss index (metric L2 or inner product); ``name`` is a label of your choice.

        Raises TypeError if ``index`` is not a faiss index or ``name`` not a non-empty string, and
        ValueError for other metrics or for indexes with custom ids (``IndexIDMap``).
        """
        return cls(index, label=name)

    def __repr__(self) -> str:
        return (
            f"ExternalSearchIndex(name={self.label!r}, faiss={type(self._index).__name__}, "
            f"space={self._space!r}, rows={len(self)})"
        )

    @property
    def faiss_index(self) -> Any:
        """The wrapped faiss index (masked rows included)."""
        return self._index

    @property
    def space(self) -> str:
        """``"l2"`` or ``"ip"``, from the faiss metric."""
        return self._space

    @property
    def higher_is_better(self) -> bool:
        """True when scores are similarities (inner product), False for L2 distances."""
        return self._space == "ip"

    @property
    def dim(self) -> int:
        """The faiss index's dimension."""
        return int(self._index.d)

    @property
    def can_reconstruct(self) -> bool:
        """Whether the wrapped index can return stored vectors (probed once it holds a vector)."""
        if self._reconstructs is None:
            if self._rows.total == 0:
                return False
            try:
                self._index.reconstruct(int(self._rows.internal[0]) if len(self) else 0)
                self._reconstructs = True
            except RuntimeError:
                self._reconstructs = False
        return self._reconstructs

    def __len__(self) -> int:
        return int(self._rows.internal.size)

    def params(self) -> dict[str, Any]:
        """The label and the faiss class name, JSON-able."""
        return {"name": self.label, "faiss_type": type(self._index).__name__}

    def _check_in_sync(self) -> None:
        if int(self._index.ntotal) != self._rows.total:
            raise RuntimeError(
                f"the wrapped faiss index {self.label!r} was changed outside galleria: it holds "
                f"{int(self._index.ntotal)} vectors, galleria expected {self._rows.total}"
            )

    def add(self, vectors: np.ndarray) -> None:
        """Add an (n, dim) batch of finite vectors, as given, as rows ``len(self) .. len(self) + n - 1``."""
        array = check_vectors("vectors", vectors, self.dim, self.space)
        if not self._index.is_trained:
            raise ValueError(f"the wrapped faiss index {self.label!r} is not trained; train it before adding")
        self._check_in_sync()
        self._index.add(array)
        self._rows.append(array.shape[0])

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return the ``k`` best rows of each query with the wrapped index's own scores, in its order."""
        k = check_k(k)
        array = check_vectors("queries", queries, self.dim, self.space)
        self._check_in_sync()
        live = len(self)
        if live == 0:
            return empty_result(array.shape[0])
        k = min(k, live)
        fetch = min(k + self._rows.removed, self._rows.total)
        scores, labels = self._index.search(array, fetch)
        ids = self._rows.to_positions(labels)
        if fetch == k and (ids >= 0).all():
            return ids, scores
        # Move the live results to the front (order kept), drop the rest, pad where too few were found.
        order = np.argsort(ids < 0, axis=1, kind="stable")[:, :k]
        ids = np.take_along_axis(ids, order, axis=1)
        scores = np.take_along_axis(scores, order, axis=1)
        scores[ids < 0] = -np.inf if self.higher_is_better else np.inf
        return ids, scores

    def reconstruct(self, rows: np.ndarray) -> np.ndarray:
        """Return the stored vectors of the given rows; RuntimeError if the index cannot reconstruct."""
        ids = check_rows(rows, len(self))
        if not self.can_reconstruct:
            raise RuntimeError(
                f"the wrapped faiss index {self.label!r} ({type(self._index).__name__}) "
                "cannot reconstruct vectors"
            )
        if ids.size == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.asarray(self._index.reconstruct_batch(self._rows.internal[ids]), dtype=np.float32)

    def remove(self, rows: np.ndarray) -> None:
        """Delete the given rows (duplicates count once); the rest are renumbered compactly, order kept."""
        ids = check_rows(rows, len(self))
        self._check_in_sync()
        if ids.size == 0:
            return
        if self._native_remove:
            self._index.remove_ids(np.unique(ids))
            self._rows = LiveRows.identity(int(self._index.ntotal))
        else:
            self._rows.remove(ids)

    def packed(self) -> _serial.Packed:
        """What :meth:`to_bytes` returns, as parts written without joining them (faiss streamed)."""
        meta = {"label": self.label, "space": self._space, "dim": self.dim, "total": self._rows.total}
        return _serial.pack_parts(
            "external", meta, {"live": self._rows.internal, "faiss": FaissPart(self._index)}
        )

    def to_bytes(self) -> bytes:
        """Serialise the wrapped index with faiss's binary format inside a JSON-headed container."""
        return self.packed().to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes | _serial.Unpacked) -> ExternalSearchIndex:
        """Rebuild an index written by :meth:`to_bytes`; raise ValueError on corrupt data."""
        meta, arrays = _serial.unpack(data, "external")
        label, space, dim, total = meta.get("label"), meta.get("space"), meta.get("dim"), meta.get("total")
        if not isinstance(label, str) or not label or space not in ("l2", "ip") or not is_int(total):
            raise ValueError("serialised external index has a corrupt header")
        live = arrays.get("live")
        if live is None or live.dtype != np.int64 or live.ndim != 1 or "faiss" not in arrays:
            raise ValueError("serialised external index lacks its 'live' rows or faiss bytes")
        if not isinstance(total, int) or not 0 <= total <= 1 << 40:
            raise ValueError(f"serialised external index has an invalid row total {total!r}")
        faiss_index = deserialize(arrays["faiss"], "external index", id_limit=total)
        restore_precomputed_table(faiss_index, len(data))
        try:
            index = cls(faiss_index, label=label)
        except (TypeError, ValueError) as error:
            raise ValueError(f"serialised external index holds an unusable faiss index: {error}") from error
        if index.space != space or index.dim != dim or int(faiss_index.ntotal) != total:
            raise ValueError("serialised external index header does not match its faiss index")
        if live.size and (live[0] < 0 or live[-1] >= total or (np.diff(live) <= 0).any()):
            raise ValueError("serialised external index has an invalid 'live' row array")
        index._rows = LiveRows(live, int(total))
        return index


#: The declaration of the external index (:mod:`galleria._declare`): a faiss index the caller built.
COMPONENT = Component(
    kind="index",
    name="external",
    summary="a faiss index the caller built and filled (any type numbering its vectors 0 .. n - 1)",
    params=(),
    build=ExternalSearchIndex,
    order=40,
    extra={"from_bytes": ExternalSearchIndex.from_bytes, "faiss_blobs": frozenset({"faiss"})},
)
