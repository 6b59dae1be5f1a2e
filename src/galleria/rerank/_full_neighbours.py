"""The first pass of the full re-ranking: every member's first ranked members and its row scale.

The distance rows are visited in blocks (on worker threads); each block leaves its rows'
neighbour lists and scales, and the scaled probe→gallery distances when the output is wanted. On
cosine features a strided-chunk search (:func:`chunked_lists`) ranks the rows without transforming
them whole, with the same result bit for bit.
"""

from __future__ import annotations

import numpy as np

from galleria._blas import one_blas_thread
from galleria.rerank import _full_blocks as blocks
from galleria.rerank._common import parallel_blocks
from galleria.rerank._full_sources import FeatureSource, Source, transform
from galleria.vectors import stable_smallest

__all__ = ["chunked_lists", "first_in_order", "first_step", "neighbour_lists", "scaled_rows"]


def first_step(source: Source) -> int:
    """Rows per block of the first pass: :func:`~galleria.rerank._full_blocks.row_step`, more on features
    (see ``PRODUCT_ROWS`` in :mod:`galleria.rerank._full_blocks`)."""
    step = blocks.row_step(source.size)
    if not isinstance(source, FeatureSource):
        return step
    return max(step, min(blocks.PRODUCT_ROWS, blocks.PRODUCT_BLOCKS * step))


