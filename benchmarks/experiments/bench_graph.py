"""The gallery's neighbour graph at scale: time, peak memory and recall against exact neighbours.

Run ``.venv/bin/python benchmarks/experiments/bench_graph.py --rows 1000000 --k 30`` (the issue's
target: ≤ 10 min,
≤ 2 GB peak RSS, recall@30 ≥ 0.95 on 2,000 sampled items) and ``--rows 100000 --method exact
--brute-force`` (the exact graph equals brute force). Vectors: ``bench_scale.vectors``, the clustered
unit-vector mixture the other scale benchmarks use, 128-D, cosine space. The graph is built by the
pure core (:func:`galleria.index.neighbor_graph.build_graph`), as ``galleria.neighbor_graph`` builds
it for a store; peak RSS is the whole process's (``resource.getrusage``), the vectors included.
Brute force: for each sampled item, a full stable argsort of its exact distances to every item.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

_BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: the shared helpers and the other suites
sys.path.insert(0, str(_BENCH / "suites"))
sys.path.insert(0, str(_BENCH))

from bench_scale import peak_rss_mb, vectors  # noqa: E402

from galleria.distances import pairwise_distances  # noqa: E402
from galleria.index.neighbor_graph import EXACT_LIMIT, build_graph, exact_graph, graph_recall, hnsw_graph  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--k", type=int, default=30)
    parser.add_argument("--method", default="auto", choices=("auto", "exact", "hnsw", "ivf"))
    parser.add_argument("--sample", type=int, default=2000)
    parser.add_argument("--ef-search", type=int, default=128, help="HNSW efSearch (the library's default)")
    parser.add_argument("--m", type=int, default=32, help="HNSW M (the library's default)")
    parser.add_argument("--ef-construction", type=int, default=80, help="HNSW efConstruction (the default)")
    parser.add_argument("--brute-force", action="store_true", help="compare sampled rows with a full sort")
    args = parser.parse_args()
    start = time.perf_counter()
    data = vectors(args.rows, args.dim, seed=1)
    generated = time.perf_counter() - start
    rss_data = peak_rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()

    def report(what: str) -> None:
        print(
            f"{time.perf_counter() - wall:8.1f} s wall, {time.process_time() - cpu:8.1f} s cpu, "
            f"{peak_rss_mb():7.1f} MB peak: {what}",
            file=sys.stderr,
            flush=True,
        )

    if args.method == "hnsw" or (args.method == "auto" and args.rows > EXACT_LIMIT):
        ids, distances = hnsw_graph(
            data,
            args.k,
            "cosine",
            m=args.m,
            ef_construction=args.ef_construction,
            ef_search=args.ef_search,
            report=report,
        )
        method = "hnsw"
    else:
        ids, distances, method = build_graph(data, args.k, "cosine", args.method)
    report("graph done")
    out: dict[str, object] = {
        "rows": args.rows,
        "dim": args.dim,
        "k": args.k,
        "method": method,
        "ef_search": args.ef_search if method == "hnsw" else None,
        "m": args.m if method == "hnsw" else None,
        "ef_construction": args.ef_construction if method == "hnsw" else None,
        "generate_s": round(generated, 1),
        "graph_s": round(time.perf_counter() - wall, 1),
        "graph_cpu_s": round(time.process_time() - cpu, 1),
        "peak_rss_mb_after_data": round(rss_data, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "graph_mb": round((ids.nbytes + distances.nbytes) / 2**20, 1),
    }
    rows = np.sort(
        np.random.default_rng(7).choice(args.rows, size=min(args.sample, args.rows), replace=False)
    )
    wall = time.perf_counter()
    exact, _ = exact_graph(data, args.k, "cosine", rows=rows)
    out["recall_at_k"] = round(graph_recall(ids[rows], exact), 5)
    out["recall_sample"] = int(rows.size)
    out["exact_sample_s"] = round(time.perf_counter() - wall, 1)
    if args.brute_force:
        equal, gap, beyond = 0, 0.0, 0
        for row in rows:  # one row at a time: float32 products round a little differently than in blocks
            line = pairwise_distances(data[row : row + 1], data, "cosine")[0]
            line[row] = np.inf
            order = np.argsort(line, kind="stable")[: args.k]
            same = np.array_equal(order, ids[row])
            equal += int(same)
            gap = max(gap, float(np.abs(line[order] - distances[row]).max()))
            # beyond rounding: at some rank the two lists' items lie more than 1e-6 apart in distance
            beyond += int(np.abs(line[order] - line[ids[row]]).max() > 1e-6)
        out["brute_force_equal_id_rows"] = f"{equal}/{rows.size}"
        out["brute_force_max_distance_gap"] = gap
        out["brute_force_rows_differing_beyond_rounding"] = beyond
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
