"""How the demo's settings were chosen, and the demo's table measured on its test split.

Data: scikit-learn's 1,797 handwritten digits written as 32×32 PNGs (``galleria.datasets.digits_folder``).
The demo's split (``--n-queries 300 --seed 0``) holds 300 test queries out; they are never looked at
while choosing settings. The remaining 1,497 gallery images are split again (seed 1) into 300
validation queries and a 1,197-image validation gallery, and on that validation split:

1. the pixel embedder's thumbnail size (8, 16, 32; grayscale) is chosen by plain mAP@100;
2. αQE's ``expansion_neighbors`` and ``expansion_alpha`` by αQE mAP@100;
3. the re-ranker's ``k1``, ``k2``, ``lambda_value`` (pool 200, on the expanded query) by mAP@100.

The chosen settings are then compared with the ones fixed in ``galleria.cli.demo`` and the three
configurations are measured on the test split, side by side in one run (ratios against plain
retrieval). Run: ``.venv/bin/python benchmarks/suites/bench_demo.py [--quick]``; writes
``docs/benchmarks/demo.md``. Timings share the machine with whatever else runs, so they are noisy.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from galleria.cli.demo import DEMO_EMBEDDER, DEMO_INDEX_PARAMS, DEMO_SETTINGS, demo_configs
from galleria.datasets import ImageFolder, QueryGallerySplit, digits_folder, load_image_folder
from galleria.embedders import PixelEmbedder
from galleria.evaluation import (
    ConfigResult,
    RetrievalConfig,
    evaluate_retrieval,
    markdown_table,
    standard_configs,
)
from galleria.store import InMemoryImageEmbeddingStore

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "demo.md"


def _store(split: QueryGallerySplit, embedder: dict[str, Any]) -> InMemoryImageEmbeddingStore:
    store = InMemoryImageEmbeddingStore(
        split.gallery_paths, PixelEmbedder(**embedder), "hnsw", index_params=DEMO_INDEX_PARAMS or None
    )
    store.build_store(progress=False)
    return store


def _score(
    store: InMemoryImageEmbeddingStore, split: QueryGallerySplit, config: RetrievalConfig
) -> ConfigResult:
    (result,) = evaluate_retrieval(
        store, split.query_paths, split.query_labels, split.gallery_label_of, [config]
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small grid (smoke run)")
    parser.add_argument("--cache-dir", default=None, help="digits cache folder (default: a temporary folder)")
    args = parser.parse_args()
    cache = args.cache_dir or tempfile.mkdtemp(prefix="galleria-bench-")
    dataset = load_image_folder(digits_folder(cache))
    test = dataset.split(n_queries=300, seed=0)
    validation = ImageFolder(dataset.root, test.gallery_paths, test.gallery_labels).split(
        n_queries=300, seed=1
    )
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text)
        lines.append(text)

    sizes = [8, 16] if args.quick else [8, 16, 32]
    neighbors = [5, 10] if args.quick else [3, 5, 10, 20, 30]
    alphas = [3.0] if args.quick else [1.0, 3.0]
    k1s = [10, 20] if args.quick else [10, 20, 30, 40, 50]
    k2s = [3, 6] if args.quick else [3, 6, 10]
    lambdas = [0.3] if args.quick else [0.0, 0.1, 0.2, 0.3]

    say("## Choosing the demo's settings (validation split of the gallery)")
    say()
    say(
        f"Validation: {len(validation.query_paths)} queries, {len(validation.gallery_paths)} gallery images "
        "(seed 1, drawn from the demo's 1,497-image gallery; the 300 test queries are not used)."
    )
    say()
    plain = RetrievalConfig("plain")
    embedder_scores = {}
    for size in sizes:
        embedder = {"size": size, "grayscale": True}
        embedder_scores[size] = _score(_store(validation, embedder), validation, plain).map_at_100
    best_size = max(sizes, key=lambda s: (embedder_scores[s], -s))
    say("| pixel size (grayscale) | plain mAP@100 |\n|---:|---:|")
    for size in sizes:
        say(f"| {size} | {embedder_scores[size]:.4f} |")
    say()
    embedder = {"size": best_size, "grayscale": True}
    store = _store(validation, embedder)

    aqe_scores = {}
    for n, alpha in itertools.product(neighbors, alphas):
        config = standard_configs(rerank=False, expansion_alpha=alpha, expansion_neighbors=n)[-1]
        aqe_scores[(n, alpha)] = _score(store, validation, config).map_at_100
    best_n, best_alpha = max(aqe_scores, key=lambda key: aqe_scores[key])
    say("| αQE neighbors | α | mAP@100 |\n|---:|---:|---:|")
    for (n, alpha), value in aqe_scores.items():
        say(f"| {n} | {alpha:g} | {value:.4f} |")
    say()

    rerank_scores = {}
    started = time.perf_counter()
    for k1, k2, lam in itertools.product(k1s, k2s, lambdas):
        config = standard_configs(
            expansion_alpha=best_alpha,
            expansion_neighbors=best_n,
            rerank_params={"k1": k1, "k2": k2, "lambda_value": lam},
            pool=200,
        )[-1]
        rerank_scores[(k1, k2, lam)] = _score(store, validation, config).map_at_100
    grid_seconds = time.perf_counter() - started
    best_k1, best_k2, best_lambda = max(rerank_scores, key=lambda key: rerank_scores[key])
    say("| k1 | k2 | λ | αQE + re-rank mAP@100 |\n|---:|---:|---:|---:|")
    for (k1, k2, lam), value in rerank_scores.items():
        say(f"| {k1} | {k2} | {lam:g} | {value:.4f} |")
    say()
    say(f"Re-ranking grid: {len(rerank_scores)} settings in {grid_seconds:.1f} s.")
    chosen = {
        "embedder": embedder,
        "expansion_alpha": best_alpha,
        "expansion_neighbors": best_n,
        "k1": best_k1,
        "k2": best_k2,
        "lambda_value": best_lambda,
    }
    fixed = {"embedder": DEMO_EMBEDDER, **{key: DEMO_SETTINGS[key] for key in chosen if key != "embedder"}}
    say()
    say(f"Best on validation: `{chosen}`.")
    say(f"Fixed in `galleria.cli.demo`: `{fixed}`" + (" (the same)." if chosen == fixed else " — DIFFERENT."))
    say()

    say("## The demo's table (test split: 300 queries, 1,497 gallery images, seed 0)")
    say()
    started = time.perf_counter()
    test_store = _store(test, DEMO_EMBEDDER)
    build_seconds = time.perf_counter() - started
    results = evaluate_retrieval(
        test_store,
        test.query_paths,
        test.query_labels,
        test.gallery_label_of,
        demo_configs(),
    )
    say(markdown_table(results))
    say()
    base = results[0]
    for result in results[1:]:
        say(
            f"- {result.config.name}: mAP@100 ×{result.map_at_100 / base.map_at_100:.3f} "
            f"(+{result.map_at_100 - base.map_at_100:.4f}), "
            f"time per query ×{result.ms_per_query / base.ms_per_query:.1f}"
        )
    say(f"- gallery build (decode + embed + HNSW): {build_seconds:.2f} s for {len(test_store)} images")
    say()
    say(
        f"Machine: {os.cpu_count()} CPUs (shared); Python {sys.version.split()[0]}. "
        "Seeds: split 0, validation 1."
    )
    if not args.quick:
        OUTPUT.parent.mkdir(parents=True, exist_ok=True)
        header = (
            "# Demo benchmark (`benchmarks/suites/bench_demo.py`)\n\n"
            + "\n\n".join((__doc__ or "").split("\n\n")[1:3])
            + "\n\n"
        )
        OUTPUT.write_text(header + "\n".join(lines) + "\n", encoding="utf-8")
        print(f"\nwrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
