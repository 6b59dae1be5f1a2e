"""The full re-ranking after the first pass: expanded sets (Eqs. 3–4), features (Eqs. 7 and 11), d*.

Everything is built on the neighbour lists as sparse matrices (a few dozen non-zeros per row);
:class:`Jaccard` turns blocks of scaled original distances into the final ones (Eqs. 10 and 12).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from galleria.rerank import _full_blocks as blocks
from galleria.rerank._common import parallel_blocks, reciprocal_mask
from galleria.rerank._full_sources import Source, transform

__all__ = ["Jaccard", "expanded_pairs", "query_expansion", "set_features"]


def expanded_pairs(
    ranking: np.ndarray, width: int, half_width: int, mode: str
) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. 3–4 on neighbour lists: the (row, column) pairs of every member's expanded set R*."""
    size = ranking.shape[0]
    if size < 2**31:  # half the memory traffic in the (rows, k1, k1/2, k1) comparison below
        ranking = ranking.astype(np.int32)
    near = ranking[:, :width]
    # R(i, k1) = near[i][reciprocal[i]]; R(q, k1/2) = near[q, :half][reciprocal_half[q]]
    reciprocal = reciprocal_mask(ranking, width, blocks.BLOCK_ELEMENTS)
    reciprocal_half = reciprocal_mask(ranking, half_width, blocks.BLOCK_ELEMENTS)
    half_sizes = reciprocal_half.sum(axis=1)
    keys = [np.flatnonzero(reciprocal) // width * size + near[reciprocal].astype(np.int64)]
    step = max(1, blocks.BLOCK_ELEMENTS // (width * half_width * width))

    def expansion(start: int, nothing: None) -> np.ndarray:  # disjoint rows: any thread
        stop = min(start + step, size)
        heads = near[start:stop]  # q for every (i, a)
        members = ranking[heads, :half_width]  # (rows, width, half): candidates of R(q, k1/2)
        kept = reciprocal_half[heads]
        # |R(i, k1) ∩ R(q, k1/2)|: members of R(q, k1/2) found in R(i, k1).
        inside = np.where(reciprocal[start:stop], heads, -1)  # R(i, k1); -1 matches no member
        found = (members[:, :, :, None] == inside[:, None, None, :]).any(axis=3)
        shared = (found & kept).sum(axis=2)
        counts = half_sizes[heads]
        if mode == "reference":
            accepted = reciprocal[start:stop] & (3 * shared > 2 * counts)
        else:
            accepted = reciprocal[start:stop] & (3 * shared >= 2 * counts)
        take = accepted[:, :, None] & kept
        row, _, _ = np.nonzero(take)
        found_keys: np.ndarray = (row + start).astype(np.int64) * size + members[take]
        return found_keys

    keys.extend(parallel_blocks(expansion, range(0, size, step)))
    unique = np.unique(np.concatenate(keys))
    return unique // size, unique % size


def set_features(
    source: Source, rows: np.ndarray, columns: np.ndarray, scales: np.ndarray, mode: str
) -> sp.csr_matrix:
    """Eq. 7: Gaussian weights on the expanded sets, each row scaled to unit L1 norm."""
    size = source.size
    raw = source.pairs(rows, columns)
    values = transform(raw, rows, columns, mode)
    values = values / scales[rows]
    weights = np.exp(-values).astype(np.float64)
    totals = np.bincount(rows, weights=weights, minlength=size)
    weights /= np.where(totals > 0, totals, 1.0)[rows]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=size))])
    return sp.csr_matrix((weights, columns, indptr), shape=(size, size))


def query_expansion(features: sp.csr_matrix, ranking: np.ndarray, k2: int) -> sp.csr_matrix:
    """Eq. 11: the mean feature of each member's first ``k2`` ranked members (itself included)."""
    size = ranking.shape[0]
    indptr = np.arange(0, size * k2 + 1, k2)
    selector = sp.csr_matrix((np.ones(size * k2), ranking[:, :k2].ravel(), indptr), shape=(size, size))
    averaged = sp.csr_matrix(selector @ features)
    averaged.data /= k2
    return averaged


