"""Benchmark of the re-ranking methods behind the Reranker protocol: pools of 200, and Market-1501 size.

Run ``.venv/bin/python benchmarks/suites/bench_rerank_methods.py`` (a few minutes) or with ``--quick``.
Writes ``docs/benchmarks/rerank_methods.md``.

Part 1 — pool re-ranking, ms/query at pool 200. Data: ``numpy.random.default_rng(0)``; 20,000 unit
vectors in 512-d around 1,000 Gaussian centres (σ = 0.6 per coordinate before normalising) in an
exact cosine store; 200 queries drawn around random centres the same way; each query's pool is its
top-200 retrieval (not timed). Timed: ``rerank_batch`` of every method on all pools (k-reciprocal
k1 = 20, k2 = 6, λ = 0.3; diffusion k = 50, query_k = 10, α = 0.99, γ = 3, 20 CG iterations; GNN
k1 = 26, k2 = 7; DBA + αQE 10 neighbours, α = 3 — its pools come from the augmented store, whose
augmentation of the 20,000 vectors is timed once on its own).

Part 2 — the full probe×gallery setting at Market-1501 size. Data: ``default_rng(1)``; 3,368 probes
and 15,913 gallery items, 256-d unit features around 1,501 identities (σ = 1.2). Each function runs
in its own child process that loads the features from ``.npy`` files, so its peak RSS (``VmHWM``,
read as soon as the function returns, before the mAP check) is its own: ``diffusion_rerank_features``,
``gnn_rerank_features`` (scipy.sparse) and ``dba_aqe_rerank_features`` (``--full-methods`` adds
``k_reciprocal_rerank_features``, whose figures ``bench_rerank.py`` reports; ``gnn-reference`` the
authors' pure-PyTorch GNN on the same features, dense (P + G)² matrices — about 8 GB at this size —
compared with ``gnn`` on the same queries). mAP of each against the
identities is printed beside its time, as a sanity check (synthetic data: not a quality claim).

``--part gnn`` — GNN pool re-ranking beside the authors' algorithm as they publish it in pure
PyTorch (transcribed in :func:`_reference_gnn`: ``topk``, a dense adjacency, their propagation
kernel as a loop over the k2 neighbours, the λ = 0.3 blend), on the part-1 data at pools of 200
(100 queries) and 1,000 (20 queries); best of 3 interleaved runs each, and the share of queries
whose top 10 agree.
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

ROOT = Path(__file__).resolve().parents[2]


def _clustered(rng: np.random.Generator, centres: np.ndarray, count: int, sigma: float) -> tuple[Any, Any]:
    ids = rng.integers(0, len(centres), count)
    vectors = centres[ids] + rng.normal(0, sigma, (count, centres.shape[1]))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32), ids


def part_pools(quick: bool) -> list[dict[str, Any]]:
    from galleria.rerank import DBAReranker, DiffusionReranker, GnnReranker, KReciprocalReranker
    from galleria.store import InMemoryImageEmbeddingStore

    rng = np.random.default_rng(0)
    size, queries_n = (4000, 40) if quick else (20_000, 200)
    centres = rng.normal(size=(size // 20, 512))
    gallery, _ = _clustered(rng, centres, size, 0.6)
    queries, _ = _clustered(rng, centres, queries_n, 0.6)
    store = InMemoryImageEmbeddingStore.from_embeddings([f"g{i}" for i in range(size)], gallery)
    pools = store.retrieve_by_vector(queries, k=200)
    rows = []
    started = time.perf_counter()
    dba = DBAReranker(store)
    augment_seconds = time.perf_counter() - started
    dba_pools = dba.store.retrieve_by_vector(queries, k=200)
    for name, reranker, lists in (
        ("k-reciprocal", KReciprocalReranker(store), pools),
        ("diffusion", DiffusionReranker(store), pools),
        ("gnn", GnnReranker(store), pools),
        ("dba+aqe", dba, dba_pools),
    ):
        reranker.rerank_batch(lists[:2], top_k=10)  # warm-up
        started = time.perf_counter()
        reranker.rerank_batch(lists, top_k=10)
        batch = time.perf_counter() - started
        started = time.perf_counter()
        for candidates in lists[:20]:
            reranker.rerank(candidates, top_k=10)
        single = (time.perf_counter() - started) / min(20, len(lists))
        rows.append({"method": name, "batch_ms": 1000 * batch / len(lists), "single_ms": 1000 * single})
        print(f"pool {name}: {rows[-1]}", file=sys.stderr)
    rows.append({"method": "dba augmentation", "seconds": augment_seconds, "gallery": size})
    return rows


_CHILD = """
import json, resource, sys, time
import numpy as np
from galleria import rerank
name, folder = sys.argv[1], sys.argv[2]
probes = np.load(folder + "/probes.npy"); gallery = np.load(folder + "/gallery.npy")
probe_ids = np.load(folder + "/probe_ids.npy"); gallery_ids = np.load(folder + "/gallery_ids.npy")
if name == "gnn-reference":  # the authors' full setting in pure PyTorch (dense (P + G)² matrices)
    import torch
    sys.path.insert(0, sys.argv[3])
    from bench_rerank_methods import _reference_gnn_full
    def function(p, g):
        with torch.no_grad():
            return _reference_gnn_full(torch.from_numpy(p), torch.from_numpy(g), 26, 7, 0.3).numpy()
