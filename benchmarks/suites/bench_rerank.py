"""Benchmark of k-reciprocal re-ranking: per-query pools and full probe×gallery matrices.

Run ``.venv/bin/python benchmarks/suites/bench_rerank.py`` (full size: a few minutes and up to about 9 GB in
one child process) or with ``--quick`` (small smoke run). ``--part pool`` / ``--part full`` runs one
half. Everything is measured side by side in one run and written to ``docs/benchmarks/rerank.md``.

Part 1 — pool re-ranking (the spec's ``KReciprocalReranker``).
    Data: ``numpy.random.default_rng(0)``; a gallery of 20,000 unit vectors in 512-d around 1,000
    Gaussian centres (σ = 0.6 per coordinate before normalising), stored in an exact cosine
    ``InMemoryImageEmbeddingStore``; 500 queries drawn around random centres the same way. Each
    query's pool is its top-100 or top-200 retrieval (not timed). Timed, per query:
    ``rerank`` called in a loop, ``rerank_batch`` on all pools, and a literal single-query numpy
    transcription of the spec (full stable argsort of every row, the sets of Eqs. 2–4 as dense
    (N+1)² int64 0/1 matrices, Eq. 11 and Eq. 10 densely). All three read the vectors from the store
    and build the same pool matrix; ``rerank`` / ``rerank_batch`` return the best ``top_k = 10``
    (the three are checked to agree on whole pools outside the timing). k1 = 20, k2 = 6, λ = 0.3.

Part 2 — full re-ranking at Market-1501 size.
    Data: ``default_rng(1)``; 3,368 probes and 15,913 gallery items, 256-d unit features around
    1,501 identities (σ = 1.2 per coordinate before normalising). Distance matrices: cosine
    ``1 - cos`` in float32 (probe×gallery 214 MB, probe×probe 45 MB, gallery×gallery 1,013 MB).
    Each measurement runs in its own child process that loads its inputs from ``.npy`` files, so its
    peak RSS (``VmHWM`` of the child itself, inputs included) is its own. Compared:
    ``k_reciprocal_rerank_features`` and ``k_reciprocal_rerank`` (three matrices), both modes, and a
    literal dense transcription of the reference algorithm (docs/reranking.md steps 1–7: stacked
    (P+G)² float32 matrix, full stable argsort, dense V and V_qe, an inverted index for step 6).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
K1, K2, LAMBDA = 20, 6, 0.3
TOP_K = 10  # candidates returned per query by the timed rerank / rerank_batch calls
LARGE_DIM = 256  # vector dimension of the large-pool part


# ---------------------------------------------------------------------------- part 1: pools


def literal_pool(matrix: np.ndarray, k1: int, k2: int, lambda_value: float) -> np.ndarray:
    """The spec's equations for one pool, written straight down with dense int64 set matrices."""
    size = matrix.shape[0]
    k1 = min(k1, size - 1)
    k2 = min(k2, k1)
    half = int(np.around(k1 / 2))
    d = np.maximum(matrix.astype(np.float64), 0.0)
    np.fill_diagonal(d, 0.0)
    peak = d.max(axis=1, keepdims=True)
    d = d / np.where(peak > 0, peak, 1.0)
    ranking = np.argsort(d, axis=1, kind="stable")
    rows = np.arange(size)[:, None]
    near = np.zeros((size, size), dtype=np.int64)
    near[rows, ranking[:, : k1 + 1]] = 1
    near_half = np.zeros((size, size), dtype=np.int64)
    near_half[rows, ranking[:, : half + 1]] = 1
    reciprocal = near * near.T  # Eq. 3
    reciprocal_half = near_half * near_half.T
    shared = reciprocal @ reciprocal_half.T  # |R(i, k) ∩ R(q, k/2)|
    accepted = reciprocal * (3 * shared >= 2 * reciprocal_half.sum(axis=1)[None, :])
    expanded = np.minimum(reciprocal + accepted @ reciprocal_half, 1)  # Eq. 4
    features = expanded * np.exp(-d)  # Eq. 7
    totals = features.sum(axis=1, keepdims=True)
    features = features / np.where(totals > 0, totals, 1.0)
    if k2 > 1:
        features = features[ranking[:, :k2]].mean(axis=1)  # Eq. 11
    low = np.minimum(features[0], features).sum(axis=1)  # Eq. 10
    high = np.maximum(features[0], features).sum(axis=1)
    jaccard = np.where(high > 0, 1.0 - low / np.where(high > 0, high, 1.0), 1.0)
    return ((1 - lambda_value) * jaccard + lambda_value * d[0])[1:]  # Eq. 12


def clustered(
    rng: np.random.Generator, centres: np.ndarray, count: int, sigma: float
) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, centres.shape[0], size=count)
    vectors = centres[labels] + sigma * rng.normal(size=(count, centres.shape[1]))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32), labels


