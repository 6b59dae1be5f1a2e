"""How much work each pass of the full re-ranking (:mod:`galleria.rerank.full`) takes at once.

The values bound memory and set the grain of the work handed to threads; none of them changes a
result (every split into blocks gives the same values bit for bit). The modules of the full
re-ranking read them from here at call time, so a test may set smaller ones on this module.
"""

from __future__ import annotations

#: Elements per block of distance rows (float64: 32 MB).
BLOCK_ELEMENTS = 1 << 22
#: Blocks of rows computed from features in the first pass: up to this many times the rows of
#: ``BLOCK_ELEMENTS``, and no more than ``PRODUCT_ROWS`` rows unless a block already holds more. A BLAS
#: product of few rows against the whole set repacks all the features for every block: at MSMT17
#: size (44 rows a block) that nearly doubled the time of the products; from about 200 rows on, larger
#: blocks gain little and cost memory. A row's values are the same in any block.
PRODUCT_BLOCKS = 4
PRODUCT_ROWS = 192
#: Columns per strided chunk of the fast neighbour search on cosine features
#: (:func:`galleria.rerank._full_neighbours.chunked_lists`).
CHUNK = 16
#: Chunks taken beyond the neighbour-list width (a margin that keeps the check of the cut passing).
SPARE_CHUNKS = 2
#: Probe×gallery×column triples gathered at once for the Jaccard sums (about 100 bytes each of working
#: memory; 2M keeps that near 200 MB and was faster than 8M on a 2-core machine, 10k × 9k, 64-d).
TRIPLES = 1 << 21


def row_step(size: int) -> int:
    """Rows per block of distance rows over a set of ``size`` members (at least one)."""
    return max(1, BLOCK_ELEMENTS // size)
