"""Benchmark indexes at a million vectors: exact, HNSW, IVF-PQ — build, file, load, memory, QPS, recall.

Run ``.venv/bin/python benchmarks/suites/bench_scale.py`` (about 30 minutes on 2 shared cores, peak
memory about 8 GB) or ``--quick`` (100k vectors) for a smoke run. Every configuration runs in
fresh subprocesses, one to build and save the store, one to load it and answer 1,000 queries,
so each peak RSS (``ru_maxrss``) belongs to that configuration alone. Figures go to
``docs/benchmarks/scale.md``.

Data: synthetic clustered vectors, generated in seeded chunks — 1,000 centres in a random
64-dimensional subspace, points = centre + 0.35 × a shared 64-d spread + 0.08 × N(0, I) noise,
unit norm (space ``ip``; equal to cosine on unit vectors). Queries come from the same mixture
with another seed. Recall@10 = |top-10 ∩ exact top-10| / 10, the exact store being the oracle.

HNSW builds in this environment take minutes per 100k vectors, so HNSW is run on the first
``--hnsw-rows`` vectors (default 100,000) and its recall is measured against exact search over
those same rows; its table row says so.
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
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 100_000
LATENT = 64
CENTRES = 1_000
QUERIES = 1_000


def vectors(count: int, dim: int, seed: int) -> np.ndarray:
    """``count`` unit vectors of the clustered mixture (float32, generated chunk by chunk)."""
    basis_rng = np.random.default_rng(12345 + dim)
    basis = np.linalg.qr(basis_rng.normal(size=(dim, LATENT)))[0].astype(np.float32)  # dim × 64
    centres = (basis_rng.normal(size=(CENTRES, LATENT)).astype(np.float32) @ basis.T) * 1.0
    spread = basis_rng.normal(size=(LATENT, LATENT)).astype(np.float32) / np.sqrt(LATENT)
    out = np.empty((count, dim), dtype=np.float32)
    for number, start in enumerate(range(0, count, CHUNK)):
        rng = np.random.default_rng([seed, number])
        size = min(CHUNK, count - start)
        block = centres[rng.integers(0, CENTRES, size=size)]
        block += 0.35 * (rng.normal(size=(size, LATENT)).astype(np.float32) @ spread) @ basis.T
        block += 0.08 * rng.normal(size=(size, dim)).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + size] = block
    return out


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---------------------------------------------------------------- the subprocess stages


def stage_build(args: dict[str, Any]) -> dict[str, Any]:
    from galleria import InMemoryImageEmbeddingStore

    data = vectors(args["rows"], args["dim"], seed=1)
    paths = [f"v{i:07d}" for i in range(args["rows"])]
    before = peak_rss_mb()
    start = time.perf_counter()
    store = InMemoryImageEmbeddingStore.from_embeddings(
        paths, data, search_index=args["index"], space="ip", index_params=args["params"] or None
    )
    build = time.perf_counter() - start
    del data
    start = time.perf_counter()
    store.save_to_disk(args["file"])
    save = time.perf_counter() - start
    index = store.search_index
    report = getattr(index, "build_report", None)
    compressed = None
    if getattr(index, "code_size", None) is not None:  # IVF-PQ: codes + ids + the lists' centroids
        lists = index.params()["lists"]
        compressed = (len(index) * (index.code_size + 8) + lists * args["dim"] * 4) / 2**20
    return {
        "build_s": build,
        "save_s": save,
        "build_peak_mb": peak_rss_mb(),
        "data_mb": before,
        "params": index.params(),
        "report": report,
        "codes_mb": compressed,
    }


def stage_query(args: dict[str, Any]) -> dict[str, Any]:
    from galleria import InMemoryImageEmbeddingStore

    queries = vectors(QUERIES, args["dim"], seed=2)
    start = time.perf_counter()
    store = InMemoryImageEmbeddingStore.load_from_disk(args["file"])
    load = time.perf_counter() - start
    after_load = peak_rss_mb()
    store.retrieve_by_vector(queries[:10], 10)  # warm-up
    start = time.perf_counter()
    results = store.retrieve_by_vector(queries, 10)
    seconds = time.perf_counter() - start
    found = np.asarray([[int(c.path[1:]) for c in hits] for hits in results], dtype=np.int64)
    if args.get("truth_out"):
        np.save(args["truth_out"], found)
    truth = np.load(args["truth"]) if args.get("truth") else found
    recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth, strict=True)]))
    return {
        "load_s": load,
        "load_peak_mb": after_load,
        "query_peak_mb": peak_rss_mb(),
        "qps": QUERIES / seconds,
        "recall": recall,
    }


def stage_truth(args: dict[str, Any]) -> dict[str, Any]:
    """Exact top-10 over the first ``rows`` vectors (the oracle for the HNSW subset)."""
    from galleria.index import ExactIndex

    index = ExactIndex("ip")
    index.add(vectors(args["rows"], args["dim"], seed=1))
    ids, _ = index.search(vectors(QUERIES, args["dim"], seed=2), 10)
    np.save(args["truth_out"], ids)
    return {}


def run_stage(stage: str, args: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    command = [sys.executable, __file__, "--stage", stage, json.dumps(args)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"stage {stage} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the driver


def configurations(dim: int, rows: int, hnsw_rows: int) -> list[tuple[str, str, int, dict[str, Any]]]:
    ivf: dict[str, Any] = {"num_threads": 1}  # every other parameter at its default
    configs = [
        ("exact", "exact", rows, {}),
        ("IVF-PQ (defaults)", "ivfpq", rows, ivf),
        (
            "IVF-PQ, fp16 copy, re-rank 100, recall_target 0.99",
            "ivfpq",
            rows,
            {**ivf, "keep_vectors": True, "rerank_candidates": 100, "recall_target": 0.99},
        ),
    ]
    configs.append(
        (f"HNSW ({hnsw_rows:,} rows)", "hnsw", hnsw_rows, {"build_candidates": 100, "num_threads": 1})
    )
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k vectors instead of 1M")
    parser.add_argument("--hnsw-rows", type=int, default=None)
    parser.add_argument("--rows", type=int, default=None, help="gallery rows (default 1M; --quick 100k)")
    parser.add_argument(
        "--only", default=None, help="run the exact store and the configurations whose label has this"
    )
    parser.add_argument(
        "--out", default=None, help="markdown file to write (default docs/benchmarks/scale.md)"
    )
    parser.add_argument("--dims", default="128,512")
    parser.add_argument("--stage", default=None, help=argparse.SUPPRESS)
    parser.add_argument("payload", nargs="?", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.stage:
        stage = {"build": stage_build, "query": stage_query, "truth": stage_truth}[options.stage]
        print(json.dumps(stage(json.loads(options.payload))))
        return
    rows = options.rows or (100_000 if options.quick else 1_000_000)
    hnsw_rows = options.hnsw_rows or (20_000 if options.quick else 100_000)
    load = os.getloadavg()
    lines = [
        "## Scale: exact vs HNSW vs IVF-PQ (`benchmarks/suites/bench_scale.py`)",
        "",
        f"{rows:,} synthetic clustered unit vectors per dimension (see the script), 1,000 queries, k = 10, "
        "space ip. Every configuration is built and saved in one fresh process and loaded and queried "
        "in another; peak RSS is that process's `ru_maxrss`. One thread everywhere "
        "(OMP/OpenBLAS = 1): the 2 cores are shared with other jobs "
        f"(load average {load[0]:.1f} when the run started), so times are pessimistic and "
        "the ratios are the point. IVF-PQ at its defaults: lists, sub-quantisers, bits and "
        "`probe_lists` chosen from the gallery at build time (the chosen values and the recall@10 the "
        "build measured on 300 gallery vectors are in the table); trained on 100k vectors.",
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="galleria-scale-") as folder:
        for dim in [int(d) for d in options.dims.split(",")]:
            lines += [
                f"### {rows:,} × {dim}",
                "",
                "| index | rows | build s | file MB | load s | peak RSS loaded MB | peak RSS build MB "
                "| QPS | recall@10 | chosen (lists, M×bits, probes) | build-time recall | codes+lists MB |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
            ]
            truth = f"{folder}/truth-{dim}.npy"
            subset_truth = f"{folder}/truth-{dim}-subset.npy"
            run_stage("truth", {"rows": hnsw_rows, "dim": dim, "truth_out": subset_truth})
            exact_peak = None
            for label, name, count, params in configurations(dim, rows, hnsw_rows):
                if options.only and name != "exact" and options.only not in label:
                    continue
                file = f"{folder}/{name}-{dim}.safetensors"
                print(f"[{dim}] {label}: building", flush=True)
                built = run_stage(
                    "build", {"rows": count, "dim": dim, "index": name, "params": params, "file": file}
                )
                query_args: dict[str, Any] = {"dim": dim, "file": file}
                if name == "exact":
                    query_args["truth_out"] = truth
                else:
                    query_args["truth"] = truth if count == rows else subset_truth
                queried = run_stage("query", query_args)
                size = os.path.getsize(file) / 1e6
                os.remove(file)
                if name == "exact":
                    exact_peak = queried["query_peak_mb"]
                share = f" ({queried['query_peak_mb'] / exact_peak:.0%})" if exact_peak else ""
                chosen = measured = codes = "–"
                if name == "ivfpq":
                    p, report = built["params"], built["report"] or {}
                    chosen = f"{p['lists']}, {p['subquantizers']}×{p['bits']}, {p['probe_lists']}"
                    if report.get("recall_at_10") is not None:
                        measured = f"{report['recall_at_10']:.3f}"
                    codes = f"{built['codes_mb']:.0f}"
                    if exact_peak:
                        codes += f" ({built['codes_mb'] / exact_peak:.0%})"
                lines.append(
                    f"| {label} | {count:,} | {built['build_s']:.1f} | {size:.0f} | {queried['load_s']:.2f} "
                    f"| {queried['query_peak_mb']:.0f}{share} | {built['build_peak_mb']:.0f} "
                    f"| {queried['qps']:.0f} | {queried['recall']:.3f} | {chosen} | {measured} | {codes} |"
                )
                print(lines[-1], flush=True)
            lines.append("")
    lines += [
        "Peak RSS loaded includes the loader's own copies of the file's bytes and the 1,000 queries; the "
        "percentage is relative to the exact store of the same size. Build peak includes the generated "
        "float32 input (what a caller holds anyway). The HNSW row is on a subset (see the script); its "
        "recall is against exact search over that subset.",
    ]
    target = Path(options.out) if options.out else ROOT / "docs" / "benchmarks" / "scale.md"
    if not options.quick:
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