def bench_pools(quick: bool, pyvisim_python: str | None = None) -> dict[str, Any]:
    from galleria import InMemoryImageEmbeddingStore, KReciprocalReranker
    from galleria.distances import pairwise_distances

    rng = np.random.default_rng(0)
    gallery_size, queries_count, pool_sizes = (3_000, 50, (100,)) if quick else (20_000, 500, (100, 200))
    centres = rng.normal(size=(gallery_size // 20, 512))
    gallery, _ = clustered(rng, centres, gallery_size, 0.6)
    queries, _ = clustered(rng, centres, queries_count, 0.6)
    paths = [f"g{i:05d}.jpg" for i in range(gallery_size)]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, gallery, space="cosine")
    reranker = KReciprocalReranker(store, k1=K1, k2=K2, lambda_value=LAMBDA)
    rows = []
    for pool_size in pool_sizes:
        pools = store.retrieve_by_vector(queries, k=pool_size)

        def literal_all(pools: list[list[Any]] = pools, pool_size: int = pool_size) -> list[np.ndarray]:
            results = []
            for pool in pools:
                vectors = store.embeddings_of([c.path for c in pool])
                matrix = np.zeros((pool_size + 1, pool_size + 1))
                matrix[1:, 1:] = pairwise_distances(vectors, vectors, store.space)
                matrix[0, 1:] = matrix[1:, 0] = [c.score for c in pool]
                results.append(literal_pool(matrix, K1, K2, LAMBDA))
            return results

        timings: dict[str, float] = {}
        outputs: dict[str, Any] = {}
        for name, run in (
            ("rerank (loop)", lambda p=pools: [reranker.rerank(pool, top_k=TOP_K) for pool in p]),
            ("rerank_batch", lambda p=pools: reranker.rerank_batch(p, top_k=TOP_K)),
            ("literal numpy (loop)", literal_all),
        ):
            best = float("inf")
            for _ in range(1 if quick else 2):
                start = time.perf_counter()
                outputs[name] = run()
                best = min(best, time.perf_counter() - start)
            timings[name] = best / len(pools) * 1e3
        # The three agree: same order, same d* (checked on whole pools, not timed).
        worst = 0.0
        for pool, batch, literal in zip(
            pools,
            reranker.rerank_batch(pools, top_k=pool_size),
            outputs["literal numpy (loop)"],
            strict=True,
        ):
            fast = reranker.rerank(pool, top_k=pool_size)
            assert fast == batch
            order = np.argsort(literal, kind="stable")
            worst = max(worst, float(np.abs(np.array([c.score for c in fast]) - literal[order]).max()))
        row: dict[str, Any] = {
            "pool": pool_size,
            "queries": len(pools),
            "ms_per_query": timings,
            "max_abs_diff": worst,
        }
        if pyvisim_python is not None:
            row["pyvisim"] = compare_pyvisim(
                pyvisim_python, store, pools, pool_size, reranker, timings["rerank_batch"], quick
            )
        rows.append(row)
        print(f"pool {pool_size}: " + ", ".join(f"{k} {v:.3f} ms/query" for k, v in timings.items()))
        print(
            f"  literal / rerank_batch = {timings['literal numpy (loop)'] / timings['rerank_batch']:.1f}x, "
            f"max |d* difference| = {worst:.2e}"
        )
    return {"gallery": gallery_size, "rows": rows}


def compare_pyvisim(
    python: str,
    store: Any,
    pools: list[list[Any]],
    pool_size: int,
    reranker: Any,
    batch_ms: float,
    quick: bool,
) -> dict[str, Any]:
    """pyvisim 1.0's ``KReciprocalReranker.rerank`` on the same pools, in its own interpreter.

    The child gets the store's vectors (unit rows) in a FAISS ``IndexFlatIP`` (pyvisim's space "ip":
    ``1 - <a, b>``, the cosine store's own formula on them) and the same candidate paths and scores.
    It is timed twice, with BLAS on its default threads and on one (``OPENBLAS_NUM_THREADS=1``);
    ``rerank_batch`` is timed again right after each, in this process.
    """
    from galleria import KReciprocalReranker  # noqa: F401  (the parent's side only)

    index = {path: row for row, path in enumerate(store.paths)}
    with tempfile.TemporaryDirectory(prefix="bench_pyvisim_") as name:
        folder = Path(name)
        np.save(folder / "gallery.npy", store.embeddings)
        np.save(folder / "rows.npy", np.array([[index[c.path] for c in pool] for pool in pools]))
        np.save(folder / "scores.npy", np.array([[c.score for c in pool] for pool in pools]))
        result: dict[str, Any] = {}
        for label, extra in (
            ("default", {}),
            ("1 thread", {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}),
        ):
            command = [python, str(Path(__file__).resolve()), "--child", "pyvisim", "--folder", str(folder)]
            if quick:
                command.append("--quick")
            done = subprocess.run(
                command, capture_output=True, text=True, check=True, env={**os.environ, **extra}
            )
            record = json.loads(done.stdout.strip().splitlines()[-1])
            ours = min(
                _timed(lambda: reranker.rerank_batch(pools, top_k=TOP_K)) for _ in range(1 if quick else 3)
            )
            ours_ms = min(batch_ms, ours / len(pools) * 1e3)
            result[label] = {"pyvisim_ms": record["ms_per_query"], "batch_ms": ours_ms}
        theirs = np.load(folder / "pyvisim_scores.npy")
        theirs_rows = np.load(folder / "pyvisim_rows.npy")
    ours_lists = reranker.rerank_batch(pools, top_k=pool_size)
    ours_scores = np.array([[c.score for c in pool] for pool in ours_lists])
    ours_rows = np.array([[index[c.path] for c in pool] for pool in ours_lists])
    per_pool = np.abs(ours_scores - theirs).max(axis=1)
    result["max_abs_diff"] = float(per_pool.max())
    result["median_abs_diff"] = float(np.median(per_pool))
    result["pools_over_1e-6"] = int((per_pool > 1e-6).sum())
    result["same_order"] = int((ours_rows == theirs_rows).all(axis=1).sum())
    for label in ("default", "1 thread"):
        entry = result[label]
        print(
            f"  pyvisim 1.0 ({label} BLAS threads) {entry['pyvisim_ms']:.3f} ms/query vs rerank_batch "
            f"{entry['batch_ms']:.3f}: {entry['pyvisim_ms'] / entry['batch_ms']:.1f}x"
        )
    print(
        f"  vs pyvisim: same order in {result['same_order']}/{len(pools)} pools, max |d* difference| "
        f"{result['max_abs_diff']:.1e} (median per pool {result['median_abs_diff']:.1e}), "
        f"{result['pools_over_1e-6']} pools over 1e-6"
    )
    return result


def _timed(run: Any) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def pyvisim_child(folder: Path, quick: bool) -> None:
    """Time pyvisim's re-ranker on the saved pools (runs in pyvisim's own environment)."""
    import faiss
    from pyvisim.retrieval.data import Candidate as PyvisimCandidate
    from pyvisim.retrieval.image_store import InMemoryImageEmbeddingStore as PyvisimStore
    from pyvisim.retrieval.reranking import KReciprocalReranker as PyvisimReranker

    gallery = np.load(folder / "gallery.npy")
    rows = np.load(folder / "rows.npy")
    scores = np.load(folder / "scores.npy")
    index = faiss.IndexFlatIP(gallery.shape[1])
    index.add(gallery)
    paths = [f"g{i:05d}.jpg" for i in range(gallery.shape[0])]

    class NoEmbedder:  # the FAISS index holds the gallery; nothing is embedded
        def embed(self, images: Any) -> Any:
            raise RuntimeError("not used")

    store = PyvisimStore(paths, NoEmbedder(), index)
    reranker = PyvisimReranker(store, k1=K1, k2=K2, lambda_value=LAMBDA)
    pools = [
        [PyvisimCandidate(paths[r], float(v)) for r, v in zip(row, value, strict=True)]
        for row, value in zip(rows, scores, strict=True)
    ]
    best = min(
        _timed(lambda: [reranker.rerank(pool, top_k=TOP_K) for pool in pools])
        for _ in range(1 if quick else 3)
    )
    full = [reranker.rerank(pool, top_k=len(pool)) for pool in pools]
    np.save(folder / "pyvisim_scores.npy", np.array([[c.score for c in pool] for pool in full]))
    np.save(folder / "pyvisim_rows.npy", np.array([[int(c.path[1:6]) for c in pool] for pool in full]))
    print(json.dumps({"ms_per_query": best / len(pools) * 1e3}))


# ---------------------------------------------------------------------------- part 3: large pools


def large_pool_child(task: str, quick: bool) -> None:
    """One large pool in this fresh process: time, traced peak and RSS growth of one ``rerank`` call."""
    import tracemalloc

    from galleria import InMemoryImageEmbeddingStore, KReciprocalReranker
    from galleria.rerank import _common

    _, size_text, route = task.split(":")
    size = int(size_text)
    if route == "dense":
        _common.SPARSE_POOL_SIZE = 10**12
    rng = np.random.default_rng(2)
    centres = rng.normal(size=(max(2, size // 20), LARGE_DIM))
    vectors, _ = clustered(rng, centres, size + 1, 0.6)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"p{i:06d}" for i in range(size + 1)], vectors, space="cosine"
    )
    pool = store.retrieve_by_vector(vectors[-1], k=size)[0]
    reranker = KReciprocalReranker(store, k1=K1, k2=K2, lambda_value=LAMBDA)
    before = peak_rss_mb()
    tracemalloc.start()
    start = time.perf_counter()
    result = reranker.rerank(pool, top_k=size)
    seconds = time.perf_counter() - start
    traced = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    record = {
        "task": task,
        "seconds": seconds,
        "traced_peak_mb": traced,
        "rss_growth_mb": peak_rss_mb() - before,
        "order": [int(c.path[1:]) for c in result],
        "scores": [c.score for c in result],
    }
    print(json.dumps(record))


def threshold_child(quick: bool) -> None:
    """Dense against sparse core on single pools around the threshold: time and traced peak, same results."""
    import tracemalloc

    from galleria import InMemoryImageEmbeddingStore, KReciprocalReranker
    from galleria.rerank import _common

    sizes = (250, 500) if quick else (250, 500, 1000, 1500, 2000, 3000)
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(400, 512))
    vectors, _ = clustered(rng, centres, max(sizes) + 10, 0.6)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"t{i:05d}" for i in range(len(vectors))], vectors, space="cosine"
    )
    reranker = KReciprocalReranker(store, k1=K1, k2=K2, lambda_value=LAMBDA)
    rows = []
    for size in sizes:
        pools = store.retrieve_by_vector(vectors[-3:], k=size)
        entry: dict[str, Any] = {"pool": size}
        outputs = {}
        for route, threshold in (("dense", 10**12), ("sparse", 1)):
            _common.SPARSE_POOL_SIZE = threshold
            best = min(_timed(lambda p=pools, k=size: reranker.rerank_batch(p, top_k=k)) for _ in range(2))
            tracemalloc.start()
            outputs[route] = reranker.rerank_batch(pools, top_k=size)
            entry[f"{route}_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20 / len(pools)
            tracemalloc.stop()
            entry[f"{route}_ms"] = best / len(pools) * 1e3
        entry["identical"] = outputs["dense"] == outputs["sparse"]
        rows.append(entry)
    print(json.dumps(rows))


def bench_large(quick: bool) -> dict[str, Any]:
    """Large pools, each in its own child process, and the dense/sparse threshold sweep."""
    from galleria.rerank import _common

    sizes = (1_000, 3_000) if quick else (5_000, 20_000, 50_000)
    tasks = [f"large:{size}:sparse" for size in sizes] + [f"large:{sizes[0]}:dense"]
    results: dict[str, Any] = {"threshold": _common.SPARSE_POOL_SIZE, "dim": LARGE_DIM, "runs": {}}
    for task in tasks:
        command = [sys.executable, str(Path(__file__).resolve()), "--child", task, "--folder", "-"]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        record = json.loads(done.stdout.strip().splitlines()[-1])
        results["runs"][task] = record
        print(
            f"{task:20s} {record['seconds']:8.2f} s   traced peak {record['traced_peak_mb']:7.0f} MB   "
            f"peak RSS growth {record['rss_growth_mb']:7.0f} MB"
        )
    dense, sparse = results["runs"][tasks[-1]], results["runs"][tasks[0]]
    results["dense_equals_sparse"] = dense["order"] == sparse["order"] and dense["scores"] == sparse["scores"]
    results["dense_vs_sparse_max_diff"] = float(
        np.abs(np.array(dense["scores"]) - np.array(sparse["scores"])).max()
    )
    print(f"pool {sizes[0]}: dense and sparse cores give identical results: {results['dense_equals_sparse']}")
    for record in results["runs"].values():
        del record["order"], record["scores"]
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "threshold", "--folder", "-"]
    if quick:
        command.append("--quick")
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    results["sweep"] = json.loads(done.stdout.strip().splitlines()[-1])
    for row in results["sweep"]:
        print(
            f"pool {row['pool']:5d}: dense {row['dense_ms']:8.1f} ms ({row['dense_peak_mb']:6.0f} MB), "
            f"sparse {row['sparse_ms']:8.1f} ms ({row['sparse_peak_mb']:6.0f} MB), "
            f"identical {row['identical']}"
        )
    return results


