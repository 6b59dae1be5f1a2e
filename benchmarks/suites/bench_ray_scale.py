"""Ray beyond embedding, measured on this machine: the IVF-PQ build and approximate re-ranking, Ray
against one process on the same cores, results compared for equality, Ray's start-up timed apart.

Run ``PYTHONPATH=src .venv/bin/python benchmarks/suites/bench_ray_scale.py --build 1000000
--rerank 1000000`` (tens of minutes on 2 cores; ``--quick`` for a smoke run). Prints one JSON line
per measurement and a summary table.

* ``--build N``: an IVF-PQ index (l2, fixed shape: ``--lists`` lists, 32 sub-quantizers × 8 bits,
  probe_lists 32, trained on 100,000 vectors) of N clustered 128-D float32 vectors, added in batches
  of ``--batch`` rows generated batch by batch from a seed (so 10M never holds 5 GB of source). The
  one-process build encodes with faiss on 2 OpenMP threads; the Ray build (``build_engine="ray"``)
  in Ray tasks of 1 CPU each on a local Ray of 2 CPUs. Equal means every inverted list's codes and
  ids are equal (a hash of the serialised faiss index).
* ``--rerank G``: approximate k-reciprocal re-ranking of ``--probes`` probes × G gallery (clustered,
  ``--dim``-D), prepared once (graph, scales, Jaccard index: the same driver work for both); then every
  output block computed by the one-process stream (2 threads) and by Ray tasks
  (:func:`galleria.engines.ray_rerank.ray_rerank_approximate`'s loop); blocks compared bit for bit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from typing import Any

import faiss
import numpy as np

from galleria.index import IvfPqIndex


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def clustered(count: int, dim: int, seed: int) -> np.ndarray:
    """Clustered vectors, the centres fixed (seed 0) and the members drawn from ``seed``."""
    centres = np.random.default_rng(0).normal(size=(1000, dim)).astype(np.float32)
    rng = np.random.default_rng(seed)
    return centres[rng.integers(0, 1000, count)] + 0.4 * rng.normal(size=(count, dim)).astype(np.float32)


def emit(record: dict[str, Any]) -> None:
    print(json.dumps({**record, "load": load()}), flush=True)


def assignments(index: Any) -> tuple[np.ndarray, np.ndarray]:
    """Each id's inverted list and PQ code in a built IVF-PQ faiss index."""
    ivf = faiss.extract_index_ivf(index)
    inverted = ivf.invlists
    lists = np.full(ivf.ntotal, -1, dtype=np.int64)
    codes = np.zeros((ivf.ntotal, inverted.code_size), dtype=np.uint8)
    for number in range(ivf.nlist):
        size = inverted.list_size(number)
        if size:
            ids = faiss.rev_swig_ptr(inverted.get_ids(number), size).copy()
            raw = faiss.rev_swig_ptr(inverted.get_codes(number), size * inverted.code_size)
            lists[ids] = number
            codes[ids] = np.asarray(raw).reshape(size, inverted.code_size)
    return lists, codes


def build(engine: str, count: int, batch: int, lists: int) -> tuple[float, float, str, Any]:
    """(wall seconds of all adds, of which training, hash of the faiss index, the faiss index)."""
    index = IvfPqIndex(
        "l2",
        lists=lists,
        subquantizers=32,
        bits=8,
        probe_lists=32,
        num_threads=None if engine == "ray" else 2,
        build_engine=engine,
        build_workers=1,
    )
    start = time.perf_counter()
    training = 0.0
    for number, first in enumerate(range(0, count, batch)):
        part = clustered(min(batch, count - first), 128, seed=1 + number)
        began = time.perf_counter()
        index.add(part)
        if number == 0:
            seconds = index.build_seconds
            training = sum(v for k, v in seconds.items() if k != "encoding")
        del part, began
    wall = time.perf_counter() - start
    digest = hashlib.sha256(bytes(faiss.serialize_index(index.faiss_index))).hexdigest()[:16]
    return wall, training, digest, index.faiss_index


