"""HNSW at a million vectors: build time (wall and CPU), faiss threads, memory, then recall@10 and
queries/s for several ``search_candidates`` on the same graph, side by side.

Run ``.venv/bin/python benchmarks/experiments/bench_hnsw.py --rows 1000000 --dim 128`` (add ``--graph-degree``
/ ``--build-candidates`` to try other graphs). Data: ``bench_scale.vectors`` (clustered unit
vectors, space ip), 1,000 queries from the same mixture (another seed); exact top-10 by blocked
inner products over the same array (no second copy). One process: the index's memory is the growth
of RSS during the add; the peak includes the input and the exact neighbours' blocks. The build
uses every thread faiss is allowed (``num_threads`` None).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

_BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: the shared helpers and the other suites
sys.path.insert(0, str(_BENCH / "suites"))
sys.path.insert(0, str(_BENCH))

from bench_scale import vectors  # noqa: E402

BLOCK = 100_000


def status_mb(field: str = "VmHWM") -> float:
    """A memory figure of this process from /proc (VmHWM: peak RSS, VmRSS: current RSS), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def exact_top10(data: np.ndarray, queries: np.ndarray) -> np.ndarray:
    best_scores = np.full((queries.shape[0], 0), -np.inf, dtype=np.float32)
    best_ids = np.zeros((queries.shape[0], 0), dtype=np.int64)
    for start in range(0, data.shape[0], BLOCK):
        scores = queries @ data[start : start + BLOCK].T
        top = np.argpartition(-scores, 10, axis=1)[:, :10]
        best_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, axis=1)], axis=1)
        best_ids = np.concatenate([best_ids, top + start], axis=1)
        keep = np.argsort(-best_scores, axis=1, kind="stable")[:, :10]
        best_scores = np.take_along_axis(best_scores, keep, axis=1)
        best_ids = np.take_along_axis(best_ids, keep, axis=1)
    return best_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--graph-degree", type=int, default=None)
    parser.add_argument("--build-candidates", type=int, default=None)
    parser.add_argument("--widths", default="16,32,64,128,256")
    options = parser.parse_args()
    import faiss

    from galleria.index import HnswIndex

    data = vectors(options.rows, options.dim, seed=1)
    queries = vectors(1_000, options.dim, seed=2)
    truth = exact_top10(data, queries)
    params = {
        key: value
        for key, value in (
            ("graph_degree", options.graph_degree),
            ("build_candidates", options.build_candidates),
        )
        if value is not None
    }
    index = HnswIndex("ip", **params)
    before = status_mb("VmRSS")
    load = os.getloadavg()[0]
    threads = faiss.omp_get_max_threads()
    wall, cpu = time.perf_counter(), time.process_time()
    index.add(data)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    graph_mb = status_mb("VmRSS") - before
    print(
        f"HNSW {index.params()}, {options.rows:,} × {options.dim}: build {wall:.0f} s wall, {cpu:.0f} s CPU "
        f"({cpu / wall:.2f} cores busy; faiss threads {threads}; load average {load:.1f} → "
        f"{os.getloadavg()[0]:.1f}); peak RSS {status_mb():.0f} MB; the index adds {graph_mb:.0f} MB "
        f"of RSS (vectors + graph; the input held besides: {data.nbytes / 1e6:.0f} MB)",
        flush=True,
    )
    print("\n| search_candidates | recall@10 | QPS (all threads) |\n|---:|---:|---:|")
    for width in [int(w) for w in options.widths.split(",")]:
        index.search(queries[:20], 10, search_candidates=width)
        start = time.perf_counter()
        found, _ = index.search(queries, 10, search_candidates=width)
        seconds = time.perf_counter() - start
        recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth, strict=True)]))
        print(f"| {width} | {recall:.3f} | {len(queries) / seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