# ---------------------------------------------------------------------------- part 4: BLAS threads


COMPETITOR = """
import numpy as np
a = np.random.default_rng(0).random((600, 600), dtype=np.float32)
while True:
    a = (a @ a) / 600.0
"""


def bench_threads(quick: bool) -> dict[str, Any]:
    """The demo's re-ranking step, quiet and beside one busy process, with and without the BLAS limit."""
    import contextlib

    from galleria.cli.demo import DEMO_EMBEDDER, DEMO_INDEX_PARAMS, DEMO_SETTINGS
    from galleria.datasets import digits_folder, load_image_folder
    from galleria.embedders import PixelEmbedder
    from galleria.rerank import KReciprocalReranker, _common
    from galleria.store import InMemoryImageEmbeddingStore

    with tempfile.TemporaryDirectory(prefix="bench_threads_") as cache:
        dataset = load_image_folder(digits_folder(cache))
        split = dataset.split(n_queries=300, seed=0)
        store = InMemoryImageEmbeddingStore(
            split.gallery_paths,
            PixelEmbedder(**DEMO_EMBEDDER),
            "hnsw",
            index_params=DEMO_INDEX_PARAMS or None,
        )
        store.build_store(progress=False)
        pools = store.retrieve_top_k_similar(
            split.query_paths,
            DEMO_SETTINGS["pool"],
            query_expansion=True,
            expansion_alpha=DEMO_SETTINGS["expansion_alpha"],
            expansion_neighbors=DEMO_SETTINGS["expansion_neighbors"],
        )
    reranker = KReciprocalReranker(
        store, k1=DEMO_SETTINGS["k1"], k2=DEMO_SETTINGS["k2"], lambda_value=DEMO_SETTINGS["lambda_value"]
    )
    repeats = 2 if quick else 5

    def measure() -> tuple[float, float]:
        """Best wall and process CPU milliseconds per query over the repeats."""
        wall = cpu = float("inf")
        for _ in range(repeats):
            start, used = time.perf_counter(), time.process_time()
            reranker.rerank_batch(pools, top_k=100)
            wall = min(wall, time.perf_counter() - start)
            cpu = min(cpu, time.process_time() - used)
        return wall / len(pools) * 1e3, cpu / len(pools) * 1e3

    limited = _common._ONE_BLAS_THREAD
    results: dict[str, Any] = {"queries": len(pools), "pool": DEMO_SETTINGS["pool"]}
    for label, limit in (
        ("one BLAS thread (galleria)", limited),
        ("BLAS default threads", contextlib.nullcontext()),
    ):
        _common._ONE_BLAS_THREAD = limit  # type: ignore[assignment]
        try:
            reranker.rerank_batch(pools[:5], top_k=100)  # warm-up
            quiet_runs, busy_runs = [], []
            for _ in range(1 if quick else 3):  # alternate, so that the machine's own load affects both
                quiet_runs.append(measure())
                competitor = subprocess.Popen(
                    [sys.executable, "-c", COMPETITOR],
                    env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
                )
                try:
                    time.sleep(1.0)
                    busy_runs.append(measure())
                finally:
                    competitor.kill()
                    competitor.wait()
            quiet_runs.append(measure())
        finally:
            _common._ONE_BLAS_THREAD = limited
        calm, busy = min(quiet_runs), min(busy_runs)
        results[label] = {
            "quiet_ms": calm[0],
            "busy_ms": busy[0],
            "quiet_cpu_ms": calm[1],
            "busy_cpu_ms": busy[1],
        }
        print(
            f"{label:28s} quiet {calm[0]:7.3f} ms/query (CPU {calm[1]:.3f}), beside a busy process "
            f"{busy[0]:7.3f} ms/query (CPU {busy[1]:.3f}): {busy[0] / calm[0]:.2f}x"
        )
    return results


