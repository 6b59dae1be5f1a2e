"""Where the full re-ranking reads its raw distances: three given matrices, or features.

Both sources hand out fresh arrays of raw distance rows (``rows``) and the raw distances of
scattered (row, column) pairs (``pairs``) over the set of all probes followed by all gallery items;
:func:`transform` turns raw values into each mode's (paper: float64 floored at 0 with a zero
diagonal; reference: squared in float32).
"""

from __future__ import annotations

import numpy as np

from galleria.distances import normalize_rows, pairwise_distances
from galleria.rerank import _full_blocks as blocks

__all__ = ["FeatureSource", "MatrixSource", "Source", "transform"]


class MatrixSource:
    """Raw distance rows of the set ``[[pp, pg], [pgᵀ, gg]]`` (or of its transpose), never stacked."""

    def __init__(self, pp: np.ndarray, pg: np.ndarray, gg: np.ndarray, *, transpose: bool) -> None:
        # The transpose of [[pp, pg], [pgᵀ, gg]] is [[ppᵀ, pg], [pgᵀ, ggᵀ]].
        self.pp = pp.T if transpose else pp
        self.pg = pg
        self.gg = gg.T if transpose else gg
        self.probes, self.gallery = pg.shape
        self.size = self.probes + self.gallery
        single = all(matrix.dtype == np.float32 for matrix in (pp, pg, gg))
        self.dtype = np.dtype(np.float32 if single else np.float64)

    def rows(self, start: int, stop: int) -> np.ndarray:
        block = np.empty((stop - start, self.size), dtype=self.dtype)
        split = min(max(self.probes - start, 0), stop - start)
        if split:
            block[:split, : self.probes] = self.pp[start : start + split]
            block[:split, self.probes :] = self.pg[start : start + split]
        if split < stop - start:
            first = start + split - self.probes
            last = stop - self.probes
            block[split:, : self.probes] = self.pg[:, first:last].T
            block[split:, self.probes :] = self.gg[first:last]
        return block

    def pairs(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        values = np.empty(rows.size, dtype=np.float64)
        probes = self.probes
        row_probe = rows < probes
        column_probe = columns < probes
        for row_side, column_side, matrix, flip in (
            (True, True, self.pp, False),
            (True, False, self.pg, False),
            (False, True, self.pg, True),
            (False, False, self.gg, False),
        ):
            picked = (row_probe == row_side) & (column_probe == column_side)
            r = rows[picked] - (0 if row_side else probes)
            c = columns[picked] - (0 if column_side else probes)
            values[picked] = matrix[c, r] if flip else matrix[r, c]
        return values


class FeatureSource:
    """Raw distance rows computed from features, block by block."""

    def __init__(self, probe: np.ndarray, gallery: np.ndarray, metric: str, *, squared: bool = False) -> None:
        features = np.concatenate([probe, gallery]).astype(np.float32)
        self.metric = metric
        self.squared = squared  # euclidean: hand out squared distances
        self.features = normalize_rows(features) if metric == "cosine" else features
        self.norms = np.einsum("ij,ij->i", self.features, self.features)
        self.probes = probe.shape[0]
        self.gallery = gallery.shape[0]
        self.size = self.probes + self.gallery

    def gram(self, start: int, stop: int) -> np.ndarray:
        """Cosine rows ``start:stop`` as a float32 Gram block, padded with ``-inf`` to ``CHUNK`` columns.

        The product is written into the first ``size`` columns of the padded block (BLAS's output
        stride only): its values are those of :meth:`rows`' product bit for bit.
        """
        padded = np.empty((stop - start, -(-self.size // blocks.CHUNK) * blocks.CHUNK), dtype=np.float32)
        padded[:, self.size :] = -np.inf
        np.matmul(self.features[start:stop], self.features.T, out=padded[:, : self.size])
        return padded

    def rows(self, start: int, stop: int) -> np.ndarray:
        if self.metric == "cosine":
            # 1 - cos in place on the Gram block (the same float32 arithmetic as pairwise_distances,
            # without a second block-sized array).
            gram: np.ndarray = self.features[start:stop] @ self.features.T
            np.subtract(np.float32(1.0), gram, out=gram)
            return gram
        block = self.features[start:stop]
        squared = pairwise_distances(block, self.features, "l2")
        return squared if self.squared else np.asarray(np.sqrt(squared))

    def pairs(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        values = np.empty(rows.size, dtype=np.float32)
        step = max(1, blocks.BLOCK_ELEMENTS // max(1, self.features.shape[1]))
        for start in range(0, rows.size, step):
            r = rows[start : start + step]
            c = columns[start : start + step]
            dots = np.einsum("ij,ij->i", self.features[r], self.features[c])
            if self.metric == "cosine":
                values[start : start + step] = 1.0 - dots
            else:
                squared = self.norms[r] + self.norms[c] - 2.0 * dots
                floored = np.maximum(squared, 0.0)
                values[start : start + step] = floored if self.squared else np.sqrt(floored)
        return values


Source = MatrixSource | FeatureSource


def transform(raw: np.ndarray, rows: np.ndarray, columns: np.ndarray, mode: str) -> np.ndarray:
    """Paper: float64, floored at 0, zero diagonal. Reference: squared in float32."""
    if mode == "reference":
        values = np.asarray(raw, dtype=np.float32)  # every source hands out fresh arrays: square in place
        return np.square(values, out=values)
    values = np.maximum(np.asarray(raw, dtype=np.float64), 0.0)
    if values.ndim == 2:  # a block of whole rows: rows[r, 0] is the member in row r
        values[np.arange(values.shape[0]), rows[:, 0]] = 0.0
    else:
        values[rows == columns] = 0.0
    return values