else:
    function = {"k-reciprocal": rerank.k_reciprocal_rerank_features,
                "diffusion": rerank.diffusion_rerank_features,
                "gnn": rerank.gnn_rerank_features, "dba+aqe": rerank.dba_aqe_rerank_features}[name]
probes, gallery = probes.astype(np.float32), gallery.astype(np.float32)
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu = usage.ru_utime + usage.ru_stime
started = time.perf_counter()
distances = function(probes, gallery)
seconds = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu = usage.ru_utime + usage.ru_stime - cpu
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
np.save(folder + "/distances_" + name + ".npy", distances.astype(np.float32))
order = np.argsort(distances, axis=1, kind="stable")
hits = gallery_ids[order] == probe_ids[:, None]
ranks = np.arange(1, hits.shape[1] + 1)
precision = np.cumsum(hits, axis=1) / ranks
ap = (precision * hits).sum(axis=1) / np.maximum(hits.sum(axis=1), 1)
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "peak_mb": peak / 1024, "map": float(ap.mean()),
                  "top1": float(hits[:, 0].mean())}))
"""


def part_full(quick: bool, methods: list[str]) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    probes_n, gallery_n, ids = (400, 2000, 200) if quick else (3368, 15913, 1501)
    centres = rng.normal(size=(ids, 256))
    probes, probe_ids = _clustered(rng, centres, probes_n, 1.2)
    gallery, gallery_ids = _clustered(rng, centres, gallery_n, 1.2)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, array in (
            ("probes", probes),
            ("gallery", gallery),
            ("probe_ids", probe_ids),
            ("gallery_ids", gallery_ids),
        ):
            np.save(os.path.join(folder, f"{name}.npy"), array)
        plain = probes @ gallery.T
        order = np.argsort(-plain, axis=1, kind="stable")
        hits = gallery_ids[order] == probe_ids[:, None]
        precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
        plain_map = float(((precision * hits).sum(axis=1) / np.maximum(hits.sum(axis=1), 1)).mean())
        rows.append({"method": "plain (cosine)", "map": plain_map, "top1": float(hits[:, 0].mean())})
        for name in methods:
            process = subprocess.run(
                [sys.executable, "-c", _CHILD, name, folder, str(Path(__file__).resolve().parent)],
                capture_output=True,
                text=True,
                check=False,
            )
            if process.returncode != 0:
                rows.append({"method": name, "error": process.stderr.strip().splitlines()[-1]})
            else:
                rows.append({"method": name, **json.loads(process.stdout)})
            print(f"full {rows[-1]}", file=sys.stderr)
        if "gnn" in methods and "gnn-reference" in methods:  # the same queries, side by side
            ours = np.load(os.path.join(folder, "distances_gnn.npy"))
            theirs = np.load(os.path.join(folder, "distances_gnn-reference.npy"))
            top = 10
            mine = np.argsort(ours, axis=1, kind="stable")[:, :top]
            reference = np.argsort(theirs, axis=1, kind="stable")[:, :top]
            rows.append(
                {
                    "method": "gnn vs gnn-reference",
                    "max_abs_diff": float(np.abs(ours - theirs).max()),
                    "same_top10": float(
                        np.mean([set(a) == set(b) for a, b in zip(mine, reference, strict=True)])
                    ),
                }
            )
            print(f"full {rows[-1]}", file=sys.stderr)
    return rows


def _reference_gnn(probe: Any, candidates: Any, k1: int, k2: int, lamb: float) -> Any:
    """GNN re-ranking of one pool as the authors publish it (pure PyTorch): :func:`_reference_gnn_full`
    with the probe as the one probe. Returns the candidates' distances (1 - similarity)."""
    return _reference_gnn_full(probe, candidates, k1, k2, lamb)[0]