# ---------------------------------------------------------------------------- part 2: full matrices


def dense_reference(
    pg: np.ndarray, pp: np.ndarray, gg: np.ndarray, k1: int, k2: int, lam: float
) -> np.ndarray:
    """The reference algorithm of docs/reranking.md, steps 1–7, on dense (P+G)² arrays."""
    probes = pg.shape[0]
    dist = np.block([[pp, pg], [pg.T, gg]]).astype(np.float32)  # 1. stack ...
    np.square(dist, out=dist)  # ... and square
    dist /= np.max(dist, axis=0)  # 2. column maxima ...
    dist = np.ascontiguousarray(dist.T)  # ... then transpose
    size = dist.shape[0]
    ranking = np.argsort(dist, axis=1, kind="stable")  # 3.
    features = np.zeros((size, size), dtype=np.float32)  # 4.
    half = int(np.around(k1 / 2))
    for i in range(size):
        forward = ranking[i, : k1 + 1]
        backward = ranking[forward, : k1 + 1]
        reciprocal = forward[np.where(backward == i)[0]]
        expansion = reciprocal
        for candidate in reciprocal:
            candidate_forward = ranking[candidate, : half + 1]
            candidate_backward = ranking[candidate_forward, : half + 1]
            candidate_reciprocal = candidate_forward[np.where(candidate_backward == candidate)[0]]
            if len(np.intersect1d(candidate_reciprocal, reciprocal)) > 2 / 3 * len(candidate_reciprocal):
                expansion = np.append(expansion, candidate_reciprocal)
        expansion = np.unique(expansion)
        weight = np.exp(-dist[i, expansion])
        features[i, expansion] = weight / np.sum(weight)
    final = dist[:probes].copy()
    del dist
    if k2 != 1:  # 5.
        expanded = np.zeros_like(features)
        for i in range(size):
            expanded[i] = np.mean(features[ranking[i, :k2]], axis=0)
        features = expanded
    del ranking
    rows, columns = np.nonzero(features)  # 6. inverted index: column -> rows holding it
    order = np.argsort(columns, kind="stable")
    bounds = np.searchsorted(columns[order], np.arange(size + 1))
    inverted = [rows[order[bounds[c] : bounds[c + 1]]] for c in range(size)]
    jaccard = np.zeros((probes, size), dtype=np.float32)
    for p in range(probes):
        low = np.zeros(size, dtype=np.float32)
        for column in np.flatnonzero(features[p]):
            holders = inverted[column]
            low[holders] += np.minimum(features[p, column], features[holders, column])
        jaccard[p] = 1 - low / (2 - low)
    final = (1 - lam) * jaccard + lam * final  # 7.
    return final[:, probes:]


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), in MB.

    Read from ``/proc`` because ``ru_maxrss`` survives ``fork``/``exec`` and would report the
    parent's size for a child that never grew that big; falls back to ``ru_maxrss`` elsewhere.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(task: str, folder: Path) -> None:
    """Run one measurement in this fresh process and print a JSON line."""
    from galleria.rerank import k_reciprocal_rerank, k_reciprocal_rerank_features

    kind, mode = task.split(":")
    if kind == "features":
        inputs = [np.load(folder / f"{name}.npy") for name in ("probe", "gallery")]
    else:
        inputs = [np.load(folder / f"{name}.npy") for name in ("pg", "pp", "gg")]
    loaded = peak_rss_mb()
    start = time.perf_counter()
    if kind == "features":
        out = k_reciprocal_rerank_features(*inputs, k1=K1, k2=K2, lambda_value=LAMBDA, mode=mode)
    elif kind == "matrices":
        out = k_reciprocal_rerank(*inputs, k1=K1, k2=K2, lambda_value=LAMBDA, mode=mode)
    else:
        out = dense_reference(*inputs, K1, K2, LAMBDA)
    seconds = time.perf_counter() - start
    peak = peak_rss_mb()
    np.save(folder / f"out_{kind}_{mode}.npy", np.asarray(out, dtype=np.float32))
    print(json.dumps({"task": task, "seconds": seconds, "peak_mb": peak, "loaded_mb": loaded}))


