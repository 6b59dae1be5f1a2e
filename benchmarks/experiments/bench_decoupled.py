"""Benchmark of decoupled diffusion (Yang et al., AAAI 2019): quality, offline build, online cost.

Run ``.venv/bin/python benchmarks/experiments/bench_decoupled.py`` (tens of minutes on 2 busy cores) or with
``--quick``. Prints one markdown report; every figure of a table comes from the same run.

Part 1 — quality on clustered features: 30 classes × 40 gallery items in 128-d (Gaussian centres,
noise σ per coordinate, ``default_rng(0)``), 10 further queries per class drawn the same way; mAP
over the whole gallery of plain cosine, Iscen et al.'s diffusion (``diffusion_rerank_features``,
its defaults) and decoupled diffusion (``decoupled_diffusion_rerank_features``, the paper's
defaults: k = 50, truncation 1000, query_k = 10, α = 0.99, γ = 3, 20 CG iterations).

Part 2 — scale: a cosine store of N unit vectors in 128-d around N/20 centres (σ = 0.6); in a child
process per N, so its peak RSS (``VmHWM``) is its own: the offline part
(``prepare_offline_diffusion``, defaults) timed in wall and CPU time (``time.process_time``), then
200 queries' pools of 200 (retrieval untimed) re-ranked by every pool re-ranker (``rerank_batch``)
— ms/query side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np


def _clustered(rng: np.random.Generator, centres: np.ndarray, ids: np.ndarray, sigma: float) -> np.ndarray:
    vectors = centres[ids] + rng.normal(0, sigma, (len(ids), centres.shape[1]))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def _map(distances: np.ndarray, query_ids: np.ndarray, gallery_ids: np.ndarray) -> float:
    order = np.argsort(distances, axis=1, kind="stable")
    hits = gallery_ids[order] == query_ids[:, None]
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    return float(((precision * hits).sum(axis=1) / np.maximum(hits.sum(axis=1), 1)).mean())


def part_quality(sigmas: list[float]) -> list[dict[str, Any]]:
    from galleria.rerank import decoupled_diffusion_rerank_features, diffusion_rerank_features

    rows = []
    for sigma in sigmas:
        rng = np.random.default_rng(0)
        centres = rng.normal(size=(30, 128))
        gallery_ids = np.repeat(np.arange(30), 40)
        query_ids = np.repeat(np.arange(30), 10)
        gallery = _clustered(rng, centres, gallery_ids, sigma)
        queries = _clustered(rng, centres, query_ids, sigma)
        row: dict[str, Any] = {
            "sigma": sigma,
            "plain": _map(1.0 - queries @ gallery.T, query_ids, gallery_ids),
        }
        for name, function in (
            ("diffusion", diffusion_rerank_features),
            ("decoupled", decoupled_diffusion_rerank_features),
        ):
            started = time.perf_counter()
            distances = function(queries, gallery)
            row[f"{name}_s"] = time.perf_counter() - started
            row[name] = _map(distances, query_ids, gallery_ids)
        rows.append(row)
        print(f"quality {row}", file=sys.stderr)
    return rows


_CHILD = """
import json, sys, time
import numpy as np
from galleria import InMemoryImageEmbeddingStore
from galleria.rerank import (DecoupledDiffusionReranker, DiffusionReranker, GnnReranker,
                             KReciprocalReranker, prepare_offline_diffusion)
size = int(sys.argv[1])
rng = np.random.default_rng(0)
centres = rng.normal(size=(size // 20, 128))
def clustered(count):
    v = centres[rng.integers(0, len(centres), count)] + rng.normal(0, 0.6, (count, 128))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
gallery, queries = clustered(size), clustered(200)
store = InMemoryImageEmbeddingStore.from_embeddings([f"g{i}" for i in range(size)], gallery)
del gallery
peak = lambda: next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024
before = peak()
wall, cpu = time.perf_counter(), time.process_time()
offline = prepare_offline_diffusion(store)
out = {"size": size, "offline_s": time.perf_counter() - wall, "offline_cpu_s": time.process_time() - cpu,
       "rss_before_mb": before, "peak_mb": peak(),
       "table_mb": (offline.positions.nbytes + offline.values.nbytes) / 2**20}
pools = store.retrieve_by_vector(queries, k=200)
for name, reranker in (("decoupled-diffusion", DecoupledDiffusionReranker(store)),
                       ("k-reciprocal", KReciprocalReranker(store)), ("diffusion", DiffusionReranker(store)),
                       ("gnn", GnnReranker(store))):
    reranker.rerank_batch(pools[:2], top_k=10)
    wall, cpu = time.perf_counter(), time.process_time()
    reranker.rerank_batch(pools, top_k=10)
    out[name + "_ms"] = 1000 * (time.perf_counter() - wall) / len(pools)
    out[name + "_cpu_ms"] = 1000 * (time.process_time() - cpu) / len(pools)
print(json.dumps(out))
"""


def part_scale(sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        process = subprocess.run(
            [sys.executable, "-c", _CHILD, str(size)], capture_output=True, text=True, check=False
        )
        if process.returncode != 0:
            rows.append({"size": size, "error": process.stderr.strip().splitlines()[-1]})
        else:
            rows.append(json.loads(process.stdout))
        print(f"scale {rows[-1]}", file=sys.stderr)
    return rows


def markdown(quality: list[dict[str, Any]], scale: list[dict[str, Any]], load: str) -> str:
    lines = [f"Load average at the start: {load} (2 cores, shared).", ""]
    if quality:
        lines += [
            "| σ | plain mAP | diffusion (Iscen) mAP | decoupled mAP | diffusion s | decoupled s |",
            "|---|---|---|---|---|---|",
        ]
        for row in quality:
            lines.append(
                f"| {row['sigma']} | {row['plain']:.3f} | {row['diffusion']:.3f} | {row['decoupled']:.3f} "
                f"| {row['diffusion_s']:.2f} | {row['decoupled_s']:.2f} |"
            )
        lines.append("")
    if scale:
        methods = ("decoupled-diffusion", "k-reciprocal", "diffusion", "gnn")
        lines += [
            "| gallery | offline wall s | offline CPU s | peak RSS MB (before) | tables MB | "
            + " | ".join(f"{m} ms/q (CPU)" for m in methods)
            + " |",
            "|---" * (5 + len(methods)) + "|",
        ]
        for row in scale:
            if "error" in row:
                lines.append(f"| {row['size']:,} | error: {row['error']} |")
                continue
            lines.append(
                f"| {row['size']:,} | {row['offline_s']:.1f} | {row['offline_cpu_s']:.1f} "
                f"| {row['peak_mb']:.0f} ({row['rss_before_mb']:.0f}) | {row['table_mb']:.0f} | "
                + " | ".join(f"{row[m + '_ms']:.2f} ({row[m + '_cpu_ms']:.2f})" for m in methods)
                + " |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--part", choices=("quality", "scale", "both"), default="both")
    parser.add_argument("--sizes", default=None, help="gallery sizes of part 2 (default 20000,100000)")
    args = parser.parse_args()
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    sigmas = [2.0] if args.quick else [1.5, 2.0, 2.5, 3.0]
    quality = part_quality(sigmas) if args.part in ("quality", "both") else []
    sizes = [int(s) for s in (args.sizes or ("5000" if args.quick else "20000,100000")).split(",")]
    scale = part_scale(sizes) if args.part in ("scale", "both") else []
    print(markdown(quality, scale, load))


if __name__ == "__main__":
    main()
