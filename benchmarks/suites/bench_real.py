"""Real galleries: plain / paper defaults / adaptive defaults / tuned, for every method, side by side.

Run ``.venv/bin/python benchmarks/suites/bench_real.py`` (``--help`` for the sizes and trials). Galleries
(:mod:`_real_data`): the digits (300 test queries), Fashion-MNIST (1,000 test-part queries × 20,000
training images by default; ``--fashion 300x3000`` for a smaller run) and the Tux Paint stamps (150
test queries), each with the pixel embedder and EfficientNet-Lite0 (ImageNet weights). Vectors are
cached under ``--cache`` (a temporary folder by default), so a rerun only re-ranks.

For each method — αQE, k-reciprocal, diffusion, decoupled diffusion, GNN, DBA + αQE (each re-ranker
on a pool of 200 of the plain search) — three rows: the paper's parameters, the parameters read from
the gallery (:func:`galleria.rerank.adaptive.default_rerank_params`, what ``--rerank`` uses), and
the setting ``galleria.tune`` recommends when it searches plain retrieval and that method (Recall@1
guard on; validation splits of the gallery only, never the test queries). A last row is ``galleria
tune`` over all methods. Every row gives Recall@1 and mAP@100 on the test queries and their change
from plain retrieval with a paired 95 % bootstrap interval over the queries (2,000 resamples, seed 0).
``--tuned-only`` measures the tuned rows again and keeps the other saved rows of each gallery (the
tuner changed; the defaults did not).
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
_BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: the shared helpers and the other suites
sys.path.insert(0, str(_BENCH / "suites"))
sys.path.insert(0, str(_BENCH))

import _real_data  # noqa: E402
from galleria.evaluation import RetrievalConfig  # noqa: E402
from galleria.metrics import ranked_relevance  # noqa: E402
from galleria.rerank.adaptive import PAPER_PARAMS, default_rerank_params, store_statistics  # noqa: E402
from galleria.rerank.registry import RERANK_METHODS, reranker_component  # noqa: E402
from galleria.retrieval import Searcher  # noqa: E402
from galleria.store import InMemoryImageEmbeddingStore  # noqa: E402
from galleria.tune import tune  # noqa: E402

DEPTH = 100
POOL = 200
_FIRST = ("aqe", "k-reciprocal", "diffusion", "decoupled-diffusion", "gnn", "dba")
#: αQE and every declared re-ranker (a method declared later, e.g. ECN, adds its rows and column).
METHODS = _FIRST + tuple(name for name in RERANK_METHODS if name not in _FIRST)
#: The row of ``--expand --rerank`` (αQE, then k-reciprocal on the expanded query's pool).
EXPAND_RERANK = "aqe+k-reciprocal"
#: The summary's columns: each method's adaptive defaults (what ``--rerank`` uses), short names.
SHORT = {
    "aqe": "αQE",
    "k-reciprocal": "k-recip.",
    "diffusion": "diffusion",
    "decoupled-diffusion": "decoupled",
    "gnn": "GNN",
    "dba": "DBA+αQE",
    EXPAND_RERANK: "αQE+k-recip.",
}
RESULTS = Path(os.environ.get("GALLERIA_BENCH_RESULTS", ROOT / ".cache" / "bench_real" / "galleries"))


def per_query(lists: list[list[Any]], query_labels: list[str], gallery_labels: dict[str, str]) -> np.ndarray:
    """(n_queries, 2): each query's hit at rank 1 and its AP@100 (normalised by min(R, 100))."""
    relevance = ranked_relevance(lists, query_labels, gallery_labels)
    hits = np.asarray(relevance.hits, dtype=bool)[:, :DEPTH]
    relevant = np.minimum(np.asarray(relevance.n_relevant, dtype=np.float64), DEPTH)
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    ap = (precision * hits).sum(axis=1) / np.maximum(relevant, 1)
    return np.stack([hits[:, 0].astype(np.float64), ap], axis=1)