def bench_full(quick: bool) -> dict[str, Any]:
    from galleria.distances import pairwise_distances

    probes, gallery, identities = (300, 2_000, 200) if quick else (3_368, 15_913, 1_501)
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(identities, 256))
    probe, _ = clustered(rng, centres, probes, 1.2)
    gallery_features, _ = clustered(rng, centres, gallery, 1.2)
    results: dict[str, Any] = {"probes": probes, "gallery": gallery, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="bench_rerank_") as name:
        folder = Path(name)
        np.save(folder / "probe.npy", probe)
        np.save(folder / "gallery.npy", gallery_features)
        np.save(folder / "pg.npy", pairwise_distances(probe, gallery_features, "cosine"))
        np.save(folder / "pp.npy", pairwise_distances(probe, probe, "cosine"))
        gg = np.lib.format.open_memmap(
            folder / "gg.npy", mode="w+", dtype=np.float32, shape=(gallery, gallery)
        )
        for start in range(0, gallery, 2048):
            gg[start : start + 2048] = pairwise_distances(
                gallery_features[start : start + 2048], gallery_features, "cosine"
            )
        gg.flush()
        del gg
        inputs_mb = sum((folder / f"{n}.npy").stat().st_size for n in ("pg", "pp", "gg")) / 2**20
        results["matrices_mb"] = inputs_mb
        tasks = [
            "features:paper",
            "features:reference",
            "matrices:paper",
            "matrices:reference",
            "dense:reference",
        ]
        for task in tasks:
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                task,
                "--folder",
                str(folder),
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            record = json.loads(done.stdout.strip().splitlines()[-1])
            results["runs"][task] = record
            print(
                f"{task:20s} {record['seconds']:8.2f} s   peak RSS {record['peak_mb']:8.0f} MB "
                f"(after loading inputs {record['loaded_mb']:.0f} MB)"
            )
        out = {task: np.load(folder / f"out_{task.replace(':', '_')}.npy") for task in tasks}
        dense = out["dense:reference"]
        results["diff"] = {
            "matrices:reference vs dense": float(np.abs(out["matrices:reference"] - dense).max()),
            "features:reference vs dense": float(np.abs(out["features:reference"] - dense).max()),
            "features:paper vs matrices:paper": float(
                np.abs(out["features:paper"] - out["matrices:paper"]).max()
            ),
        }
        results["rows_differing_features_vs_dense"] = int(
            (np.abs(out["features:reference"] - dense).max(axis=1) > 1e-5).sum()
        )
    for key, value in results["diff"].items():
        print(f"max |difference| {key}: {value:.2e}")
    return results