def _reference_gnn_full(probe: Any, candidates: Any, k1: int, k2: int, lamb: float) -> Any:
    """GNN re-ranking as the authors publish it (pure PyTorch, dense), transcribed step by step.

    The set is the probes then the candidates (unit features); ``topk`` ranking lists; ``A`` the k1
    adjacency; ``S`` the squared top similarities; two rounds of ``A ← A + Aᵀ``, ``A_i ← Σ_j
    S_ij A_{rank_ij}`` over the k2 nearest, L2 row normalisation; the final similarity
    ``(1 - λ) A_q · A_g + λ cos(q, g)``. Returns the (probes, candidates) distances (1 - similarity).
    """
    import torch

    x = torch.cat([probe, candidates], dim=0)
    original = probe @ candidates.T
    score = x @ x.T
    top, rank = score.topk(k=k1, dim=-1, largest=True, sorted=True)
    adjacency = torch.zeros_like(score)
    adjacency.scatter_(1, rank, 1.0)
    weights = top * top
    if k2 != 1:
        for _ in range(2):
            adjacency = adjacency + adjacency.T
            # The authors' propagation kernel: row i ← Σ_j S_ij · A[rank_ij] over the k2 nearest.
            propagated = torch.zeros_like(adjacency)
            for j in range(k2):
                propagated.addcmul_(weights[:, j : j + 1], adjacency.index_select(0, rank[:, j]))
            adjacency = propagated
            adjacency = adjacency / torch.norm(adjacency, p=2, dim=1, keepdim=True)
    count = probe.shape[0]
    similarity = (1 - lamb) * (adjacency[:count] @ adjacency[count:].T) + lamb * original
    return 1.0 - similarity