def run_build(options: argparse.Namespace) -> None:
    faiss.omp_set_num_threads(2)
    rows = {}
    indexes: dict[str, Any] = {}
    for engine in ("processes", "ray"):
        wall, training, digest, built = build(engine, options.build, options.batch, options.lists)
        rows[engine] = (wall, training, digest)
        indexes[engine] = built
        emit(
            {
                "what": "ivfpq build",
                "engine": engine,
                "count": options.build,
                "wall_s": round(wall, 2),
                "training_s": round(training, 2),
                "encoding_s": round(wall - training, 2),
                "hash": digest,
            }
        )
    one, spread = rows["processes"], rows["ray"]
    (lists_one, codes_one), (lists_ray, codes_ray) = (assignments(indexes[e]) for e in ("processes", "ray"))
    emit(
        {
            "what": "ivfpq build differences",
            "ids in another list": int(np.count_nonzero(lists_one != lists_ray)),
            "ids with another code": int(np.count_nonzero((codes_one != codes_ray).any(axis=1))),
            "of": options.build,
        }
    )
    emit(
        {
            "what": "ivfpq build summary",
            "count": options.build,
            "equal": one[2] == spread[2],
            "ray_over_one_wall": round(spread[0] / one[0], 3),
            "ray_over_one_encoding": round((spread[0] - spread[1]) / (one[0] - one[1]), 3),
            "one_us_per_item": round(1e6 * one[0] / options.build, 2),
            "ray_us_per_item": round(1e6 * spread[0] / options.build, 2),
        }
    )


def run_rerank(options: argparse.Namespace) -> None:
    import ray

    from galleria.engines import ray_rerank
    from galleria.rerank._common import parallel_blocks
    from galleria.rerank.approximate import prepare_k_reciprocal_approximate

    gallery = clustered(options.rerank, options.dim, seed=101)
    probe = clustered(options.probes, options.dim, seed=102)
    start = time.perf_counter()
    prepared = prepare_k_reciprocal_approximate(probe, gallery, metric="euclidean", k1=20, k2=6, graph="hnsw")
    prepare = time.perf_counter() - start
    del gallery
    emit(
        {
            "what": "rerank prepare",
            "gallery": options.rerank,
            "probes": options.probes,
            "prepare_s": round(prepare, 2),
        }
    )
    step, probes = prepared.step, prepared.probes

    def block(first: int, nothing: None) -> tuple[np.ndarray, np.ndarray]:
        return prepared.block(first, min(first + step, probes))

    start = time.perf_counter()
    local = [
        hashlib.sha256(out.tobytes()).digest() for _, out in parallel_blocks(block, range(0, probes, step))
    ]
    one = time.perf_counter() - start
    start = time.perf_counter()
    spread = [hashlib.sha256(out.tobytes()).digest() for _, out in ray_rerank._run(prepared, None, None)]
    distributed = time.perf_counter() - start
    emit(
        {
            "what": "rerank blocks",
            "gallery": options.rerank,
            "probes": probes,
            "blocks": len(local),
            "one_s": round(one, 2),
            "ray_s": round(distributed, 2),
            "ray_over_one": round(distributed / one, 3),
            "equal": local == spread,
            "one_ms_per_probe": round(1e3 * one / probes, 2),
            "ray_ms_per_probe": round(1e3 * distributed / probes, 2),
        }
    )
    del ray


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=int, default=0, help="vectors of the IVF-PQ build (0: skip)")
    parser.add_argument("--batch", type=int, default=1_000_000, help="rows per add (default 1M)")
    parser.add_argument("--lists", type=int, default=4096, help="inverted lists (default 4096)")
    parser.add_argument("--rerank", type=int, default=0, help="gallery of the re-ranking (0: skip)")
    parser.add_argument("--probes", type=int, default=200, help="probes of the re-ranking (default 200)")
    parser.add_argument("--dim", type=int, default=64, help="dimension of the re-ranking vectors")
    parser.add_argument("--quick", action="store_true", help="smoke run: 200k build, 50k re-ranking")
    options = parser.parse_args()
    if options.quick:
        options.build, options.batch, options.lists, options.rerank, options.probes = (
            200_000,
            100_000,
            256,
            50_000,
            40,
        )
    import ray

    start = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    emit({"what": "ray start-up", "seconds": round(time.perf_counter() - start, 2)})
    start = time.perf_counter()
    ray.get([ray.remote(num_cpus=1)(lambda: 0).remote() for _ in range(2)])
    emit({"what": "first tasks (workers start)", "seconds": round(time.perf_counter() - start, 2)})
    try:
        if options.build:
            run_build(options)
        if options.rerank:
            run_rerank(options)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