# ---------------------------------------------------------------------------- report


def write_report(
    pool: dict[str, Any] | None,
    full: dict[str, Any] | None,
    quick: bool,
    large: dict[str, Any] | None = None,
    threads: dict[str, Any] | None = None,
) -> str:
    lines = [
        "## k-reciprocal re-ranking",
        "",
        f"Measured by `benchmarks/suites/bench_rerank.py{' --quick' if quick else ''}` "
        f"on {platform.machine()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}; 2 CPU cores shared with other jobs, "
        "so absolute times are noisy (ratios measured side by side in one run). k1 = 20, k2 = 6, λ = 0.3.",
        "",
    ]
    if pool is not None:
        lines += [
            f"### Pool re-ranking (gallery of {pool['gallery']:,} unit 512-d vectors, exact cosine store)",
            "",
            "| pool | queries | `rerank` loop (ms/query) | `rerank_batch` (ms/query) "
            "| literal numpy (ms/query) | literal ÷ batch | max \\|Δd*\\| |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in pool["rows"]:
            t = row["ms_per_query"]
            lines.append(
                f"| {row['pool']} | {row['queries']} | {t['rerank (loop)']:.3f} | "
                f"{t['rerank_batch']:.3f} | {t['literal numpy (loop)']:.3f} | "
                f"{t['literal numpy (loop)'] / t['rerank_batch']:.1f}× | {row['max_abs_diff']:.1e} |"
            )
        lines += [
            "",
            "All three include reading the vectors from the store and building the pool's distance matrix "
            "with the same formula and the same small float32 BLAS product per pool; only "
            f"`rerank`/`rerank_batch` build `Candidate` objects (`top_k` = {TOP_K}; the agreement column "
            "compares whole pools). The re-ranker runs its BLAS products on one thread (threadpoolctl): "
            "beside other work, OpenBLAS's threads make each small product several times slower.",
            "",
        ]
        compared = [row for row in pool["rows"] if "pyvisim" in row]
        if compared:
            lines += [
                "#### Against pyvisim 1.0 (`KReciprocalReranker.rerank`, one query at a time)",
                "",
                "| pool | pyvisim BLAS threads | pyvisim (ms/query) | `rerank_batch` (ms/query) | speed-up "
                "| same order | max \\|Δd*\\| | median per pool | pools over 1e-6 |",
                "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for row in compared:
                versus = row["pyvisim"]
                for label in ("default", "1 thread"):
                    entry = versus[label]
                    lines.append(
                        f"| {row['pool']} | {label} | {entry['pyvisim_ms']:.3f} | {entry['batch_ms']:.3f} | "
                        f"{entry['pyvisim_ms'] / entry['batch_ms']:.1f}× | "
                        f"{versus['same_order']}/{row['queries']} "
                        f"| {versus['max_abs_diff']:.1e} | {versus['median_abs_diff']:.1e} "
                        f"| {versus['pools_over_1e-6']} |"
                    )
            lines += [
                "",
                "pyvisim 1.0 runs in its own virtual environment (`pip install pyvisim==1.0.0 faiss-cpu`, "
                "passed with `--pyvisim-python`), on the same pools: the store's unit vectors in a FAISS "
                '`IndexFlatIP` (its space "ip", `1 - <a, b>`, the cosine store\'s formula on them) and the '
                "same candidate paths and scores. Each pyvisim timing is followed by a `rerank_batch` timing "
                "in this process; the better of that and the table above is used. Target: ≥ 5× at pool 100. "
                "The d* agree to the last float32 bits of the distances (pyvisim evidently computes them "
                "differently); where two neighbours are that close, a neighbourhood can differ and the "
                "pool's "
                "d* with it (the pools over 1e-6).",
                "",
            ]
    if large is not None:
        runs = large["runs"]
        lines += [
            f"### Large pools ({large['dim']}-d unit vectors, cosine; one `rerank` call per child process)",
            "",
            "| pool | core | time (s) | peak traced memory (MB) | peak RSS growth (MB) |",
            "|---:|---|---:|---:|---:|",
        ]
        for task, record in runs.items():
            _, size, route = task.split(":")
            lines.append(
                f"| {int(size):,} | {route} | {record['seconds']:.2f} | {record['traced_peak_mb']:.0f} | "
                f"{record['rss_growth_mb']:.0f} |"
            )
        lines += [
            "",
            f"Pools of {large['threshold']:,} candidates or more go through the sparse pool core "
            "(`galleria.rerank.sparse_pool`: row blocks, neighbour lists, sparse features; memory near "
            "O(N·k1)); the dense cores hold several (N+1)² arrays (2.4 GB at 10,000, a MemoryError at "
            "20,000 before). Peak traced memory is tracemalloc's peak during the call (numpy's arrays "
            "included); RSS growth is the child's peak RSS after the call minus before it. Target: pools "
            f"of 20,000 and 50,000 within 1 GB extra. The dense and sparse cores on the same "
            f"{int(next(iter(runs)).split(':')[1]):,}-pool: identical results: "
            f"{large['dense_equals_sparse']} "
            f"(max |Δd*| {large['dense_vs_sparse_max_diff']:.1e}).",
            "",
            "Threshold sweep (3 pools per size, 512-d; time and traced peak per pool):",
            "",
            "| pool | dense (ms) | sparse (ms) | dense peak (MB) | sparse peak (MB) | identical |",
            "|---:|---:|---:|---:|---:|---|",
        ]
        for row in large["sweep"]:
            lines.append(
                f"| {row['pool']:,} | {row['dense_ms']:.1f} | {row['sparse_ms']:.1f} | "
                f"{row['dense_peak_mb']:.0f} | {row['sparse_peak_mb']:.0f} | {row['identical']} |"
            )
        lines += [""]
    if threads is not None:
        lines += [
            f"### BLAS threads beside a busy process (the demo's re-ranking: {threads['queries']} queries, "
            f"pool {threads['pool']} of the αQE search, k1 = 50, k2 = 6, λ = 0)",
            "",
            "| BLAS in the re-ranker | quiet (ms/query) | beside a busy process (ms/query) | busy ÷ quiet "
            "| CPU quiet (ms/query) | CPU busy (ms/query) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for label in ("one BLAS thread (galleria)", "BLAS default threads"):
            entry = threads[label]
            lines.append(
                f"| {label} | {entry['quiet_ms']:.3f} | {entry['busy_ms']:.3f} | "
                f"{entry['busy_ms'] / entry['quiet_ms']:.2f}× | {entry['quiet_cpu_ms']:.3f} | "
                f"{entry['busy_cpu_ms']:.3f} |"
            )
        lines += [
            "",
            "`rerank_batch` on the demo's pools (built as `galleria demo` builds them: digits, pixel "
            "embedder, HNSW), re-ranking only; quiet and busy runs alternate (3 busy, 4 quiet rounds of "
            "5 calls), best of each. The busy process spins float32 matrix products on one BLAS thread. "
            '"BLAS default threads" is the same code with the limit switched off (how it ran before). '
            "CPU is this process's CPU time (all its threads): spinning BLAS threads show there, waiting "
            'for a core does not. The machine is shared with other jobs, so "quiet" is never fully '
            "quiet. Target: busy within 1.5× of quiet.",
            "",
        ]
    if full is not None:
        runs = full["runs"]
        dense = runs["dense:reference"]["seconds"]
        lines += [
            f"### Full re-ranking ({full['probes']:,} probes × {full['gallery']:,} gallery, 256-d)",
            "",
            f"Each row is its own child process; peak RSS includes its inputs (the three float32 distance "
            f"matrices are {full['matrices_mb']:.0f} MB together, the features 19 MB at full size).",
            "",
            "| run | time (s) | vs dense | peak RSS (MB) | RSS after loading inputs (MB) |",
            "|---|---:|---:|---:|---:|",
        ]
        for task, record in runs.items():
            lines.append(
                f"| `{task}` | {record['seconds']:.2f} | {dense / record['seconds']:.1f}× | "
                f"{record['peak_mb']:.0f} | {record['loaded_mb']:.0f} |"
            )
        lines += [""]
        for key, value in full["diff"].items():
            lines.append(f"- max \\|difference\\| {key}: {value:.1e}")
        lines += [
            f"- probe rows where features:reference differs from dense by > 1e-5: "
            f"{full['rows_differing_features_vs_dense']} (distances recomputed from features in blocks can "
            "differ from the full matrix in the last float32 bit, which may swap near-tied neighbours)",
            "",
            "Targets: ≥ 10× faster than the dense transcription; from features peak RSS ≤ 2 GB; from the "
            "three matrices peak RSS ≤ their size + 1 GB; reference mode within 1e-5 of the dense output.",
            "",
        ]
    return "\n".join(lines)


def keep_other_part(previous: str, report: str) -> str:
    """``report`` plus each ``### `` section of ``previous`` that ``report`` lacks (pool part first)."""

    def sections(text: str) -> tuple[str, dict[str, str]]:
        head, *parts = text.split("\n### ")
        return head, {part.split("\n", 1)[0]: "### " + part.rstrip("\n") + "\n" for part in parts}

    _, old = sections(previous)
    head, new = sections(report)
    # Section titles carry sizes in parentheses, so they are matched by the text before them.
    present = {title.split(" (")[0] for title in new}
    merged = {title.split(" (")[0]: text for title, text in new.items()}
    for title, text in old.items():
        if title.split(" (")[0] not in present:
            merged[title.split(" (")[0]] = text
    order = ["Pool re-ranking", "Large pools", "BLAS threads beside a busy process", "Full re-ranking"]
    body = [merged[key] for key in order if key in merged]
    body += [text for key, text in merged.items() if key not in order]
    return head.rstrip("\n") + "\n\n" + "\n".join(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--part", choices=("pool", "large", "threads", "full", "all"), default="all")
    parser.add_argument(
        "--pyvisim-python",
        default=os.environ.get("PYVISIM_PYTHON"),
        help="python of a virtual environment with pyvisim==1.0.0 and faiss-cpu (pool part's baseline)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "pyvisim":
        pyvisim_child(Path(args.folder), args.quick)
        return
    if args.child == "threshold":
        threshold_child(args.quick)
        return
    if args.child and args.child.startswith("large:"):
        large_pool_child(args.child, args.quick)
        return
    if args.child:
        child(args.child, Path(args.folder))
        return
    pool = large = threads = full = None
    if args.part in ("pool", "all"):
        pool = bench_pools(args.quick, args.pyvisim_python)
    if args.part in ("large", "all"):
        large = bench_large(args.quick)
    if args.part in ("threads", "all"):
        threads = bench_threads(args.quick)
    if args.part in ("full", "all"):
        full = bench_full(args.quick)
    report = write_report(pool, full, args.quick, large, threads)
    target = ROOT / "docs" / "benchmarks" / "rerank.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    if args.part != "all" and target.exists():  # keep the other parts' figures from the last run
        report = keep_other_part(target.read_text(encoding="utf-8"), report)
    temporary = target.with_suffix(".md.tmp")
    temporary.write_text(report + "\n", encoding="utf-8")
    temporary.replace(target)
    print(f"wrote {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
