"""Ten million vectors on one machine: IVF-PQ built chunk by chunk, peak RSS, size, QPS, recall@10.

Run ``nice .venv/bin/python benchmarks/experiments/bench_10m.py --rows 1000000`` first (minutes), then
``--rows 10000000`` (long on 2 shared cores). The build runs in a child process so that its peak
RSS (``VmHWM`` of the child; the shard workers' peak beside it) is the build's alone. The vectors
are never held whole: the synthetic clustered mixture of ``benchmarks/suites/bench_scale.py`` (1,000
centres in a 64-d subspace, unit norm, space ``ip``) is generated in seeded chunks of ``--chunk``
rows and added one chunk at a time, encoded in the build process (the index's default
``build_workers=1``) or, with ``--build-workers N``, by the index's parallel shard build (N
processes; each chunk is split into shards whose inverted lists are merged).

By default the index is built at **its defaults**: no lists, sub-quantizers, bits or probes are
given, so the index chooses its shape from the first chunk and tunes ``probe_lists`` on a sample
of it, as it would for a user's first ``add``. ``--memory-budget`` is a budget for the codes and
ids of *all* ``--rows`` rows; it reaches the index (whose budget is for its first batch) scaled to
the first chunk. Giving ``--lists`` / ``--subquantizers`` / ``--probe-lists`` / ``--bits`` builds
with those values instead (reported as explicit).

Exact neighbours of 1,000 sampled queries are computed in blocks over the same chunks (a running
top-10) by the parent process while the child builds (``--truth-cache`` keeps them for a rerun),
so recall@10 is against the true neighbours of all ``--rows`` vectors. It also measures
what a store keeps per row besides its vectors: the paths list and the ``{path: row}`` dict
(tracemalloc, for paths of 29 characters).
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
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
from _proctree import tree_stat_fields

LATENT = 64
CENTRES = 1_000
QUERIES = 1_000
K = 10


def chunks(count: int, dim: int, seed: int, chunk: int) -> Iterator[np.ndarray]:
    """The clustered unit vectors, ``chunk`` rows at a time (float32; one chunk in memory at once)."""
    basis_rng = np.random.default_rng(12345 + dim)
    basis = np.linalg.qr(basis_rng.normal(size=(dim, LATENT)))[0].astype(np.float32)
    centres = basis_rng.normal(size=(CENTRES, LATENT)).astype(np.float32) @ basis.T
    spread = basis_rng.normal(size=(LATENT, LATENT)).astype(np.float32) / np.sqrt(LATENT)
    for number, start in enumerate(range(0, count, chunk)):
        rng = np.random.default_rng([seed, number])
        size = min(chunk, count - start)
        block = centres[rng.integers(0, CENTRES, size=size)]
        block += 0.35 * (rng.normal(size=(size, LATENT)).astype(np.float32) @ spread) @ basis.T
        block += 0.08 * rng.normal(size=(size, dim)).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        yield block


def exact_top_k(queries: np.ndarray, count: int, dim: int, chunk: int) -> np.ndarray:
    """Ids of the exact top-``K`` inner products over all rows, block by block (ties: lower row)."""
    best_scores = np.full((queries.shape[0], K), -np.inf, dtype=np.float32)
    best_ids = np.zeros((queries.shape[0], K), dtype=np.int64)
    start = 0
    step = 20_000  # scores of 1,000 queries × 20,000 rows: 80 MB at a time
    for chunk_block in chunks(count, dim, seed=1, chunk=chunk):
        for offset in range(0, chunk_block.shape[0], step):
            block = chunk_block[offset : offset + step]
            scores = queries @ block.T
            top = np.argpartition(-scores, K - 1, axis=1)[:, :K]
            merged_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, axis=1)], axis=1)
            merged_ids = np.concatenate([best_ids, top + start], axis=1)
            order = np.lexsort((merged_ids, -merged_scores), axis=1)[:, :K]
            best_scores = np.take_along_axis(merged_scores, order, axis=1)
            best_ids = np.take_along_axis(merged_ids, order, axis=1)
            start += block.shape[0]
    return best_ids


def sample_queries(count: int, dim: int, chunk: int) -> np.ndarray:
    """1,000 queries from the same mixture (another seed), as a user's images would be."""
    return next(chunks(QUERIES, dim, seed=2, chunk=chunk))


