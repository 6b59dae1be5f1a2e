"""Experiment: the approximate full re-ranking against the exact one at MSMT17 size, side by side.

``python benchmarks/experiments/bench_rerank_approximate.py`` builds the ``msmt17-hard`` features of
``benchmarks/bench_protocols.py`` (11,659 probes × 82,161 gallery items × 256-d) and runs, each in a
fresh child process, in the order given by ``--runs`` (default ``exact symmetric symmetric exact``:
each kind before and after the other, to see the drift of the shared machine's load):

* ``exact``: :func:`galleria.rerank.iter_k_reciprocal_rerank_features` (reference mode, k1 = 20,
  k2 = 6, λ = 0.3) streamed into :func:`galleria.metrics.reid_evaluate`;
* ``symmetric`` / ``hnsw``: :func:`galleria.rerank.approximate.iter_k_reciprocal_rerank_approximate`
  with that graph, the graph built first and timed apart, then the stream into ``reid_evaluate``.

Prints one JSON line per run: wall and CPU seconds (``getrusage``, all threads) in all and per
phase, peak RSS (``VmHWM``), the 1-minute load average before and after, mAP and rank-1, and for
the approximate kinds the share of neighbour lists equal to the exact mode's (its first pass is
not re-run: the lists come from ``--exact-lists``, written by an ``exact`` run of the same data).
Nothing is written in the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "suites"))  # bench_protocols: the re-identification data

from bench_protocols import reid_data  # noqa: E402

K1, K2, LAMBDA = 20, 6, 0.3


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(kind: str, folder: Path) -> None:
    from galleria.metrics import reid_evaluate
    from galleria.rerank import full
    from galleria.rerank.approximate import iter_k_reciprocal_rerank_approximate

    probe, gallery = np.load(folder / "probe.npy"), np.load(folder / "gallery.npy")
    labels = [
        np.load(folder / f"{name}.npy") for name in ("probe_ids", "gallery_ids", "probe_cams", "gallery_cams")
    ]
    settings = {"k1": K1, "k2": K2, "lambda_value": LAMBDA, "mode": "reference"}
    record: dict[str, object] = {"kind": kind, "load_before": os.getloadavg()[0]}
    wall, cpu = time.perf_counter(), cpu_seconds()
    if kind == "exact":
        stream = full.iter_k_reciprocal_rerank_features(probe, gallery, **settings)
        result = reid_evaluate(stream, *labels)
    else:
        from galleria.rerank.approximate import _built_ids

        source, _ = full._feature_source(probe, gallery, "cosine", K1, K2, LAMBDA, "reference")
        ids = _built_ids(source, kind, K1)
        record["graph_wall_s"], record["graph_cpu_s"] = time.perf_counter() - wall, cpu_seconds() - cpu
        lists = folder / "exact_lists.npy"
        if lists.exists():
            exact = np.load(lists)
            record["lists_equal"] = float((exact == ids).mean())
            record["recall"] = float(
                (np.sort(exact, 1)[:, :, None] == np.sort(ids, 1)[:, None, :]).any(2).mean()
            )
        del source
        stream = iter_k_reciprocal_rerank_approximate(probe, gallery, graph=ids, **settings)
        result = reid_evaluate(stream, *labels)
    record.update(
        wall_s=time.perf_counter() - wall,
        cpu_s=cpu_seconds() - cpu,
        peak_mb=peak_rss_mb(),
        load_after=os.getloadavg()[0],
        mAP=result.mAP,
        rank1=float(result.cmc[0]),
    )
    print(json.dumps(record), flush=True)


def exact_lists(folder: Path) -> None:
    """The exact mode's neighbour lists (its first pass alone), for the lists' agreement."""
    from galleria.rerank import full

    probe, gallery = np.load(folder / "probe.npy"), np.load(folder / "gallery.npy")
    source, _ = full._feature_source(probe, gallery, "cosine", K1, K2, LAMBDA, "reference")
    ranking, _ = full._neighbour_lists(source, K1 + 1, "reference", None)
    np.save(folder / "exact_lists.npy", ranking[:, 1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", default=["exact", "symmetric", "symmetric", "exact"])
    parser.add_argument("--size", default="msmt17-hard")
    parser.add_argument("--lists", action="store_true", help="also compare the graph with the exact lists")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--folder", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "lists":
        exact_lists(Path(args.folder))
        return
    if args.child is not None:
        child(args.child, Path(args.folder))
        return
    with tempfile.TemporaryDirectory(prefix="bench_approx_") as name:
        folder = Path(name)
        reid_data(args.size, folder)
        runs = (["lists"] if args.lists else []) + args.runs
        for kind in runs:
            command = [sys.executable, str(HERE), "--child", kind, "--folder", str(folder)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            if kind != "lists":
                print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