def part_gnn(quick: bool) -> list[dict[str, Any]]:
    """GNN pool re-ranking against the authors' pure-PyTorch form at pools of 200 and 1,000."""
    import torch

    from galleria.rerank import GnnReranker
    from galleria.store import InMemoryImageEmbeddingStore

    rng = np.random.default_rng(0)
    size, queries_n = (4000, 20) if quick else (20_000, 100)
    centres = rng.normal(size=(size // 20, 512))
    gallery, _ = _clustered(rng, centres, size, 0.6)
    queries, _ = _clustered(rng, centres, queries_n, 0.6)
    store = InMemoryImageEmbeddingStore.from_embeddings([f"g{i}" for i in range(size)], gallery)
    reranker = GnnReranker(store)
    rows = []
    repeats = 3
    for pool in (200, 1000):
        lists = store.retrieve_by_vector(queries, k=pool)
        count = queries_n if pool == 200 else max(2, queries_n // 5)
        lists = lists[:count]
        tensors = [
            (
                torch.from_numpy(queries[i : i + 1]),
                torch.from_numpy(store.embeddings_of([c.path for c in candidates]).astype(np.float32)),
            )
            for i, candidates in enumerate(lists)
        ]
        reranker.rerank_batch(lists[:1], top_k=10)  # warm-up
        _reference_gnn(*tensors[0], 26, 7, 0.3)
        batch = single = ref_seconds = float("inf")
        for _ in range(repeats):  # interleaved, best of each: the machine is shared
            started = time.perf_counter()
            ours = reranker.rerank_batch(lists, top_k=10)
            batch = min(batch, (time.perf_counter() - started) / count)
            started = time.perf_counter()
            for candidates in lists:
                reranker.rerank(candidates, top_k=10)
            single = min(single, (time.perf_counter() - started) / count)
            started = time.perf_counter()
            with torch.no_grad():
                reference = [_reference_gnn(q, c, 26, 7, 0.3).numpy() for q, c in tensors]
            ref_seconds = min(ref_seconds, (time.perf_counter() - started) / count)
        same = np.mean(
            [
                [c.path for c in mine] == [lst[j].path for j in np.argsort(ref, kind="stable")[:10]]
                for mine, lst, ref in zip(ours, lists, reference, strict=True)
            ]
        )
        rows.append(
            {
                "pool": pool,
                "queries": count,
                "batch_ms": 1000 * batch,
                "single_ms": 1000 * single,
                "reference_ms": 1000 * ref_seconds,
                "torch_threads": torch.get_num_threads(),
                "same_top10": float(same),
            }
        )
        print(f"gnn pool {rows[-1]}", file=sys.stderr)
    return rows


def markdown(pools: list[dict[str, Any]], full: list[dict[str, Any]], quick: bool) -> str:
    lines = [
        "# Re-ranking methods",
        "",
        "`benchmarks/suites/bench_rerank_methods.py`, one run on the shared 2-core machine "
        "(other jobs may have "
        "been running: compare rows).",
        "",
        "## Pools of 200 (ms per query)",
        "",
        "| method | `rerank_batch` | `rerank` one by one |",
        "| --- | ---: | ---: |",
    ]
    for row in pools:
        if "batch_ms" in row:
            lines.append(f"| {row['method']} | {row['batch_ms']:.1f} | {row['single_ms']:.1f} |")
    augment = next(row for row in pools if row["method"] == "dba augmentation")
    lines += [
        "",
        f"DBA's augmentation of the {augment['gallery']:,}-vector store (once per store, kept in its saved "
        f"file): {augment['seconds']:.1f} s.",
        "",
        "## Full probe×gallery setting"
        + (" (quick sizes)" if quick else ", Market-1501 size (3,368 × 15,913, 256-d)"),
        "",
        "| method | seconds | peak RSS (MB) | mAP | top-1 |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in full:
        if "error" in row:
            lines.append(f"| {row['method']} | failed: {row['error']} | | | |")
        elif "seconds" in row:
            lines.append(
                f"| {row['method']} | {row['seconds']:.1f} | {row['peak_mb']:.0f} | {row['map']:.4f} | "
                f"{row['top1']:.4f} |"
            )
        else:
            lines.append(f"| {row['method']} | – | – | {row['map']:.4f} | {row['top1']:.4f} |")
    lines += [
        "",
        "The synthetic identities are well separated (plain mAP ≈ 1), so part 2 measures time and memory, "
        "not quality; k-reciprocal's full-setting figures at this size are in its own section.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--part", choices=("pool", "full", "both", "gnn"), default="both")
    parser.add_argument(
        "--full-methods",
        default="diffusion,gnn,dba+aqe",
        help="methods of part 2 (k-reciprocal's full figures are in bench_rerank.py; add it to compare)",
    )
    args = parser.parse_args()
    if args.part == "gnn":
        print(json.dumps({"gnn_pools": part_gnn(args.quick)}, indent=1))
        return
    pools = part_pools(args.quick) if args.part in ("pool", "both") else []
    methods = args.full_methods.split(",")
    full = part_full(args.quick, methods) if args.part in ("full", "both") else []
    if args.part == "both":
        text = markdown(pools, full, args.quick)
        print(text)
        if not args.quick:
            (ROOT / "docs" / "benchmarks" / "rerank_methods.md").write_text(text, encoding="utf-8")
    else:
        print(json.dumps({"pools": pools, "full": full}, indent=1))


if __name__ == "__main__":
    main()
