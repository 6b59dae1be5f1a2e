"""Benchmark: approximate full k-reciprocal re-ranking of many probes against a large gallery.

``python benchmarks/experiments/bench_rerank_million.py`` runs issue 27 §2's target size (100,000 probes ×
1,000,000 gallery items × 128-d); ``--probes`` / ``--gallery`` scale it down. Clustered unit
vectors: identity centres (one per 27 gallery items, as in MSMT17) plus Gaussian noise of norm
``--sigma`` (2 by default), cameras drawn at random. The neighbour graph over probes + gallery is
built first (HNSW refined exactly by default, timed apart), then
:func:`galleria.rerank.approximate.prepare_k_reciprocal_approximate` (reference mode, k1 = 20,
k2 = 6, λ = 0.3; the inputs are released once it holds its copy) and its output blocks — what
:func:`galleria.rerank.iter_k_reciprocal_rerank_approximate` yields — stream into
:func:`galleria.metrics.reid_evaluate`. Prints one JSON line: wall and CPU seconds of each phase
(``resource.getrusage``: all threads), peak RSS (``VmHWM``, inputs included) after each phase, the
load average before and after, mAP and rank-1. Nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import numpy as np


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def clustered(probes: int, gallery: int, dim: int, sigma: float, seed: int) -> dict[str, np.ndarray]:
    """Unit identity centres + noise of norm ``sigma``, normalised; ids and cameras."""
    rng = np.random.default_rng(seed)
    identities = max(1, gallery // 27)
    centres = rng.normal(size=(identities, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out: dict[str, np.ndarray] = {}
    for name, count in (("probe", probes), ("gallery", gallery)):
        ids = rng.integers(0, identities, size=count)
        vectors = np.empty((count, dim), dtype=np.float32)
        for start in range(0, count, 65536):  # in blocks: no float64 copy of the whole set
            part = ids[start : start + 65536]
            noise = rng.standard_normal(size=(part.size, dim), dtype=np.float32)
            block = centres[part] + np.float32(sigma / np.sqrt(dim)) * noise
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            vectors[start : start + part.size] = block
        out[name] = vectors
        out[f"{name}_ids"] = ids
        out[f"{name}_cams"] = rng.integers(0, 15, size=count)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=100_000)
    parser.add_argument("--gallery", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--sigma", type=float, default=2.0)
    parser.add_argument("--graph", default="hnsw", choices=("hnsw", "symmetric", "exact", "ivf"))
    args = parser.parse_args()

    from galleria.index.neighbor_graph import build_graph
    from galleria.metrics import reid_evaluate
    from galleria.rerank._common import parallel_blocks
    from galleria.rerank.approximate import prepare_k_reciprocal_approximate

    load_before = os.getloadavg()[0]
    data = clustered(args.probes, args.gallery, args.dim, args.sigma, seed=5)
    inputs_mb = peak_rss_mb()
    phases: dict[str, dict[str, float]] = {}

    wall, cpu = time.perf_counter(), cpu_seconds()
    both = np.concatenate([data["probe"], data["gallery"]])
    if args.graph == "symmetric":
        from galleria.rerank._approximate_graph import symmetric_graph

        ids, method = symmetric_graph(both, 20, "cosine"), "symmetric"
    else:
        ids, _, method = build_graph(both, 20, "cosine", args.graph)
    del both
    phases["graph"] = {"wall_s": time.perf_counter() - wall, "cpu_s": cpu_seconds() - cpu}
    graph_peak = peak_rss_mb()

    wall, cpu = time.perf_counter(), cpu_seconds()
    prepared = prepare_k_reciprocal_approximate(
        data.pop("probe"), data.pop("gallery"), k1=20, k2=6, lambda_value=0.3, mode="reference", graph=ids
    )  # the inputs go: the prepared state holds its own normalised copy
    del ids
    phases["prepare"] = {"wall_s": time.perf_counter() - wall, "cpu_s": cpu_seconds() - cpu}
    prepare_peak = peak_rss_mb()

    wall, cpu = time.perf_counter(), cpu_seconds()
    step, probes = prepared.step, prepared.probes
    stream = parallel_blocks(
        lambda start, nothing: prepared.block(start, min(start + step, probes)), range(0, probes, step)
    )  # what iter_k_reciprocal_rerank_approximate yields, its preparation timed apart
    result = reid_evaluate(
        stream, data["probe_ids"], data["gallery_ids"], data["probe_cams"], data["gallery_cams"]
    )
    phases["re-rank output + reid_evaluate"] = {
        "wall_s": time.perf_counter() - wall,
        "cpu_s": cpu_seconds() - cpu,
    }
    record = {
        "probes": args.probes,
        "gallery": args.gallery,
        "dim": args.dim,
        "graph": method,
        "phases": phases,
        "total_wall_s": sum(phase["wall_s"] for phase in phases.values()),
        "total_cpu_s": sum(phase["cpu_s"] for phase in phases.values()),
        "inputs_mb": inputs_mb,
        "peak_after_graph_mb": graph_peak,
        "peak_after_prepare_mb": prepare_peak,
        "peak_mb": peak_rss_mb(),
        "load": [load_before, os.getloadavg()[0]],
        "mAP": result.mAP,
        "rank1": float(result.cmc[0]),
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