class Jaccard:
    """Eq. 10 (or the reference's ``1 - m / (2 - m)``) and Eq. 12 for any range of probes.

    ``m = Σ_l min(V[p, l], V[g, l])`` is gathered through an inverted index of the gallery
    features (column l → gallery rows with ``V[g, l] > 0``); pairs that share no column have
    ``m = 0`` and a Jaccard distance of exactly 1 in both modes. For a pair, the terms of ``m`` are
    summed in the order of the probe's feature columns whatever the range, so any split of the
    probes into ranges gives the same values bit for bit.
    """

    def __init__(self, features: sp.csr_matrix, probes: int, gallery: int, lambda_value: float, mode: str):
        self.probes = probes
        self.gallery = gallery
        self.lambda_value = lambda_value
        self.mode = mode
        self.totals = np.asarray(features.sum(axis=1)).ravel()
        self.probe_part = sp.csr_matrix(features[:probes])
        self.inverted = sp.csc_matrix(features[probes:])  # column l → gallery rows holding it
        self.column_counts = np.diff(self.inverted.indptr).astype(np.int64)
        self.nnz_rows = np.repeat(np.arange(probes), np.diff(self.probe_part.indptr))
        per_probe = np.bincount(
            self.nnz_rows, weights=self.column_counts[self.probe_part.indices], minlength=probes
        )
        self.reach = np.concatenate([[0.0], np.cumsum(per_probe)])

    def into(self, out: np.ndarray, first: int) -> None:
        """Turn ``out`` — the scaled original distances of probes ``first:first + len(out)`` — into d*."""
        gallery = self.gallery
        probe_part, inverted, column_counts = self.probe_part, self.inverted, self.column_counts
        most_rows = max(1, blocks.BLOCK_ELEMENTS // gallery)
        end = first + out.shape[0]
        start = first
        while start < end:
            # As many probes as fit both the triple budget and the dense block budget (at least one).
            stop = int(np.searchsorted(self.reach, self.reach[start] + blocks.TRIPLES, side="right")) - 1
            stop = min(max(stop, start + 1), start + most_rows, end)
            low, high = probe_part.indptr[start], probe_part.indptr[stop]
            columns = probe_part.indices[low:high]
            counts = column_counts[columns]
            # One repeat (numpy holds the GIL there); the rest are gathers, which release it.
            owner = np.repeat(np.arange(high - low), counts)  # the probe non-zero of every triple
            positions = (
                np.arange(owner.size) + (inverted.indptr[columns] - (np.cumsum(counts) - counts))[owner]
            )
            minima = np.minimum(probe_part.data[low:high][owner], inverted.data[positions])
            keys = ((self.nnz_rows[low:high] - start) * gallery)[owner] + inverted.indices[positions]
            smallest = np.bincount(keys, weights=minima, minlength=(stop - start) * gallery)
            smallest = smallest.astype(np.float64, copy=False)  # int64 when there is no triple
            weight = self.lambda_value
            view = out[start - first : stop - first]
            if self.mode == "reference":
                # 1 - m / (2 - m) is exactly 1 where m = 0 (no shared column), so the whole block
                # takes the formula: the same values as a pass over the shared pairs only, fewer passes.
                denominator = np.subtract(2.0, smallest)
                np.divide(smallest, denominator, out=smallest)
                np.subtract(1.0, smallest, out=smallest)  # Jaccard distance
                np.multiply(smallest, 1.0 - weight, out=smallest)
                np.multiply(view.ravel(), weight, out=denominator, dtype=np.float64)  # λ·d
                np.add(smallest, denominator, out=smallest)
                view[...] = smallest.reshape(view.shape)
                start = stop
                continue
            shared = np.flatnonzero(smallest)
            low_sum = smallest[shared]
            largest = (
                self.totals[start + shared // gallery] + self.totals[self.probes + shared % gallery] - low_sum
            )
            jaccard = np.ones_like(low_sum)
            np.subtract(1.0, low_sum / np.where(largest > 0, largest, 1.0), out=jaccard, where=largest > 0)
            final = np.multiply(view, weight, dtype=np.float64).ravel()  # λ·d in float64
            mixed = (1.0 - weight) * jaccard + final[shared]
            final += (1.0 - weight) * 1.0  # (1 - λ)·1 + λ·d where no column is shared
            final[shared] = mixed
            view[...] = final.reshape(view.shape)
            start = stop