def peak_rss_mb() -> float:
    """This process's peak resident set (``VmHWM``), in MB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # pragma: no cover


class TreeRss:
    """The peak, over samples every ``interval`` seconds, of the summed resident set of this process
    and its descendants (the shard workers), in MB. (A spawned worker's ``ru_maxrss`` would include
    the parent's resident set at fork time, so it is not used.)"""

    def __init__(self, interval: float = 0.5) -> None:
        import threading

        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _sample(self) -> float:
        pages = sum(int(fields[21]) for fields in tree_stat_fields().values())
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.peak_mb = max(self.peak_mb, self._sample())

    def close(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_mb


def child(args: dict[str, Any]) -> dict[str, Any]:
    import faiss

    from galleria.index import IvfPqIndex

    rows, dim, chunk = args["rows"], args["dim"], args["chunk"]
    index = IvfPqIndex("ip", **args["params"])
    tree = TreeRss()
    start = time.perf_counter()
    first_s = 0.0
    for block in chunks(rows, dim, seed=1, chunk=chunk):
        index.add(block)
        del block
        if not first_s:
            first_s = time.perf_counter() - start  # training, first chunk's codes, probe tuning
            print(
                json.dumps({"first_chunk_s": first_s, "params": index.params()}), file=sys.stderr, flush=True
            )
    build = time.perf_counter() - start
    tree_peak = tree.close()
    build_peak = peak_rss_mb()  # before anything below allocates
    # The faiss file's size, written to disk (faiss.serialize_index would hold a second copy in memory).
    with tempfile.TemporaryDirectory(prefix="bench_10m_") as folder:
        faiss.write_index(index.faiss_index, os.path.join(folder, "index.faiss"))
        size = os.path.getsize(os.path.join(folder, "index.faiss"))
    queries = sample_queries(QUERIES, dim, chunk)
    index.search(queries[:10], K)
    start = time.perf_counter()
    found, _ = index.search(queries, K)
    qps = QUERIES / (time.perf_counter() - start)
    np.save(args["found"], found)
    chosen = {name: index.params()[name] for name in ("lists", "subquantizers", "bits", "probe_lists")}
    return {
        "build_s": build,
        "first_chunk_s": first_s,
        "index_bytes": size,
        "qps": qps,
        "peak_mb": build_peak,
        "peak_end_mb": peak_rss_mb(),
        "tree_peak_mb": tree_peak,
        "len": len(index),
        "chosen": chosen,
        "report": index.build_report,
        "cpu_s": time.process_time(),
        "workers_cpu_s": resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
        + resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime,
    }


def bookkeeping_bytes_per_row(count: int = 200_000) -> float:
    """Bytes per row of a store's paths list plus its {path: row} dict, for 29-character paths."""
    tracemalloc.start()
    paths = [f"/photos/{i // 1000:06d}/{i:09d}.jpg" for i in range(count)]
    rows = {path: row for row, path in enumerate(paths)}
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(rows) == count
    return used / count


def index_params(options: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """The IVF-PQ parameters of the run, and whether any part of the shape was given explicitly."""
    params: dict[str, Any] = {"build_workers": options.build_workers, "num_threads": 1}
    explicit = False
    for name in ("lists", "subquantizers", "bits", "probe_lists", "train_size"):
        value = getattr(options, name)
        if value is not None:
            params[name] = value
            explicit = explicit or name != "train_size"
    if options.memory_budget is not None:  # a budget for all rows, scaled to the first chunk's rows
        first = min(options.chunk, options.rows)
        params["memory_budget"] = max(1, options.memory_budget * first // options.rows)
    if options.rerank_candidates:
        params.update(keep_vectors=True, rerank_candidates=options.rerank_candidates)
        explicit = True
    return params, explicit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--chunk", type=int, default=500_000, help="rows generated and added at once")
    parser.add_argument("--lists", type=int, default=None, help="default: the index's own choice")
    parser.add_argument("--subquantizers", type=int, default=None, help="default: the index's own choice")
    parser.add_argument("--bits", type=int, default=None, help="default: the index's own choice")
    parser.add_argument("--probe-lists", type=int, default=None, help="default: tuned by the index")
    parser.add_argument("--train-size", type=int, default=None, help="default: the index's default")
    parser.add_argument(
        "--memory-budget",
        type=float,
        default=None,
        help="bytes for the codes and ids of all rows (e.g. 1.4e9); scaled to the first chunk",
    )
    parser.add_argument("--build-workers", type=int, default=1, help="the index's default: 1")
    parser.add_argument(
        "--rerank-candidates",
        type=int,
        default=0,
        help="keep a float16 copy and re-score this many PQ candidates (0: PQ codes only)",
    )
    parser.add_argument(
        "--truth-cache", default=None, help="folder keeping the exact neighbours between runs (default: none)"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(child(json.loads(options.child))))
        return
    if options.memory_budget is not None:
        options.memory_budget = int(options.memory_budget)
    params, explicit = index_params(options)
    found = f"/tmp/bench_10m_found_{os.getpid()}.npy"
    payload = {"rows": options.rows, "dim": options.dim, "chunk": options.chunk, "params": params}
    payload["found"] = found
    load_before = os.getloadavg()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    wall = time.perf_counter()
    # The build runs in a child; the exact neighbours (independent of the index) are computed here
    # meanwhile, or read from --truth-cache when an earlier run of the same rows left them.
    build = subprocess.Popen(
        [sys.executable, __file__, "--child", json.dumps(payload)], env=env, stdout=subprocess.PIPE, text=True
    )
    start = time.perf_counter()
    cached = None
    if options.truth_cache:
        cached = Path(options.truth_cache) / f"truth_{options.rows}_{options.dim}_{options.chunk}.npy"
    if cached is not None and cached.is_file():
        truth = np.load(cached, allow_pickle=False)
        truth_note = f"read from {cached}"
    else:
        truth = exact_top_k(
            sample_queries(QUERIES, options.dim, options.chunk), options.rows, options.dim, options.chunk
        )
        truth_note = f"{time.perf_counter() - start:.0f} s, beside the build"
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            np.save(cached, truth, allow_pickle=False)
    stdout, _ = build.communicate()
    wall = time.perf_counter() - wall
    if build.returncode:
        raise SystemExit(f"the build failed (exit status {build.returncode})")
    result = json.loads(stdout.strip().splitlines()[-1])
    load_mid = os.getloadavg()
    approx = np.load(found)
    os.remove(found)
    recall = float(np.mean([len(set(a) & set(b)) / K for a, b in zip(approx, truth, strict=True)]))
    per_row = bookkeeping_bytes_per_row()
    kept = 2 * options.dim * result["len"] if options.rerank_candidates else 0  # the float16 copy
    load_after = os.getloadavg()
    chosen = result["chosen"]
    report = result["report"] or {}
    print(
        f"{options.rows:,} × {options.dim}, chunks of {options.chunk:,}; IVF-PQ given {params} "
        f"({'explicit shape' if explicit else 'defaults'}); chosen: {chosen['lists']} lists, "
        f"{chosen['subquantizers']}×{chosen['bits']} bits, {chosen['probe_lists']} probes "
        f"(build-time recall@10 {report.get('recall_at_10')} on {report.get('sample_queries')} "
        f"sampled vectors of the first chunk); load average {load_before[0]:.1f} → "
        f"{load_mid[0]:.1f} (after the build and the exact neighbours) → {load_after[0]:.1f}"
    )
    print(
        "| rows | build s (first chunk) | build CPU s (process + shard workers) "
        "| peak RSS of the build process (MiB) "
        "| build process + shard workers, sampled peak (MiB) "
        "| index bytes (faiss) + float16 copy | bytes/vector "
        "| QPS (1 thread) | recall@10 (1,000 queries, exact in blocks) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {result['len']:,} | {result['build_s']:.0f} ({result['first_chunk_s']:.0f}) "
        f"| {result['cpu_s']:.0f} + {result['workers_cpu_s']:.0f} | {result['peak_mb']:,.0f} "
        f"| {result['tree_peak_mb']:,.0f} "
        f"| {result['index_bytes'] / 1e6:,.0f} MB + {kept / 1e6:,.0f} MB kept copy "
        f"| {(result['index_bytes'] + kept) / result['len']:.1f} "
        f"| {result['qps']:,.0f} | {recall:.3f} |"
    )
    print(
        f"child wall {wall:.0f} s; build process peak after writing the index file and searching: "
        f"{result['peak_end_mb']:,.0f} MiB; exact neighbours in blocks: {truth_note}; "
        f"store bookkeeping (paths list + dict): {per_row:.0f} B/row"
    )


if __name__ == "__main__":
    main()
