"""Benchmark: issue 17 §5's two short wall-clock figures, side by side, in one run (≤ 4 min, quiet machine).

Run ``python benchmarks/experiments/bench_speed.py [--pyvisim-python PATH]``. Prints one table:

* full k-reciprocal re-ranking at Market-1501 size (3,368 × 15,913 × 256, the synthetic features of
  ``bench_protocols.py``, reference mode, k1 = 20, k2 = 6, λ = 0.3) from features: the whole matrix
  (``k_reciprocal_rerank_features``) and streamed into ``reid_evaluate``; each in its own child
  process, best of ``--rounds``, wall and CPU seconds (CPU: user + system over all threads) — target
  ≤ 3 s wall;
* pool 100 (gallery of 20,000 unit 512-d vectors, 500 queries, the pools of ``bench_rerank.py``):
  ``KReciprocalReranker.rerank_batch`` against pyvisim 1.0's ``KReciprocalReranker.rerank`` held to
  one BLAS thread (``OPENBLAS_NUM_THREADS=1``, in pyvisim's own environment: ``pip install
  pyvisim==1.0.0 faiss-cpu``), wall ms per query, galleria timed before and after pyvisim, best of
  the runs — target ≥ 5×.

The 1-minute load average is printed beside each figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parents[1] / "suites"  # benchmarks/suites/: bench_protocols, bench_rerank
sys.path.insert(0, str(HERE))

import bench_protocols  # noqa: E402
import bench_rerank  # noqa: E402

MARKET_CHILD = """
import json, resource, sys, time
import numpy as np
from galleria import iter_k_reciprocal_rerank_features, k_reciprocal_rerank_features
from galleria.metrics import reid_evaluate
kind, folder = sys.argv[1], sys.argv[2]
probe, gallery = np.load(folder + "/probe.npy"), np.load(folder + "/gallery.npy")
labels = [np.load(folder + f"/{n}.npy") for n in ("probe_ids", "gallery_ids", "probe_cams", "gallery_cams")]
settings = {"k1": 20, "k2": 6, "lambda_value": 0.3, "mode": "reference"}
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
started_cpu, started = cpu(), time.perf_counter()
if kind == "matrix":
    result = k_reciprocal_rerank_features(probe, gallery, **settings)
    figure = float(result[:, :10].mean())
else:
    figure = reid_evaluate(iter_k_reciprocal_rerank_features(probe, gallery, **settings), *labels).mAP
print(json.dumps({"seconds": time.perf_counter() - started, "cpu": cpu() - started_cpu, "figure": figure}))
"""


def load() -> float:
    return os.getloadavg()[0]


def market(rounds: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench_speed_") as name:
        bench_protocols.reid_data("market1501", Path(name))
        for kind in ("matrix", "streamed"):
            runs = []
            for _ in range(rounds):
                before = load()
                done = subprocess.run(
                    [sys.executable, "-c", MARKET_CHILD, kind, name],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs.append({**json.loads(done.stdout.strip().splitlines()[-1]), "load": before})
            results[kind] = min(runs, key=lambda run: run["seconds"])
    return results


def pool(pyvisim_python: str | None, rounds: int) -> dict[str, Any]:
    from galleria import InMemoryImageEmbeddingStore, KReciprocalReranker

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(1_000, 512))
    gallery, _ = bench_rerank.clustered(rng, centres, 20_000, 0.6)
    queries, _ = bench_rerank.clustered(rng, centres, 500, 0.6)
    paths = [f"g{i:05d}.jpg" for i in range(20_000)]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, gallery, space="cosine")
    reranker = KReciprocalReranker(store, k1=20, k2=6, lambda_value=0.3)
    pools = store.retrieve_by_vector(queries, k=100)
    reranker.rerank_batch(pools[:5], top_k=10)  # warm-up

    from galleria.retrieval import RetrievalConfig, Searcher

    params = {"k1": 20, "k2": 6, "lambda_value": 0.3}
    searcher = Searcher(store, RetrievalConfig("pool", rerank=True, pool=100, rerank_params=params))

    def ours() -> tuple[float, float, float]:
        """Best wall and CPU ms per query of ``rerank_batch``, and best wall of the one path, interleaved."""
        best_wall = best_cpu = best_path = float("inf")
        for _ in range(rounds):
            cpu, wall = time.process_time(), time.perf_counter()
            reranker.rerank_batch(pools, top_k=10)
            best_wall = min(best_wall, time.perf_counter() - wall)
            best_cpu = min(best_cpu, time.process_time() - cpu)
            wall = time.perf_counter()
            searcher.finish(pools, 10)  # the one retrieval path on the same pools: what every caller runs
            best_path = min(best_path, time.perf_counter() - wall)
        scale = 1e3 / len(pools)
        return best_wall * scale, best_cpu * scale, best_path * scale

    result: dict[str, Any] = {"load": load()}
    first = ours()
    if pyvisim_python is not None:
        index = {path: row for row, path in enumerate(store.paths)}
        with tempfile.TemporaryDirectory(prefix="bench_speed_pyvisim_") as name:
            folder = Path(name)
            np.save(folder / "gallery.npy", store.embeddings)
            np.save(folder / "rows.npy", np.array([[index[c.path] for c in p] for p in pools]))
            np.save(folder / "scores.npy", np.array([[c.score for c in p] for p in pools]))
            command = [pyvisim_python, str(HERE / "bench_rerank.py"), "--child", "pyvisim", "--folder", name]
            one = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            done = subprocess.run(
                command, capture_output=True, text=True, check=True, env={**os.environ, **one}
            )
            result["pyvisim_ms"] = json.loads(done.stdout.strip().splitlines()[-1])["ms_per_query"]
    second = ours()
    result["batch_ms"], result["batch_cpu_ms"] = min(first[0], second[0]), min(first[1], second[1])
    result["path_ms"] = min(first[2], second[2])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyvisim-python", default=None, help="python of an environment with pyvisim 1.0")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    full = market(args.rounds)
    pools = pool(args.pyvisim_python, args.rounds)
    print("| figure | wall | CPU | load | target |")
    print("|---|---:|---:|---:|---|")
    for kind, label in (("matrix", "whole matrix"), ("streamed", "streamed + reid_evaluate")):
        run = full[kind]
        print(
            f"| Market-1501 size, reference mode, {label} | {run['seconds']:.2f} s | {run['cpu']:.2f} s | "
            f"{run['load']:.1f} | ≤ 3 s wall |"
        )
    print(
        f"| pool 100, `rerank_batch` | {pools['batch_ms']:.3f} ms/query | "
        f"{pools['batch_cpu_ms']:.3f} ms/query | {pools['load']:.1f} | |"
    )
    print(f"| pool 100, `Searcher.finish` (the one path) | {pools['path_ms']:.3f} ms/query | – | | |")
    if "pyvisim_ms" in pools:
        ratio = pools["pyvisim_ms"] / pools["batch_ms"]
        print(f"| pool 100, pyvisim 1.0 on one BLAS thread | {pools['pyvisim_ms']:.3f} ms/query | – | | |")
        print(f"| pool 100, pyvisim ÷ galleria | {ratio:.2f}× | | | ≥ 5× |")


if __name__ == "__main__":
    main()
