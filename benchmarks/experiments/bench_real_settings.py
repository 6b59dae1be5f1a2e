"""Named settings on a real gallery, side by side: what the tuner's guard sees, and the test change.

Run ``.venv/bin/python benchmarks/experiments/bench_real_settings.py --gallery fashion --embedder pixel
SETTING...`` where each SETTING is ``METHOD:POOL:JSON`` (the method's ``rerank_params``), e.g.
``'decoupled-diffusion:1000:{"k": 50, "query_k": 10, "alpha": 0.99, "vector_power": 0.5, "centre": true}'``.

For every setting, on the gallery of ``bench_real.py`` (vectors cached as there):

* the validation splits ``galleria tune`` uses (3 seeded stratified splits of the gallery, 300
  validation queries each): the mean mAP@100 lift over plain retrieval, the per-split Recall@1
  change and its lower end (mean − standard deviation), which the guard requires ≥ −0.005;
* the test queries: the change of Recall@1 and mAP@100 from plain retrieval.

It shows why the tuner recommends what it does (or plain retrieval), and what a setting it refused
would have given on the test queries.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

_BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: the shared helpers and the other suites
sys.path.insert(0, str(_BENCH / "suites"))
sys.path.insert(0, str(_BENCH))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import bench_real  # noqa: E402

import _real_data  # noqa: E402
from galleria.evaluation import RetrievalConfig  # noqa: E402
from galleria.store import InMemoryImageEmbeddingStore  # noqa: E402
from galleria.tune._constants import GUARD_MARGIN  # noqa: E402
from galleria.tune._splits import _labels_of, _make_split  # noqa: E402


def parse_setting(text: str) -> RetrievalConfig:
    method, pool, params = text.split(":", 2)
    return RetrievalConfig(
        "setting",
        rerank=True,
        rerank_method=method,
        rerank_params=json.loads(params),
        pool=int(pool),
        rerank_preset="paper",  # what a setting leaves out: the paper's values, as when it was chosen
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("settings", nargs="+", help='METHOD:POOL:JSON, e.g. diffusion:1000:{"k": 20}')
    parser.add_argument("--gallery", default="fashion", choices=_real_data.GALLERIES)
    parser.add_argument("--embedder", default="pixel", choices=_real_data.EMBEDDERS)
    parser.add_argument("--fashion", default="1000x20000")
    parser.add_argument("--validation-queries", type=int, default=300)
    parser.add_argument("--cache", default=str(_real_data.DEFAULT_CACHE))
    args = parser.parse_args()
    configs = [parse_setting(text) for text in args.settings]
    sizes = tuple(int(v) for v in args.fashion.split("x"))
    gallery = _real_data.load(
        args.gallery, args.embedder, Path(args.cache), fashion_sizes=(sizes[0], sizes[1])
    )
    paths = [f"gallery/{row:05d}" for row in range(len(gallery.gallery))]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, gallery.gallery, search_index="exact")
    labels = dict(zip(paths, gallery.gallery_labels, strict=True))
    label_list = _labels_of(store, labels)
    count = min(args.validation_queries, len(paths) // 4)
    splits = [_make_split(store, store.embeddings, label_list, seed, count, "map@100") for seed in range(3)]
    plain = [split.run(RetrievalConfig("plain")) for split in splits]
    test_plain = bench_real.per_query(
        bench_real.answer(store, gallery.queries, RetrievalConfig("plain")), gallery.query_labels, labels
    )
    print(
        f"{args.gallery} × {args.embedder}: plain test Recall@1 {test_plain[:, 0].mean():.4f}, "
        f"mAP@100 {test_plain[:, 1].mean():.4f}; validation: 3 splits × {count} queries\n"
    )
    print(
        "| setting | validation mAP@100 lift | validation Recall@1 change per split | lower end | "
        "guard | test Recall@1 change | test mAP@100 change | seconds |"
    )
    print("|---|---:|---|---:|---|---:|---:|---:|")
    for config in configs:
        started = time.perf_counter()
        runs = [split.run(config) for split in splits]
        lift = float(np.mean([r["map@100"] - p["map@100"] for r, p in zip(runs, plain, strict=True)]))
        guard = [r["recall@1"] - p["recall@1"] for r, p in zip(runs, plain, strict=True)]
        low = float(np.mean(guard) - np.std(guard))
        scores = bench_real.per_query(
            bench_real.answer(store, gallery.queries, config), gallery.query_labels, labels
        )
        change = (scores - test_plain).mean(axis=0)
        verdict = "kept" if low >= -GUARD_MARGIN - 1e-12 else "refused"
        shown = ", ".join(f"{value:+.4f}" for value in guard)
        print(
            f"| {config.title} | {lift:+.4f} | {shown} | {low:+.4f} | {verdict} | {change[0]:+.3f} | "
            f"{change[1]:+.4f} | {time.perf_counter() - started:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