def paired_interval(diffs: np.ndarray, resamples: int = 2000) -> tuple[float, float]:
    """95 % percentile bootstrap interval of the mean of per-query differences (seeded)."""
    rng = np.random.default_rng(0)
    means = diffs[rng.integers(0, len(diffs), size=(resamples, len(diffs)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def answer(
    store: InMemoryImageEmbeddingStore, queries: np.ndarray, config: RetrievalConfig
) -> list[list[Any]]:
    """Ranked lists of one configuration: the one retrieval path (re-rankers on a pool of ``config.pool``)."""
    return Searcher(store, config).search(queries, DEPTH)


def config_of(method: str, params: dict[str, Any], name: str) -> RetrievalConfig:
    if method == "aqe":
        return RetrievalConfig(name, query_expansion=True, **params)
    if method == EXPAND_RERANK:  # ``--expand --rerank``: αQE, then k-reciprocal on its pool
        preset = "paper" if name == "paper" else "adaptive"
        return RetrievalConfig(name, query_expansion=True, rerank=True, pool=POOL, rerank_preset=preset)
    return RetrievalConfig(name, rerank=True, rerank_method=method, rerank_params=params, pool=POOL)


def bench(
    gallery: _real_data.Gallery,
    args: argparse.Namespace,
    save: Any = None,
    kept: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every row for one gallery × embedder; with ``kept`` (a saved result, ``--tuned-only``) only the
    tuned rows are measured again and the saved other rows are kept."""
    paths = [f"gallery/{row:05d}" for row in range(len(gallery.gallery))]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, gallery.gallery, search_index="exact")
    labels = dict(zip(paths, gallery.gallery_labels, strict=True))
    plain = per_query(answer(store, gallery.queries, RetrievalConfig("plain")), gallery.query_labels, labels)
    stats = store_statistics(store)
    rows: list[dict[str, Any]] = [] if kept is None else [r for r in kept["rows"] if r["preset"] != "tuned"]

    def row(method: str, preset: str, config: RetrievalConfig, note: str = "") -> None:
        started = time.perf_counter()
        scores = per_query(answer(store, gallery.queries, config), gallery.query_labels, labels)
        seconds = time.perf_counter() - started
        diffs = scores - plain
        entry = {
            "method": method,
            "preset": preset,
            "title": config.resolve(store).title,
            "recall@1": float(scores[:, 0].mean()),
            "map@100": float(scores[:, 1].mean()),
            "d_recall@1": float(diffs[:, 0].mean()),
            "ci_recall@1": paired_interval(diffs[:, 0]),
            "d_map@100": float(diffs[:, 1].mean()),
            "ci_map@100": paired_interval(diffs[:, 1]),
            "seconds": round(seconds, 1),
            "note": note,
        }
        rows.append(entry)
        if save is not None:  # a long run keeps what it measured so far
            save(result())
        print(
            f"  {method:12s} {preset:8s} R@1 {entry['recall@1']:.4f} ({entry['d_recall@1']:+.4f}) "
            f"mAP {entry['map@100']:.4f} ({entry['d_map@100']:+.4f})  {entry['title']}",
            file=sys.stderr,
            flush=True,
        )

    def tuned(methods: list[str], label: str) -> None:
        result = tune(
            store,
            labels,
            n_trials=args.trials,
            methods=methods,
            validation_queries=min(args.validation_queries, len(paths) // 4),
            n_splits=3,
            seed=0,
        )
        note = "plain retrieval recommended" if not result.beats_plain else ""
        if result.guard_diffs:
            note += f"{'; ' if note else ''}validation guard low {result.guard_low:+.4f}"
        row(label, "tuned", result.config, note)

    plain_entry = {"recall@1": float(plain[:, 0].mean()), "map@100": float(plain[:, 1].mean())}

    def result() -> dict[str, Any]:
        if kept is not None:  # the other rows as they were measured, the tuned ones now
            tuned_at = {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "load": os.getloadavg()[0],
            }
            return {
                **kept,
                "rows": rows,
                "trials": args.trials,
                "validation_queries": args.validation_queries,
                "tuned": tuned_at,
            }
        return {
            "gallery": gallery.name,
            "embedder": gallery.embedder,
            "n_queries": len(gallery.queries),
            "n_gallery": len(paths),
            "n_classes": len(set(gallery.gallery_labels)),
            "dim": int(gallery.gallery.shape[1]),
            "statistics": stats.record(),
            "plain": plain_entry,
            "rows": rows,
            "trials": args.trials,
            "validation_queries": args.validation_queries,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load": os.getloadavg()[0],
        }

    for method in args.methods:
        if kept is None and method == EXPAND_RERANK:
            row(method, "paper", config_of(method, {}, "paper"))
            row(method, "adaptive", config_of(method, {}, "adaptive"))
            continue
        if kept is None:
            row(method, "paper", config_of(method, PAPER_PARAMS[method], "paper"))
            row(method, "adaptive", config_of(method, default_rerank_params(store, method), "adaptive"))
            # the defaults as every command applies them: nothing given, read by the Searcher
            defaults = config_of(method, {}, "defaults").resolve(store).settings()
            read = config_of(method, default_rerank_params(store, method), "x").resolve(store).settings()
            if defaults != read:
                raise SystemExit(f"{method}: the Searcher's defaults differ from default_rerank_params")
        if args.trials and method in args.tune_methods and method != EXPAND_RERANK:
            tuned(["plain", method], method)
    if args.trials and args.tune_all:
        tuned(["plain", *METHODS], "all methods")
    return result()


def _change(row: dict[str, Any], key: str) -> str:
    low, high = row[f"ci_{key}"]
    return f"{row[f'd_{key}']:+.4f} [{low:+.3f}, {high:+.3f}]"


def summary(results: list[dict[str, Any]]) -> str:
    """One line per gallery × embedder: plain, then the change of every method's adaptive defaults,
    k-reciprocal's paper values and the tuned setting (all methods)."""

    def cell(result: dict[str, Any], method: str, preset: str) -> str:
        for row in result["rows"]:
            if row["method"] == method and row["preset"] == preset:
                return f"{row['d_recall@1']:+.3f} / {row['d_map@100']:+.3f}"
        return "–"

    shown = (*METHODS, EXPAND_RERANK)
    methods = [m for m in shown if any(row["method"] == m for result in results for row in result["rows"])]
    header = " | ".join(f"{SHORT.get(m) or reranker_component(m).title} adaptive" for m in methods)
    lines = [
        f"| gallery × embedder | plain R@1 / mAP@100 | {header} | k-recip. paper | tuned (all methods) |",
        "| --- | ---: |" + " ---: |" * (len(methods) + 2),
    ]
    for result in results:
        plain = result["plain"]
        name = f"{result['gallery']} × {result['embedder']} ({result['n_queries']} × {result['n_gallery']:,})"
        cells = " | ".join(cell(result, m, "adaptive") for m in methods)
        lines.append(
            f"| {name} | {plain['recall@1']:.3f} / {plain['map@100']:.3f} | {cells} | "
            f"{cell(result, 'k-reciprocal', 'paper')} | {cell(result, 'all methods', 'tuned')} |"
        )
    return "\n".join(lines) + "\n"


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "# Real galleries: plain, paper defaults, adaptive defaults, tuned",
        "",
        "`benchmarks/suites/bench_real.py`, exact cosine index; the paper and adaptive rows re-rank a "
        "pool of "
        "200, a tuned row the pool its setting names (the tuner searches 100 to 1,000). Change = the row "
        "minus plain retrieval on the same test queries, with a paired 95 % bootstrap interval over the "
        "queries. *adaptive* = the parameters read from the gallery (`--rerank`'s default); *tuned* = "
        "`galleria.tune` over plain + that method (Recall@1 guard on, 3 validation splits of the gallery).",
        "",
        "Summary (change of Recall@1 / mAP@100 from plain retrieval on the test queries):",
        "",
        summary(results),
    ]
    for result in results:
        stats = result["statistics"]
        plain = result["plain"]
        lines += [
            f"## {result['gallery']} × {result['embedder']} ({result['n_queries']} queries × "
            f"{result['n_gallery']:,} gallery, {result['n_classes']} classes, {result['dim']}-d)",
            "",
            f"Plain retrieval: Recall@1 {plain['recall@1']:.4f}, mAP@100 {plain['map@100']:.4f}. Gallery "
            f"statistics: mutual share {stats['share']} and median mutual count {stats['median']} at k = "
            f"{stats['ks']}. Run {result['date']}, load average {result['load']:.1f}; "
            + (
                f"tuned rows run again {result['tuned']['date']} (load {result['tuned']['load']:.1f}), "
                if "tuned" in result
                else ""
            )
            + f"{result['trials']} trials per tuning.",
            "",
            "| method | parameters | Recall@1 | change [95 % CI] | mAP@100 | change [95 % CI] | note |",
            "| --- | --- | ---: | ---: | ---: | ---: | --- |",
        ]
        for row in result["rows"]:
            lines.append(
                f"| {row['method']} {row['preset']} | {row['title']} | {row['recall@1']:.4f} | "
                f"{_change(row, 'recall@1')} | {row['map@100']:.4f} | {_change(row, 'map@100')} | "
                f"{row['note']} |"
            )
        lines.append("")
    lines += ["## Targets", ""]
    for result in results:
        name = f"{result['gallery']} × {result['embedder']}"
        for row in result["rows"]:
            if row["preset"] == "adaptive":
                ok = row["d_recall@1"] >= -0.01 - 1e-9 and row["d_map@100"] >= 0
                verdict = "met" if ok else "missed"
                lines.append(
                    f"- {name}, adaptive defaults ({row['method']}): Recall@1 "
                    f"{row['d_recall@1']:+.4f}, mAP@100 {row['d_map@100']:+.4f}: **{verdict}**"
                )
            if row["preset"] == "tuned":
                ok = row["d_recall@1"] >= -0.01 - 1e-9 and row["d_map@100"] >= -1e-9
                verdict = "met" if ok else "missed"
                lines.append(
                    f"- {name}, tuned ({row['method']}): Recall@1 {row['d_recall@1']:+.4f}, mAP@100 "
                    f"{row['d_map@100']:+.4f}: **{verdict}**"
                )
                if result["gallery"] == "fashion" and row["method"] == "all methods":
                    lift = "met" if row["d_map@100"] >= 0.05 and ok else "missed"
                    lines.append(f"- {name}, tuned (all methods) lifts mAP@100 by ≥ 0.05: **{lift}**")
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--galleries", default=",".join(_real_data.GALLERIES))
    parser.add_argument("--embedders", default=",".join(_real_data.EMBEDDERS))
    parser.add_argument("--methods", default=",".join((*METHODS, EXPAND_RERANK)))
    parser.add_argument("--fashion", default="1000x20000", help="Fashion-MNIST queries x gallery")
    parser.add_argument(
        "--fashion-lite0", default=None, help="Fashion-MNIST size for Lite0 (default: --fashion)"
    )
    parser.add_argument("--trials", type=int, default=20, help="tuning trials (0: no tuned rows)")
    parser.add_argument("--validation-queries", type=int, default=300)
    parser.add_argument("--tune-all", action="store_true", help="add galleria tune over all methods")
    parser.add_argument(
        "--tune-methods", default=",".join(METHODS), help="methods that get a tuned row ('' for none)"
    )
    parser.add_argument("--cache", default=str(_real_data.DEFAULT_CACHE))
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "real.md"))
    parser.add_argument("--report-only", action="store_true", help="rewrite --out from the saved results")
    parser.add_argument(
        "--tuned-only", action="store_true", help="run only the tuned rows again, keeping the saved others"
    )
    args = parser.parse_args()
    args.methods = args.methods.split(",")
    args.tune_methods = [name for name in args.tune_methods.split(",") if name]
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in [] if args.report_only else args.galleries.split(","):
        for embedder in args.embedders.split(","):
            size = args.fashion_lite0 if embedder == "lite0" and args.fashion_lite0 else args.fashion
            sizes = tuple(int(v) for v in size.split("x"))
            print(f"[{name} × {embedder}]", file=sys.stderr, flush=True)
            gallery = _real_data.load(name, embedder, Path(args.cache), fashion_sizes=(sizes[0], sizes[1]))
            target = RESULTS / f"{name}-{embedder}.json"

            def save(result: dict[str, Any], target: Path = target) -> None:
                target.write_text(json.dumps(result, indent=1), encoding="utf-8")

            kept = json.loads(target.read_text(encoding="utf-8")) if args.tuned_only else None
            save(bench(gallery, args, save, kept))
    saved = [
        RESULTS / f"{name}-{embedder}.json"
        for name in _real_data.GALLERIES
        for embedder in _real_data.EMBEDDERS
    ]
    results = [json.loads(path.read_text(encoding="utf-8")) for path in saved if path.is_file()]
    text = markdown(results)
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
