"""Issue 19: the measured effect of each change that brings a re-ranker to its authors' formulation.

Run ``.venv/bin/python benchmarks/experiments/bench_rerank_fidelity.py`` (a few minutes on 2 cores;
``--quick`` for a
smoke run). Prints one Markdown table; every row sets the old reading beside the new one on the
same data, so the figures come from one run.

Data (all seeded, ``numpy.random.default_rng``):

* **two moons** — ``sklearn.datasets.make_moons`` (noise 0.08), the 2-D points centred and lifted
  to 3-D as ``(x, y, 1)`` then L2-normalised, so cosine similarity is a smooth function of the
  planar distance; 1,000 gallery points and 200 queries, a result relevant when it is on the
  query's moon.
* **clusters** — 30 classes × 40 gallery items (and 5 queries per class), 128-D Gaussian centres
  (σ = 1) plus σ = 2 noise, L2-normalised (clustered features with overlapping neighbourhoods).

mAP is over the whole gallery ranking (full settings) or over the pool followed by the rest of the
gallery in its plain order (pool settings, pool 200).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def mean_ap(distances: np.ndarray, query_labels: np.ndarray, gallery_labels: np.ndarray) -> float:
    order = np.argsort(distances, axis=1, kind="stable")
    hits = gallery_labels[order] == query_labels[:, None]
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    return float(((precision * hits).sum(axis=1) / np.maximum(hits.sum(axis=1), 1)).mean())


def two_moons(quick: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import make_moons

    gallery_n, queries_n = (400, 60) if quick else (1000, 200)
    points, labels = make_moons(gallery_n + queries_n, noise=0.08, random_state=0)
    points = points - points.mean(axis=0)
    lifted = np.concatenate([points, np.ones((len(points), 1))], axis=1)
    unit = (lifted / np.linalg.norm(lifted, axis=1, keepdims=True)).astype(np.float32)
    return unit[queries_n:], labels[queries_n:], unit[:queries_n], labels[:queries_n]


def clusters(quick: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(17)
    classes, per_class, per_query = (10, 40, 3) if quick else (30, 40, 5)
    centres = rng.normal(size=(classes, 128))

    def draw(count: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.repeat(np.arange(classes), count)
        vectors = centres[labels] + 2.0 * rng.normal(size=(len(labels), 128))
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32), labels

    gallery, gallery_labels = draw(per_class)
    queries, query_labels = draw(per_query)
    return gallery, gallery_labels, queries, query_labels


#: ms per query of the last pool_map calls.
timings: list[float] = []


def pool_map(
    reranker: Any, store: Any, queries: np.ndarray, query_labels: np.ndarray, labels: np.ndarray, pool: int
) -> float:
    """mAP of the re-ranked pool followed by the rest of the gallery in plain order."""
    rows = {path: int(path[1:]) for path in store.paths}
    everything = store.retrieve_by_vector(queries, k=len(store))
    reranker.rerank_batch([everything[0][:pool]], top_k=pool)  # warm-up (builds a gallery graph)
    started = time.perf_counter()
    ranked = reranker.rerank_batch([c[:pool] for c in everything], top_k=pool)
    timings.append(1000 * (time.perf_counter() - started) / len(queries))
    distances = np.empty((len(queries), len(store)))
    for q, (head, full) in enumerate(zip(ranked, everything, strict=True)):
        order = [rows[c.path] for c in head] + [rows[c.path] for c in full[pool:]]
        distances[q, order] = np.arange(len(order))
    return mean_ap(distances, query_labels, labels)


def last_iterate_cg(
    matvec: Callable[[np.ndarray], np.ndarray], b: np.ndarray, *, tol: float, maxiter: int
) -> np.ndarray:
    """Conjugate gradient answering its last iterate (galleria before issue 19), for comparison."""
    x = np.zeros_like(b)
    residual = b.copy()
    direction = residual.copy()
    squared = np.einsum("ij,ij->i", residual, residual)
    bound = (tol**2) * squared
    active = squared > bound
    for _ in range(maxiter):
        if not active.any():
            break
        product = matvec(direction)
        curvature = np.einsum("ij,ij->i", direction, product)
        step = np.zeros_like(squared)
        usable = active & (curvature > 0)
        step[usable] = squared[usable] / curvature[usable]
        x += step[:, None] * direction
        residual -= step[:, None] * product
        updated = np.einsum("ij,ij->i", residual, residual)
        active &= updated > bound
        ratio = np.zeros_like(squared)
        moving = squared > 0
        ratio[moving] = updated[moving] / squared[moving]
        direction = residual + ratio[:, None] * direction
        squared = updated
    return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from galleria.rerank import (
        DiffusionReranker,
        diffusion_rerank_features,
        gnn_rerank_features,
        k_reciprocal_rerank,
        k_reciprocal_rerank_features,
    )
    from galleria.rerank import diffusion as diffusion_module
    from galleria.store import InMemoryImageEmbeddingStore

    rows: list[tuple[str, str, str, str]] = []

    def row(item: str, data: str, before: str, after: str) -> None:
        rows.append((item, data, before, after))
        print(f"{item} | {data} | {before} | {after}", file=sys.stderr, flush=True)

    moons = two_moons(args.quick)
    blobs = clusters(args.quick)
    for name, (gallery, labels, queries, query_labels) in (("two moons", moons), ("clusters", blobs)):
        plain = mean_ap(1.0 - queries @ gallery.T, query_labels, labels)
        row("plain retrieval (reference point)", name, "–", f"mAP {plain:.4f}")

        # GNN: the 2020 form (λ = 0) against the authors' current blend (λ = 0.3), full setting.
        paper = gnn_rerank_features(queries, gallery, lambda_value=0.0)
        blended = gnn_rerank_features(queries, gallery)
        relevant = labels[None, :] == query_labels[:, None]
        zero = float((paper[relevant] >= 1.0).mean())
        row(
            "GNN λ blend (full, k1 = 26, k2 = 7)",
            name,
            f"λ = 0: mAP {mean_ap(paper, query_labels, labels):.4f}, {100 * zero:.1f}% of relevant items "
            "at zero similarity",
            f"λ = 0.3: mAP {mean_ap(blended, query_labels, labels):.4f}",
        )

        # Diffusion's k: 50 other neighbours (before) against 50 counting the item itself (after).
        before = diffusion_rerank_features(queries, gallery, k=50, count_self=False)
        after = diffusion_rerank_features(queries, gallery, k=50)
        row(
            "diffusion k = 50 (full)",
            name,
            f"50 others: mAP {mean_ap(before, query_labels, labels):.4f}",
            f"self + 49 (authors): mAP {mean_ap(after, query_labels, labels):.4f}",
        )

        # Conjugate gradient: last iterate (before) against the smallest-residual one, and converged.
        original = diffusion_module.conjugate_gradient
        diffusion_module.conjugate_gradient = last_iterate_cg  # type: ignore[assignment]
        try:
            last = diffusion_rerank_features(queries, gallery)
        finally:
            diffusion_module.conjugate_gradient = original
        converged = diffusion_rerank_features(queries, gallery, maxiter=1000)
        row(
            "CG answer (full diffusion, α = 0.99, 20 iterations)",
            name,
            f"last iterate: mAP {mean_ap(last, query_labels, labels):.4f}",
            f"best iterate: mAP {mean_ap(after, query_labels, labels):.4f}; converged (≤ 1,000 "
            f"iterations): {mean_ap(converged, query_labels, labels):.4f}",
        )

        # Pool diffusion: the pool's own graph (before) against the gallery graph truncated to the pool.
        store = InMemoryImageEmbeddingStore.from_embeddings([f"g{i}" for i in range(len(gallery))], gallery)
        own = pool_map(DiffusionReranker(store, graph="pool"), store, queries, query_labels, labels, 200)
        truncated = pool_map(DiffusionReranker(store), store, queries, query_labels, labels, 200)
        started = time.perf_counter()
        diffusion_module.gallery_graph(InMemoryImageEmbeddingStore.from_embeddings(store.paths, gallery), 49)
        build = time.perf_counter() - started
        row(
            "pool diffusion graph (pool 200)",
            name,
            f"pool's own graph: mAP {own:.4f}, {timings[-2]:.1f} ms/query",
            f"gallery graph truncated: mAP {truncated:.4f}, {timings[-1]:.1f} ms/query (graph of "
            f"{len(gallery):,} items built once: {build:.2f} s)",
        )

        # k-reciprocal paper mode, euclidean metric: the Euclidean distance against its square.
        unsquared = np.sqrt(
            np.maximum(
                np.sum(np.concatenate([queries, gallery]) ** 2, axis=1)[:, None]
                + np.sum(np.concatenate([queries, gallery]) ** 2, axis=1)[None, :]
                - 2.0 * np.concatenate([queries, gallery]) @ np.concatenate([queries, gallery]).T,
                0.0,
            )
        )
        p = len(queries)
        before_kr = k_reciprocal_rerank(unsquared[:p, p:], unsquared[:p, :p], unsquared[p:, p:])
        after_kr = k_reciprocal_rerank_features(queries, gallery, metric="euclidean")
        row(
            "k-reciprocal paper mode, metric euclidean (full)",
            name,
            f"Euclidean: mAP {mean_ap(before_kr, query_labels, labels):.4f}",
            f"squared Euclidean: mAP {mean_ap(after_kr, query_labels, labels):.4f}",
        )

    # The pool re-ranker's reference mode against the full reference, one probe, whole gallery.
    from galleria.rerank import KReciprocalReranker

    gallery, labels, queries, _ = blobs
    store = InMemoryImageEmbeddingStore.from_embeddings([f"g{i}" for i in range(len(gallery))], gallery)
    worst = 0.0
    for q in range(3):
        candidates = store.retrieve_by_vector(queries[q : q + 1], k=len(store))[0]
        got = {
            c.path: c.score
            for c in KReciprocalReranker(store, mode="reference").rerank(candidates, len(store))
        }
        full = k_reciprocal_rerank_features(queries[q : q + 1], gallery, mode="reference")[0]
        worst = max(worst, float(np.max(np.abs([got[f"g{i}"] - full[i] for i in range(len(gallery))]))))
    row(
        "k-reciprocal pool mode='reference' vs full reference",
        "clusters, 3 probes × whole gallery",
        "no reference mode for pools",
        f"max |Δ| = {worst:.1e}",
    )

    lines = [
        "| item | data | before (old reading) | after (authors' reading) |",
        "| --- | --- | --- | --- |",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows),
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
