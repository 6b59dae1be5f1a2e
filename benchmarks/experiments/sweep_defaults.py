"""Sweep one method's parameters on corpus galleries (fitting aid for the adaptive rules, issue 33).

``python benchmarks/experiments/sweep_defaults.py --gallery NAME --embedder lite0 --method k-reciprocal
--grid 'k1=6,10,20 k2=2,4 lambda_value=0.3,0.6'`` prints, per setting, the change of Recall@1 / mAP@100
from plain retrieval (mean of the three splits of ``bench_defaults``) and the gallery's statistics, so a
rule can be read off the galleries of ``_corpus.FIT`` and then judged on the others by ``bench_defaults``.
``--per-class N`` keeps at most N images a class (seeded): a fitting gallery's variant (the digits cut to
20 a class fitted ``galleria.statistics.EXPAND_SHARE``).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

_BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_BENCH / "suites"))
sys.path.insert(0, str(_BENCH))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gallery", required=True)
    parser.add_argument("--embedder", default="pixel")
    parser.add_argument("--method", default="k-reciprocal")
    parser.add_argument("--grid", default="", help="space-separated NAME=v1,v2,...")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--max-queries", type=int, default=500)
    parser.add_argument(
        "--per-class", type=int, default=0, help="at most N images a class (seeded): a variant"
    )
    args = parser.parse_args()

    import bench_defaults as bd

    import _corpus
    from galleria.rerank.adaptive import store_statistics
    from galleria.retrieval import RetrievalConfig, Searcher
    from galleria.store import InMemoryImageEmbeddingStore

    vectors, labels, _ = _corpus.vectors(args.gallery, args.embedder)
    if args.per_class:  # e.g. the digits cut to 20 a class: neighbourhoods that fill their class
        named = np.asarray(labels)
        rng = np.random.default_rng(7)
        keep = np.sort(
            np.concatenate(
                [rng.permutation(np.flatnonzero(named == c))[: args.per_class] for c in np.unique(named)]
            )
        )
        vectors, labels = vectors[keep], named[keep].tolist()
    labels = list(labels)
    axes = [item.split("=") for item in args.grid.split()]
    names = [a[0] for a in axes]
    values = [[float(v) if "." in v else int(v) for v in a[1].split(",")] for a in axes]
    splits = []
    for seed in (int(s) for s in args.seeds.split(",")):
        q, g = bd.split(labels, seed, args.max_queries)
        paths = [f"g/{row:06d}" for row in g]
        store = InMemoryImageEmbeddingStore.from_embeddings(paths, vectors[g], search_index="exact")
        gl = {p: labels[r] for p, r in zip(paths, g, strict=True)}
        ql = [labels[r] for r in q]
        plain = bd.per_query(Searcher(store, RetrievalConfig("plain")).search(vectors[q], bd.DEPTH), ql, gl)
        splits.append((store, q, gl, ql, plain))
    stats = store_statistics(splits[0][0])
    print(f"{args.gallery} × {args.embedder}: share {stats.share} median {stats.median}", flush=True)
    for combo in itertools.product(*values):
        params = dict(zip(names, combo, strict=True))
        dr, dm = [], []
        for store, q, gl, ql, plain in splits:
            config = RetrievalConfig(
                "x", rerank=True, rerank_method=args.method, rerank_params=params, pool=bd.POOL
            )
            s = bd.per_query(Searcher(store, config).search(vectors[q], bd.DEPTH), ql, gl)
            dr.append((s - plain)[:, 0].mean())
            dm.append((s - plain)[:, 1].mean())
        print(f"  {params}: R@1 {np.mean(dr):+.4f} (min {min(dr):+.3f})  mAP {np.mean(dm):+.4f}", flush=True)


if __name__ == "__main__":
    main()
