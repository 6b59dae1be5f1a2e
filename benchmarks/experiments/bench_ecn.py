"""ECN re-ranking on the real galleries of ``bench_real.py``: plain / paper / adaptive, and a sweep.

Run ``.venv/bin/python benchmarks/experiments/bench_ecn.py`` (``--help``). Galleries with the pixel embedder
(:mod:`_real_data`, vectors cached under ``--cache``): the digits, Fashion-MNIST (1,000 × 20,000),
the Tux Paint stamps, and two galleries of many small classes: the stamps capped at 12 images per
class (a fifth of them the queries, stratified, seed 0) and the Fashion-MNIST gallery capped at 12
per class (the same 1,000 queries). Every re-ranker works on a pool of 200 of the plain search.

Rows: plain retrieval; ECN with the paper's t = 3, q = 8 (λ = 0); ECN with the adaptive rule
(:func:`galleria.rerank.ecn.ecn_params_from_statistics`, what the re-ranker uses without
parameters), both through :class:`~galleria.rerank.ecn.ECNReranker`; Recall@1 and mAP@100 with
their change from plain and a paired 95 % bootstrap interval (as ``bench_real.py``).
``--sweep`` also prints the changes over a grid of t, q and λ (the core on the same pools'
distances), the figures the adaptive rule was chosen from.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
_BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: the shared helpers and the other suites
sys.path.insert(0, str(_BENCH / "suites"))
sys.path.insert(0, str(_BENCH))

from bench_real import DEPTH, POOL, paired_interval, per_query  # noqa: E402

import _real_data  # noqa: E402
from galleria.datasets.folder import stratified_split  # noqa: E402
from galleria.distances import pairwise_distances_batched  # noqa: E402
from galleria.rerank.adaptive import store_statistics  # noqa: E402
from galleria.rerank.ecn import PAPER_PARAMS, ECNReranker, ecn_params_from_statistics, ecn_pools  # noqa: E402
from galleria.store import InMemoryImageEmbeddingStore  # noqa: E402

GALLERIES = ("digits", "fashion", "stamps", "stamps12", "fashion12")
CAP = 12


def _cap(labels: list[str], cap: int) -> np.ndarray:
    """Rows of the first ``cap`` items of every label, in row order."""
    seen: dict[str, int] = {}
    rows = []
    for row, label in enumerate(labels):
        if seen.get(label, 0) < cap:
            seen[label] = seen.get(label, 0) + 1
            rows.append(row)
    return np.array(rows)


def load(name: str, cache: Path) -> _real_data.Gallery:
    if name in ("digits", "fashion", "stamps"):
        return _real_data.load(name, "pixel", cache)
    if name == "fashion12":
        full = _real_data.load("fashion", "pixel", cache)
        rows = _cap(full.gallery_labels, CAP)
        return _real_data.Gallery(
            name,
            "pixel",
            full.queries,
            full.query_labels,
            full.gallery[rows],
            [full.gallery_labels[r] for r in rows],
            0.0,
        )
    from galleria.datasets.tuxpaint import load_tuxpaint_stamps

    _real_data.load("stamps", "pixel", cache)  # fills the cache
    folder = load_tuxpaint_stamps()
    key = {"gallery": "stamps", "n": len(folder.paths), "embedder": "pixel"}
    vectors, _ = _real_data._cached(cache, key, lambda: None)
    rows = _cap(folder.labels, CAP)
    labels = [folder.labels[r] for r in rows]
    query_rows, gallery_rows = stratified_split(labels, query_fraction=0.2, seed=0)
    return _real_data.Gallery(
        name,
        "pixel",
        vectors[rows[query_rows]],
        [labels[r] for r in query_rows],
        vectors[rows[gallery_rows]],
        [labels[r] for r in gallery_rows],
        0.0,
    )


def lists_with(store: InMemoryImageEmbeddingStore, queries: np.ndarray, reranker: Any) -> list[list[Any]]:
    lists = store.retrieve_by_vector(queries, k=min(max(DEPTH, POOL), len(store)))
    if reranker is None:
        return [candidates[:DEPTH] for candidates in lists]
    heads = reranker.rerank_batch([candidates[:POOL] for candidates in lists], top_k=DEPTH)
    return [(head + rest[POOL:])[:DEPTH] for head, rest in zip(heads, lists, strict=True)]


def describe(name: str, scores: np.ndarray, plain: np.ndarray) -> str:
    diffs = scores - plain
    low_r, high_r = paired_interval(diffs[:, 0])
    low_m, high_m = paired_interval(diffs[:, 1])
    return (
        f"| {name} | {scores[:, 0].mean():.4f} | {diffs[:, 0].mean():+.4f} [{low_r:+.3f}, {high_r:+.3f}] "
        f"| {scores[:, 1].mean():.4f} | {diffs[:, 1].mean():+.4f} [{low_m:+.3f}, {high_m:+.3f}] |"
    )


def sweep(
    store: InMemoryImageEmbeddingStore, gallery: _real_data.Gallery, labels: dict[str, str], plain: np.ndarray
) -> None:
    """Mean change of Recall@1 and mAP@100 over a grid of (t, q, λ), the ECN core on the pools."""
    lists = store.retrieve_by_vector(gallery.queries, k=min(POOL, len(store)))
    width = len(lists[0])
    hits = np.array(
        [[labels[c.path] == q for c in pool] for pool, q in zip(lists, gallery.query_labels, strict=True)]
    )
    total = np.array([sum(v == q for v in gallery.gallery_labels) for q in gallery.query_labels])
    relevant = np.minimum(total, DEPTH)
    original = np.array([[c.score for c in pool] for pool in lists], dtype=np.float64)
    grid = list(itertools.product((1, 2, 3, 5), (1, 2, 4, 8, 16), (0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9)))
    ecn_of: dict[tuple[int, int], list[np.ndarray]] = {}
    step = max(1, (1 << 24) // ((width + 1) ** 2))
    for start in range(0, len(lists), step):
        part = lists[start : start + step]
        vectors = np.stack([store.embeddings_of([c.path for c in pool]) for pool in part])
        d = np.zeros((len(part), width + 1, width + 1))
        d[:, 1:, 1:] = pairwise_distances_batched(vectors, vectors, store.space)
        d[:, 0, 1:] = d[:, 1:, 0] = original[start : start + step]
        for t, q in {(t, q) for t, q, _ in grid}:
            ecn_of.setdefault((t, q), []).append(ecn_pools(d, t=t, q=q))
    print("| t | q | λ | ΔR@1 | ΔmAP@100 |\n|---|---|---|---|---|")
    for t, q, lam in grid:
        final = lam * original + (1 - lam) * np.concatenate(ecn_of[(t, q)])
        order = np.argsort(final, axis=1, kind="stable")[:, :DEPTH]
        ranked = np.take_along_axis(hits, order, axis=1)
        precision = np.cumsum(ranked, axis=1) / np.arange(1, ranked.shape[1] + 1)
        ap = (precision * ranked).sum(axis=1) / np.maximum(relevant, 1)
        d_r = ranked[:, 0].mean() - plain[:, 0].mean()
        d_m = ap.mean() - plain[:, 1].mean()
        print(f"| {t} | {q} | {lam} | {d_r:+.4f} | {d_m:+.4f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--galleries", default=",".join(GALLERIES))
    parser.add_argument(
        "--cache", type=Path, default=Path(os.environ.get("GALLERIA_BENCH_CACHE", _real_data.DEFAULT_CACHE))
    )
    parser.add_argument("--sweep", action="store_true", help="also print the (t, q, λ) grid")
    args = parser.parse_args()
    for name in args.galleries.split(","):
        gallery = load(name, args.cache)
        paths = [f"gallery/{row:05d}" for row in range(len(gallery.gallery))]
        store = InMemoryImageEmbeddingStore.from_embeddings(paths, gallery.gallery, search_index="exact")
        labels = dict(zip(paths, gallery.gallery_labels, strict=True))
        stats = store_statistics(store)
        share, mutual = stats.at(20)
        adaptive = ecn_params_from_statistics(stats)
        print(
            f"\n### {name} (pixel): {len(gallery.queries)} queries, {len(paths)} images in "
            f"{len(set(gallery.gallery_labels))} classes; mutual share {share:.3f}, median {mutual:g}; "
            f"adaptive {adaptive}\n",
            flush=True,
        )
        plain = per_query(lists_with(store, gallery.queries, None), gallery.query_labels, labels)
        print("| row | R@1 | ΔR@1 [95 %] | mAP@100 | ΔmAP [95 %] |\n|---|---|---|---|---|")
        print(describe("plain", plain, plain))
        for label, params in (("ECN paper", PAPER_PARAMS), ("ECN adaptive", None)):
            reranker = ECNReranker(store) if params is None else ECNReranker(store, **params)
            scores = per_query(lists_with(store, gallery.queries, reranker), gallery.query_labels, labels)
            print(describe(f"{label} {reranker.params()}", scores, plain), flush=True)
        if args.sweep:
            sweep(store, gallery, labels, plain)


if __name__ == "__main__":
    main()
