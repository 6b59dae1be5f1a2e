"""A graph that grows with the library: update after 1 % added and 1 % removed, against a rebuild.

Run ``.venv/bin/python benchmarks/experiments/bench_graph_update.py --rows 100000`` (exact graph,
k = 30) and ``--rows 1000000 --no-rebuild`` (HNSW graph; the rebuild's cost is then the old state's
build, measured in the same run). Vectors: ``bench_scale.vectors`` (the clustered 128-D unit
mixture of the other scale benchmarks, cosine). The old state is ``rows`` items; 1 % of them
(seeded) are removed and 1 % new items of the same mixture added, as ``remove_images`` and
``add_images`` change a store (kept rows in order, then the new ones). The update is
:func:`galleria.index.graph_update.update_graph`; the rebuild is
:func:`galleria.index.neighbor_graph.build_graph` of the new state, same method. Recall@k of both
against exact neighbours of 2,000 sampled rows of the new state (and of the added rows among them).
Prints one JSON object.
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

from galleria.index.graph_update import update_graph  # noqa: E402
from galleria.index.neighbor_graph import build_graph, exact_graph, graph_recall  # noqa: E402


def _timed(work):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, round(time.perf_counter() - wall, 2), round(time.process_time() - cpu, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=30)
    parser.add_argument("--share", type=float, default=0.01, help="share added and share removed")
    parser.add_argument("--sample", type=int, default=2000)
    parser.add_argument(
        "--no-rebuild", action="store_true", help="take the old build's cost as the rebuild's"
    )
    args = parser.parse_args()
    changed = int(args.rows * args.share)
    data = vectors(args.rows + changed, 128, seed=1)
    old = data[: args.rows]
    (ids, distances, method), build_s, build_cpu = _timed(lambda: build_graph(old, args.k, "cosine"))
    rng = np.random.default_rng(3)
    keep = np.ones(args.rows, dtype=bool)
    keep[rng.choice(args.rows, changed, replace=False)] = False
    kept = np.full(args.rows, -1, dtype=np.int64)
    kept[keep] = np.arange(int(keep.sum()))
    new = np.concatenate([old[keep], data[args.rows :]])
    (new_ids, _, counts), update_s, update_cpu = _timed(
        lambda: update_graph(new, ids, distances, kept, args.k, "cosine")
    )
    rows = np.sort(rng.choice(len(new), size=min(args.sample, len(new)), replace=False))
    truth, _ = exact_graph(new, args.k, "cosine", rows=rows)
    added = rows[rows >= int(keep.sum())]
    out: dict[str, object] = {
        "rows_old": args.rows,
        "rows_new": len(new),
        "added": changed,
        "removed": changed,
        "k": args.k,
        "method": method,
        "build_old_s": build_s,
        "build_old_cpu_s": build_cpu,
        "update_s": update_s,
        "update_cpu_s": update_cpu,
        "update_counts": counts,
        "recall_updated": round(graph_recall(new_ids[rows], truth), 5),
        "recall_updated_added_rows": round(graph_recall(new_ids[added], truth[np.isin(rows, added)]), 5),
        "recall_sample": int(rows.size),
    }
    if args.no_rebuild:
        old_rows = np.flatnonzero(keep)[rows[rows < int(keep.sum())]]  # the same items in the old state
        old_truth, _ = exact_graph(old, args.k, "cosine", rows=old_rows)
        out["recall_old_build"] = round(graph_recall(ids[old_rows], old_truth), 5)
        out["update_over_build"] = round(update_s / build_s, 4)
    else:
        (rebuilt, _, _), rebuild_s, rebuild_cpu = _timed(lambda: build_graph(new, args.k, "cosine", method))
        out["rebuild_s"], out["rebuild_cpu_s"] = rebuild_s, rebuild_cpu
        out["recall_rebuild"] = round(graph_recall(rebuilt[rows], truth), 5)
        out["update_over_rebuild"] = round(update_s / rebuild_s, 4)
        out["recall_ratio"] = round(out["recall_updated"] / out["recall_rebuild"], 5)  # type: ignore[operator]
        if method == "exact":  # what a store does with a graph "auto" builds exactly: the update stays exact
            (exact_ids, _, _), exact_s, exact_cpu = _timed(
                lambda: update_graph(new, ids, distances, kept, args.k, "cosine", exact=True)
            )
            out["exact_update_s"], out["exact_update_cpu_s"] = exact_s, exact_cpu
            out["exact_update_equals_rebuild"] = bool(np.array_equal(exact_ids, rebuilt))
            out["exact_update_over_rebuild_cpu"] = round(exact_cpu / rebuild_cpu, 4)
    out["peak_rss_mb"] = round(peak_rss_mb(), 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
