"""Duplicates at scale: ``galleria.duplicates`` on 1,000,000 × 128 vectors, time and peak memory.

The clustered unit-vector mixture of ``bench_scale.py``; 1 % of the rows are replaced by near copies
of other rows (the row plus Gaussian noise of norm about 0.02, renormalised: a cosine distance of
about 2·10⁻⁴), so the planted pairs are known. The store is made from the vectors (an exact index,
no pixel digests: this measures the near-duplicate path, the neighbor graph and the stars).
The groups are star groups with the default ``keep="best"`` and picture check (the paths are not
files: nothing is read, every pair within the threshold is a copy). Recall = planted pairs found in
one group; precision = found pairs that are planted pairs or lie
within the threshold anyway (two generated vectors that close are duplicates too). One JSON object::

    python benchmarks/experiments/bench_duplicates_scale.py --rows 1000000 --threshold 0.001
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suites"))  # bench_scale: the vectors

from bench_scale import peak_rss_mb, vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--share", type=float, default=0.01, help="share of rows replaced by near copies")
    parser.add_argument("--threshold", type=float, default=0.001)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()

    from galleria import InMemoryImageEmbeddingStore, duplicates

    data = vectors(args.rows, args.dim, seed=3)
    rng = np.random.default_rng(5)
    count = int(args.rows * args.share)
    chosen = rng.choice(args.rows, size=2 * count, replace=False)
    sources, copies = chosen[:count], chosen[count:]
    noise = rng.normal(size=(count, args.dim)).astype(np.float32) * (0.02 / np.sqrt(args.dim))
    data[copies] = data[sources] + noise
    data[copies] /= np.linalg.norm(data[copies], axis=1, keepdims=True)
    paths = [f"/g/{row:07d}.png" for row in range(args.rows)]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, data)
    del data  # the store holds its own copy; the check below reads it back
    rss_before = peak_rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    groups = duplicates(store, threshold=args.threshold, k=args.k)
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    from galleria.curation.threshold import store_threshold

    calibrated, basis = store_threshold(store)  # what a run without --threshold would apply (same graph)
    found = {
        pair
        for group in groups
        for pair in itertools.combinations(sorted(int(p[3:10]) for p in group.paths), 2)
    }
    planted = {tuple(sorted((int(a), int(b)))) for a, b in zip(sources, copies, strict=True)}
    hits = len(planted & found)
    others = np.array(sorted(found - planted), dtype=np.int64).reshape(-1, 2)
    close = 0
    if len(others):  # a found pair that is no planted one is still right if it lies within the threshold
        left, right = (
            store.embeddings_of([paths[i] for i in others[:, 0]]),
            store.embeddings_of([paths[i] for i in others[:, 1]]),
        )
        close = int(np.sum(1.0 - np.sum(left * right, axis=1) <= args.threshold))
    print(
        json.dumps(
            {
                "rows": args.rows,
                "dim": args.dim,
                "planted_pairs": len(planted),
                "threshold": args.threshold,
                "calibrated_threshold": round(calibrated, 6),
                "calibrated_rule": basis["rule"],
                "k": args.k,
                "groups": len(groups),
                "seconds": round(seconds, 1),
                "cpu_seconds": round(cpu_seconds, 1),
                "peak_rss_mb_before": round(rss_before, 1),
                "peak_rss_mb": round(peak_rss_mb(), 1),
                "recall": round(hits / len(planted), 4),
                "precision": round((hits + close) / max(1, len(found)), 4),
                "found_pairs": len(found),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
