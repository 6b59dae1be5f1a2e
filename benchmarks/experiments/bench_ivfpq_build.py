"""Profile the IVF-PQ build at its defaults, phase by phase: faiss's own training settings against
galleria's bounded ones (:class:`galleria.index._ivfpq_train.TrainingBudget`), side by side.

Run ``.venv/bin/python benchmarks/experiments/bench_ivfpq_build.py --rows 200000 --dim 128``. Both builds use
the same data (``bench_scale.vectors``: clustered unit vectors, space ip) and every parameter at
its default; only the training budget differs. Each phase is wall seconds
(:attr:`IvfPqIndex.build_seconds`); CPU seconds are the process's for the whole build. Recall@10 is
against exact search on 1,000 queries from the same mixture (another seed).
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

from galleria.index import ExactIndex, IvfPqIndex  # noqa: E402
from galleria.index._ivfpq_train import FAISS_DEFAULT_BUDGET, TrainingBudget  # noqa: E402

PHASES = (
    "opq rotation",
    "coarse k-means",
    "PQ codebooks",
    "encoding",
    "exact sample neighbours",
    "probe search",
)


def build(data: np.ndarray, queries: np.ndarray, truth: np.ndarray, budget: TrainingBudget) -> dict:
    index = IvfPqIndex("ip")
    index.training_budget = budget
    wall, cpu = time.perf_counter(), time.process_time()
    index.add(data)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    found, _ = index.search(queries, 10)
    recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth, strict=True)]))
    return {
        "seconds": index.build_seconds,
        "wall": wall,
        "cpu": cpu,
        "recall": recall,
        "params": index.params(),
        "report": index.build_report,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=128)
    options = parser.parse_args()
    data = vectors(options.rows, options.dim, seed=1)
    queries = vectors(1_000, options.dim, seed=2)
    exact = ExactIndex("ip")
    exact.add(data)
    truth = exact.search(queries, 10)[0]
    del exact
    load = os.getloadavg()[0]
    runs = {
        "faiss defaults (before)": build(data, queries, truth, FAISS_DEFAULT_BUDGET),
        "bounded (after)": build(data, queries, truth, TrainingBudget()),
    }
    names = list(runs)
    print(
        f"IVF-PQ build at its defaults, {options.rows:,} × {options.dim}, space ip, "
        f"faiss threads {__import__('faiss').omp_get_max_threads()}, load average "
        f"{load:.1f} → {os.getloadavg()[0]:.1f}\n"
    )
    print("| phase (wall s) | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for phase in PHASES:
        if any(phase in run["seconds"] for run in runs.values()):
            cells = [f"{run['seconds'].get(phase, 0.0):.1f}" for run in runs.values()]
            print(f"| {phase} | " + " | ".join(cells) + " |")
    print("| **total wall** | " + " | ".join(f"**{run['wall']:.1f}**" for run in runs.values()) + " |")
    print("| total CPU | " + " | ".join(f"{run['cpu']:.1f}" for run in runs.values()) + " |")
    print(
        "| chosen lists, M×bits, probes | "
        + " | ".join(
            f"{r['params']['lists']}, {r['params']['subquantizers']}×{r['params']['bits']}, "
            f"{r['params']['probe_lists']}"
            for r in runs.values()
        )
        + " |"
    )
    print(
        "| build-time recall@10 | "
        + " | ".join(f"{run['report']['recall_at_10']:.3f}" for run in runs.values())
        + " |"
    )
    print(
        "| recall@10, 1,000 queries | " + " | ".join(f"{run['recall']:.3f}" for run in runs.values()) + " |"
    )


if __name__ == "__main__":
    main()
