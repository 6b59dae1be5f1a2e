"""Ranks straight from query and gallery embeddings, one block of queries at a time."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from galleria._validation import check_choice, check_positive_int
from galleria.distances import normalize_rows
from galleria.metrics._checks import Positives, as_embeddings, as_positives
from galleria.metrics.ranks import ranks_of_block

__all__ = ["METRICS", "ranks_from_embeddings"]

#: Similarities ``ranks_from_embeddings`` can compute.
METRICS = ("cosine", "ip")

#: Bytes of one block of query × gallery scores when ``chunk_size`` is not given.
_BLOCK_BYTES = 8 * 1024 * 1024


def _working_dtype(*arrays: np.ndarray) -> np.dtype[Any]:
    """float32 when every input is float32 or narrower float; float64 otherwise (ints stay exact)."""
    if all(a.dtype.kind == "f" and a.dtype.itemsize <= 4 for a in arrays):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def check_embedding_pair(
    query_name: str, queries: Any, gallery_name: str, gallery: Any, metric: str
) -> tuple[np.ndarray, np.ndarray]:
    """Validate two embedding matrices of the same width; return them in the working dtype.

    The gallery is L2-normalised here for ``metric="cosine"``; queries are normalised block by
    block by :func:`iter_score_blocks`.
    """
    left = as_embeddings(query_name, queries)
    right = as_embeddings(gallery_name, gallery)
    if left.shape[1] != right.shape[1]:
        raise ValueError(
            f"{query_name} and {gallery_name} must have the same dimension, "
            f"got {left.shape[1]} and {right.shape[1]}"
        )
    dtype = _working_dtype(left, right)
    left = left.astype(dtype, copy=False)
    right = right.astype(dtype, copy=False)
    if metric == "cosine":
        right = normalize_rows(right, dtype=None)
    return left, right


def ranks_of_embeddings(
    queries: np.ndarray, gallery: np.ndarray, positives: Positives, metric: str, rows: int
) -> npt.NDArray[np.int64]:
    """Ranks for validated embeddings (gallery already normalised for cosine), ``rows`` queries a block."""
    n = len(queries)
    ranks = np.empty(n, dtype=np.int64)
    gallery_t = gallery.T
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        block = queries[start:stop]
        if metric == "cosine":
            block = normalize_rows(block, dtype=None)
        scores = block @ gallery_t
        ranks[start:stop] = ranks_of_block("scores", scores, positives, start)
    return ranks


def default_block_rows(m: int) -> int:
    """Queries per block so that one block of scores takes at most about 8 MB."""
    return max(1, _BLOCK_BYTES // (8 * m))


def ranks_from_embeddings(
    queries: Any,
    gallery: Any,
    positives: Any,
    *,
    metric: str = "cosine",
    chunk_size: int | None = None,
) -> npt.NDArray[np.int64]:
    """Rank of each query's best-ranked positive, computing scores block by block from embeddings.

    Equivalent to ``retrieval_ranks(queries @ gallery.T, positives)`` (rows L2-normalised first
    for cosine) but never holds the full n × m score matrix: only ``chunk_size`` rows of it at a
    time.

    Parameters
    ----------
    queries : array_like, shape (n, d)
        Query embeddings (finite).
    gallery : array_like, shape (m, d)
        Gallery embeddings (finite), same ``d``.
    positives : array_like or sequence
        Relevant gallery items per query, in any form :func:`retrieval_ranks` accepts.
    metric : {"cosine", "ip"}
        Cosine similarity (zero vectors score 0) or the plain inner product.
    chunk_size : int, optional
        Queries per block; by default enough for about 8 MB of scores per block.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
        0-indexed ranks, ties broken by the lower gallery index.

    Raises
    ------
    TypeError
        Non-numeric embeddings; bad positives (see :func:`retrieval_ranks`); ``chunk_size`` not an int.
    ValueError
        Embeddings empty, not 2-D, non-finite or of different dimensions; unknown ``metric``;
        ``chunk_size`` ≤ 0; positives out of range or a query without any.

    Notes
    -----
    Computation runs in float32 when both inputs are float32 (float64 otherwise, so integer
    embeddings stay exact). On integer-valued embeddings with ``metric="ip"`` the ranks equal
    those of the full matrix exactly; on general data a block matrix product is not bit-identical
    to the full one, so ranks can differ only among scores within about 1e-6 of each other.

    Examples
    --------
    >>> queries = [[1.0, 0.0], [0.0, 1.0]]
    >>> gallery = [[0.0, 2.0], [3.0, 0.0], [1.0, 1.0]]
    >>> ranks_from_embeddings(queries, gallery, [1, [0, 2]]).tolist()
    [0, 0]
    >>> ranks_from_embeddings(queries, gallery, [2, 2], metric="ip").tolist()
    [1, 1]
    """
    check_choice("metric", metric, METRICS)
    left, right = check_embedding_pair("queries", queries, "gallery", gallery, metric)
    checked = as_positives("positives", positives, len(left), len(right))
    rows = (
        default_block_rows(len(right)) if chunk_size is None else check_positive_int("chunk_size", chunk_size)
    )
    return ranks_of_embeddings(left, right, checked, metric, rows)
