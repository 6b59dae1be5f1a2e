"""The neighbour graph's construction on Ray tasks against the one-process build, side by side.

Run ``.venv/bin/python benchmarks/experiments/bench_ray_graph.py --rows 100000`` (local
``ray.init(num_cpus=2)``). Vectors: ``bench_scale.vectors`` (the clustered 128-D unit mixture,
cosine), k = 30. Builds, in one process and in this order: the one-process inverted-file graph
(:func:`galleria.index.neighbor_graph.approximate_graph`, defaults: cells of 512 items, 16
probed), the same on Ray (:func:`galleria.engines.ray_graph.ray_ivf_graph`: plan on the driver,
shards on Ray tasks), and with ``--exact`` the exact graph for reference. Reports wall and CPU
seconds of each (the Ray build's CPU is the driver's only; its tasks run in worker processes), the
Ray start-up, whether the two graphs are equal bit for bit, and recall@30 against exact neighbours
of 2,000 sampled rows. Prints one JSON object.

``--costs 100000 200000`` instead measures, per size, the plan's cost on the driver (k-means,
assignment, probes: it grows as n²/cell_size) and the first shard's cost per item (constant: 8,192
candidates an item), one JSON line each — the per-item costs ``docs/scaling.md`` projects 10⁷ from.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

_BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_BENCH / "suites"))
sys.path.insert(0, str(_BENCH))

from bench_scale import peak_rss_mb, vectors  # noqa: E402

from galleria.index import ivf_graph  # noqa: E402
from galleria.index.neighbor_graph import approximate_graph, exact_graph, graph_recall  # noqa: E402


def costs(rows: int, k: int) -> None:
    data = vectors(rows, 128, seed=1)
    wall, cpu = time.perf_counter(), time.process_time()
    plan = ivf_graph.plan_ivf_graph(data, k, "cosine", rows // 512, 16, 0)
    plan_wall, plan_cpu = time.perf_counter() - wall, time.process_time() - cpu
    wall, cpu = time.perf_counter(), time.process_time()
    members, _, _ = ivf_graph.ivf_shard(data, ivf_graph.shard_inputs(plan, 0), k, "cosine")
    shard_wall, shard_cpu = time.perf_counter() - wall, time.process_time() - cpu
    figures = {
        "rows": rows,
        "cells": rows // 512,
        "plan_wall_s": round(plan_wall, 2),
        "plan_cpu_s": round(plan_cpu, 2),
        "shard0_items": int(members.size),
        "shard0_wall_s": round(shard_wall, 2),
        "shard0_cpu_s": round(shard_cpu, 2),
        "shard_cpu_us_per_item": round(1e6 * shard_cpu / members.size, 1),
    }
    print(json.dumps(figures), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=30)
    parser.add_argument("--sample", type=int, default=2000)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--exact", action="store_true", help="also time the exact graph")
    parser.add_argument("--costs", type=int, nargs="*", help="measure the plan and a shard at these sizes")
    args = parser.parse_args()
    if args.costs:
        for rows in args.costs:
            costs(rows, args.k)
        return
    data = vectors(args.rows, 128, seed=1)
    out: dict[str, object] = {"rows": args.rows, "k": args.k}
    wall, cpu = time.perf_counter(), time.process_time()
    plan = ivf_graph.plan_ivf_graph(data, args.k, "cosine", args.rows // 512, 16, 0)
    out["plan_s"] = round(time.perf_counter() - wall, 2)
    out["shards"] = plan.shard_count
    wall, cpu = time.perf_counter(), time.process_time()
    local_ids, local_distances = approximate_graph(data, args.k, "cosine")
    out["one_process_s"], out["one_process_cpu_s"] = (
        round(time.perf_counter() - wall, 2),
        round(time.process_time() - cpu, 2),
    )
    import ray

    from galleria.engines.ray_graph import ray_ivf_graph

    wall = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    out["ray_start_s"] = round(time.perf_counter() - wall, 2)
    wall, cpu = time.perf_counter(), time.process_time()
    ids, distances = ray_ivf_graph(data, args.k, "cosine")
    out["ray_s"], out["ray_driver_cpu_s"] = (
        round(time.perf_counter() - wall, 2),
        round(time.process_time() - cpu, 2),
    )
    ray.shutdown()
    out["ray_over_one_process"] = round(out["ray_s"] / out["one_process_s"], 3)  # type: ignore[operator]
    out["bit_equal"] = (
        ids.tobytes() == local_ids.tobytes() and distances.tobytes() == local_distances.tobytes()
    )
    rows = np.sort(
        np.random.default_rng(7).choice(args.rows, size=min(args.sample, args.rows), replace=False)
    )
    truth, _ = exact_graph(data, args.k, "cosine", rows=rows)
    out["recall_at_k"] = round(graph_recall(ids[rows], truth), 5)
    if args.exact:
        wall, cpu = time.perf_counter(), time.process_time()
        exact_graph(data, args.k, "cosine")
        out["exact_s"], out["exact_cpu_s"] = (
            round(time.perf_counter() - wall, 2),
            round(time.process_time() - cpu, 2),
        )
    out["peak_rss_mb"] = round(peak_rss_mb(), 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
