"""Distances in the three spaces, as pure functions on float32 arrays.

=========  ===========================================
space      distance between rows ``a`` and ``b``
=========  ===========================================
cosine     ``1 - <a/|a|, b/|b|>``
ip         ``1 - <a, b>``
l2         ``|a - b|^2`` (squared Euclidean)
=========  ===========================================

These are the scores of the built-in indexes and the distances the re-ranker computes among
candidates, so both use this one module.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "normalize_rows",
    "pairwise_distances",
    "pairwise_distances_batched",
    "prepare_vectors",
    "zero_rows",
]


def normalize_rows(vectors: np.ndarray, *, dtype: npt.DTypeLike | None = np.float32) -> np.ndarray:
    """Return a copy of ``vectors`` with every row scaled to unit L2 norm (zero rows stay 0).

    The copy is float32 by default; ``dtype=None`` keeps the dtype of a floating-point input. Rows
    whose norm overflows (huge finite entries) or underflows (tiny ones) are first divided by their
    largest magnitude, so they normalise like any other row instead of becoming zeros.

    Examples
    --------
    >>> import numpy as np
    >>> normalize_rows(np.array([[3.0, 4.0], [0.0, 0.0]]), dtype=None).tolist()
    [[0.6, 0.8], [0.0, 0.0]]
    >>> np.round(normalize_rows(np.array([[3e30, 4e30]], dtype=np.float32)).astype(float), 6).tolist()
    [[0.6, 0.8]]
    """
    array = np.asarray(vectors, dtype=dtype)
    with np.errstate(over="ignore", under="ignore"):
        norms = np.linalg.norm(array, axis=-1, keepdims=True)
    bad = ~np.isfinite(norms) | ((norms == 0) & (array != 0).any(axis=-1, keepdims=True))
    if bad.any():
        rows = bad[..., 0]
        peaks = np.max(np.abs(array[rows]), axis=-1, keepdims=True)
        scaled = array[rows] / peaks
        array = array.copy()
        array[rows] = scaled
        norms[rows] = np.linalg.norm(scaled, axis=-1, keepdims=True)
    result: np.ndarray = np.divide(array, norms, out=np.zeros_like(array), where=norms > 0)
    return result


def zero_rows(vectors: np.ndarray) -> np.ndarray:
    """Positions of the rows of a 2-D array that are all zeros (no direction in cosine space)."""
    return np.flatnonzero(~np.asarray(vectors).any(axis=1))


def prepare_vectors(vectors: np.ndarray, space: str) -> np.ndarray:
    """Vectors as an index of ``space`` stores them: L2-normalised for cosine, unchanged otherwise.

    Zero rows stay zero here; the store refuses them in cosine space (they have no direction).
    """
    if space == "cosine":
        return normalize_rows(vectors)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def pairwise_distances(a: np.ndarray, b: np.ndarray, space: str) -> np.ndarray:
    """The (len(a), len(b)) float32 distance matrix between the rows of ``a`` and ``b`` in ``space``.

    Inputs are taken as stored (already normalised for cosine). Squared Euclidean distances are
    computed through the Gram matrix and floored at 0 against rounding.

    Examples
    --------
    >>> import numpy as np
    >>> pairwise_distances(np.eye(2), np.eye(2), "l2").tolist()
    [[0.0, 2.0], [2.0, 0.0]]
    """
    left = np.asarray(a, dtype=np.float32)
    right = np.asarray(b, dtype=np.float32)
    return _from_gram(left @ right.T, left, right, space)


def pairwise_distances_batched(a: np.ndarray, b: np.ndarray, space: str) -> np.ndarray:
    """:func:`pairwise_distances` for a stack of pairs: ``(B, n, d)`` and ``(B, m, d)`` → ``(B, n, m)``.

    One ``matmul`` call for the whole stack, with the same formula per pair, so slice ``i`` equals
    ``pairwise_distances(a[i], b[i], space)`` bit for bit.

    Examples
    --------
    >>> import numpy as np
    >>> pairwise_distances_batched(np.eye(2)[None], np.eye(2)[None], "ip").tolist()
    [[[0.0, 1.0], [1.0, 0.0]]]
    """
    left = np.asarray(a, dtype=np.float32)
    right = np.asarray(b, dtype=np.float32)
    return _from_gram(np.matmul(left, np.swapaxes(right, -1, -2)), left, right, space)


def _from_gram(gram: np.ndarray, left: np.ndarray, right: np.ndarray, space: str) -> np.ndarray:
    """Distances in ``space`` from the Gram matrix (or stack of them) of ``left`` and ``right`` rows."""
    if space in ("cosine", "ip") and gram.dtype == np.float32:  # a fresh product: work in place
        np.subtract(np.float32(1.0), gram, out=gram)
        if space == "cosine":  # unit rows: 1 - cos lies in [0, 2], rounding floored at 0
            np.maximum(gram, np.float32(0.0), out=gram)
        return gram
    if space == "cosine":
        return np.maximum(np.asarray(1.0 - gram, dtype=np.float32), 0.0)
    if space == "ip":
        return np.asarray(1.0 - gram, dtype=np.float32)
    if space == "l2":
        squared = (
            np.einsum("...ij,...ij->...i", left, left)[..., :, None]
            + np.einsum("...ij,...ij->...i", right, right)[..., None, :]
            - 2.0 * gram
        )
        floored: np.ndarray = np.maximum(squared, 0.0).astype(np.float32, copy=False)
        return floored
    raise ValueError(f"space must be one of ('cosine', 'ip', 'l2'), got {space!r}")
