"""The gallery map's cost and quality: projection time, peak memory and neighbourhood preservation.

Each (size, method) runs in its own process so that its peak RSS is its own. The vectors are
synthetic and clustered like an embedder's (``--classes`` Gaussian clusters on the unit sphere,
128 dimensions). Quality is the share of each sampled point's 10 nearest neighbours (cosine, in the
vectors) that are also among its 10 nearest on the map, and the share of 10 map neighbours of the
same cluster; placement is the cost of placing 1 % more images on an existing map. ``tsne`` and
``pca`` draw a store's map (``gallery_map``: t-SNE on the store's neighbour graph, the graph's
build included); ``tsne-bare`` projects the bare vectors (openTSNE's own Annoy neighbours).

    python benchmarks/experiments/bench_map.py --sizes 10000 100000 --methods tsne pca
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def _vectors(count: int, dim: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim)).astype(np.float32)
    labels = rng.integers(0, classes, count)
    vectors = centres[labels] + rng.normal(scale=0.9, size=(count, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32), labels


def _quality(
    vectors: np.ndarray, labels: np.ndarray, points: np.ndarray, sample: int = 1000
) -> dict[str, float]:
    rng = np.random.default_rng(0)
    chosen = rng.choice(len(vectors), size=min(sample, len(vectors)), replace=False)
    kept = same = 0.0
    for row in chosen:
        near = np.argsort(-(vectors @ vectors[row]))[1:11]
        on_map = np.argsort(((points - points[row]) ** 2).sum(axis=1))[1:11]
        kept += len(set(near.tolist()) & set(on_map.tolist())) / 10
        same += float(np.mean(labels[on_map] == labels[row]))
    return {"knn10_kept": kept / len(chosen), "map_neighbours_same_class": same / len(chosen)}


def _one(count: int, method: str, classes: int, threads: int) -> dict[str, object]:
    from galleria import InMemoryImageEmbeddingStore
    from galleria.store.gallery_map import gallery_map, place_points, project_vectors

    vectors, labels = _vectors(count, 128, classes, seed=1)
    store = None
    if method != "tsne-bare":  # a store's map: t-SNE on the store's neighbour graph
        store = InMemoryImageEmbeddingStore.from_embeddings([f"/g/{i}.png" for i in range(count)], vectors)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if store is None:  # bare vectors: openTSNE finds the neighbours itself (Annoy)
        points, used = project_vectors(vectors, "cosine", method="tsne", threads=threads)
        used = "tsne-bare"
    else:
        drawn = gallery_map(store, method=method)
        points, used = drawn.coordinates, drawn.method
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    extra, _ = _vectors(max(1, count // 100), 128, classes, seed=2)
    start = time.perf_counter()
    place_points(extra, vectors, points, "cosine")
    placing = time.perf_counter() - start
    return {
        "n": count,
        "method": used,
        "threads": threads,
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak / 1024, 1),
        "rss_before_mb": round(before / 1024, 1),
        "place_1pct_seconds": round(placing, 3),
        **{key: round(value, 3) for key, value in _quality(vectors, labels, points).items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--methods", nargs="+", default=["tsne", "pca"], choices=["tsne", "tsne-bare", "pca"])
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--one", nargs=2, metavar=("N", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(int(args.one[0]), args.one[1], args.classes, args.threads)))
        return
    for count in args.sizes:
        for method in args.methods:
            command = [sys.executable, __file__, "--one", str(count), method, "--classes", str(args.classes),
                       "--threads", str(args.threads)]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
            print(line, flush=True)


if __name__ == "__main__":
    main()