def scaled_rows(
    source: Source, start: int, stop: int, mode: str, raw: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``start:stop`` of the distances, ready for ranking, with their scales and probe→gallery part.

    Returns ``(block, peak, original)``: ``block`` ranks like the scaled rows (in paper mode on
    float32 input it is the floored row, not yet divided), ``peak`` the row scales, and
    ``original`` the scaled probe→gallery distances of the probe rows among them (float32, shape
    (probe rows in the block, G)). Both passes call this, so their values agree bit for bit; ``raw``
    is ``source.rows(start, stop)`` when the caller computed it already (on its own thread).
    """
    size = source.size
    probes = source.probes
    if raw is None:
        raw = source.rows(start, stop)  # a fresh array, changed in place below
    rows = np.arange(start, stop)
    last = max(0, min(stop, probes) - start)
    original = np.empty((last, source.gallery), dtype=np.float32)
    if mode == "paper" and raw.dtype == np.float32:
        # Float32 values keep their order and ties when divided in float64 by a positive
        # number (the quotient's rounding is far finer than their spacing), so the ranking
        # of the scaled row is the ranking of the floored float32 row: no float64 copy.
        block = np.maximum(raw, 0.0, out=raw)
        block[rows - start, rows] = 0.0
        peak = block.max(axis=1).astype(np.float64)
        peak[peak <= 0] = 1
        if last:
            original[...] = block[:last, probes:] / peak[:last, None]
        return block, peak, original
    block = transform(raw, rows[:, None], np.arange(size)[None, :], mode)
    peak = block.max(axis=1)
    peak[peak <= 0] = 1
    block /= peak[:, None]
    if last:
        original[...] = block[:last, probes:]
    return block, peak, original


def neighbour_lists(
    source: Source, width: int, mode: str, out: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """First pass: every member's ``width`` first ranked members and its row scale.

    Also writes the scaled probe→gallery distances into ``out`` (unless it is None: the streamed
    output recomputes them block by block).
    """
    size = source.size
    probes = source.probes
    ranking = np.empty((size, width), dtype=np.int64)
    scale_dtype = np.float32 if mode == "reference" else np.float64
    scales = np.ones(size, dtype=scale_dtype)
    step = first_step(source)

    chunked = (
        isinstance(source, FeatureSource)
        and source.metric == "cosine"
        and -(-size // blocks.CHUNK) > width + blocks.SPARE_CHUNKS
    )

    def block_lists(start: int, _: None) -> None:  # disjoint rows: any order, any thread
        stop = min(start + step, size)
        with one_blas_thread():  # the product on this thread alone: the same bits on any thread
            raw = source.gram(start, stop) if chunked else source.rows(start, stop)  # type: ignore[union-attr]
        if chunked:
            scales[start:stop], ranking[start:stop], original = chunked_lists(
                raw, start, size, probes, width, mode, out is not None
            )
            if out is not None and start < probes:
                out[start : start + len(original)] = original
            return
        block, peak, original = scaled_rows(source, start, stop, mode, raw)
        scales[start:stop] = peak
        ranking[start:stop] = stable_smallest(block, width)
        if out is not None and start < probes:
            out[start : start + len(original)] = original

    for _ in parallel_blocks(block_lists, range(0, size, step)):
        pass
    return ranking, scales


def chunked_lists(
    gram: np.ndarray, start: int, size: int, probes: int, width: int, mode: str, original: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`scaled_rows` + :func:`~galleria.vectors.stable_smallest` from a cosine Gram block.

    Equal bit for bit to ranking the distances ``1 - gram`` transformed and scaled as
    :func:`scaled_rows` does, without transforming the whole block. The ranking key of every mode
    (reference: ``(1 - g)² / peak`` in float32; paper: ``max(1 - g, 0)``, the diagonal 0) never
    increases with the similarity ``g`` while ``g ≤ 1``, and the row scale is the key's value at the
    row's smallest or largest ``g``. Each row is cut into ``CHUNK`` strided chunks (columns ``q``,
    ``q + m``, ``q + 2m``, … with ``m`` = padded size / ``CHUNK``, the padding ``-inf``); the
    ``width + blocks.SPARE_CHUNKS`` chunks of largest maximum hold the ``width`` first ranked members
    whenever the ``width``-th key among their entries is below the key of the best chunk left out
    (every entry left out then has a larger key). Only those entries are transformed and ranked,
    by (key, column); rows where the check fails are ranked from the whole row. Returns
    ``(peak, ranking, original)`` as
    :func:`neighbour_lists` stores them (``original``: the probe rows' scaled probe→gallery part).
    """
    rows, padded = gram.shape
    chunk = blocks.CHUNK
    stride = padded // chunk  # chunk q: columns q, q + stride, q + 2·stride, …
    local = np.arange(rows)
    members = start + local
    one = np.float32(1.0)
    if mode == "paper":
        saved = gram[local, members].copy()
        gram[local, members] = np.inf  # the diagonal: key 0 (1 - inf floored), chosen first
    maxima = gram.reshape(rows, chunk, stride).max(axis=1)  # (rows, stride): maximum of each chunk
    lowest = gram[:, :size].min(axis=1)
    if mode == "reference":
        highest = maxima.max(axis=1)
        peak = np.maximum(np.square(one - lowest), np.square(one - highest))
        peak[peak <= 0] = 1
    else:
        peak = np.maximum(one - lowest, 0.0).astype(np.float64)
        peak[peak <= 0] = 1

    def key(similarity: np.ndarray, scale: np.ndarray) -> np.ndarray:
        if mode == "reference":
            squared = np.square(one - similarity)
            return np.asarray(squared / scale)
        return np.asarray(np.maximum(one - similarity, 0.0))

    kept = width + blocks.SPARE_CHUNKS
    order = np.argpartition(-maxima, kept, axis=1)
    chosen = np.sort(order[:, :kept], axis=1)
    left_out = maxima[local, order[:, kept]]  # the best chunk maximum left out
    # Columns of the chosen chunks in increasing order (part-major: part·stride + q, q < stride).
    columns = (chosen[:, None, :] + stride * np.arange(chunk)[None, :, None]).reshape(rows, -1)
    keys = key(gram.reshape(-1)[(local * padded)[:, None] + columns], peak[:, None])  # padding: +inf
    ranking, last_key, tied = first_in_order(keys, columns, width)
    sound = ~tied & (last_key < key(left_out, peak))
    if mode == "reference":
        sound &= left_out <= one  # the key grows again above g = 1
    if mode == "paper":
        gram[local, members] = saved
    redo = np.flatnonzero(~sound)
    if redo.size:  # near-ties at the cut: rank those rows whole, as scaled_rows does
        whole = np.subtract(one, gram[redo, :size])
        if mode == "reference":
            np.square(whole, out=whole)
            whole /= peak[redo, None]
        else:
            np.maximum(whole, 0.0, out=whole)
            whole[np.arange(redo.size), members[redo]] = 0.0
        ranking[redo] = stable_smallest(whole, width)
    last = max(0, min(start + rows, probes) - start) if original else 0
    part = gram[:last, probes:size]
    if mode == "reference":
        scaled = np.asarray(np.square(one - part) / peak[:last, None], dtype=np.float32)
    else:
        scaled = np.asarray(np.maximum(one - part, 0.0) / peak[:last, None], dtype=np.float32)
    return peak, ranking, scaled


def first_in_order(
    keys: np.ndarray, columns: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``width`` smallest keys of every row, ordered by (key, column), and a flag for unsure rows.

    Returns ``(ranked columns, width-th key, tied)``; ``tied`` marks rows whose ``width``-th and
    ``width + 1``-th keys are equal (the choice among equal keys outside the partition is not known
    to be the lowest columns): those rows' first two results are not to be used.
    """
    rows = np.arange(keys.shape[0])[:, None]
    part = np.argpartition(keys, width, axis=1)[:, : width + 1]
    values = keys[rows, part]
    where = columns[rows, part]
    order = np.lexsort((where, values), axis=-1)
    values = values[rows, order]
    tied = values[:, width - 1] == values[:, width]
    return np.ascontiguousarray(where[rows, order[:, :width]]), values[:, width - 1], tied
