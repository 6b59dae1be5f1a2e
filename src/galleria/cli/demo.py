"""``galleria demo``: the whole pipeline on scikit-learn's handwritten digits, with no setup.

The 1,797 digits are written once as PNG files into the cache folder; a seeded, label-stratified
split takes ``--queries`` of them as queries and indexes the rest with the pixel embedder in an HNSW
index; then plain retrieval, αQE, and αQE + k-reciprocal re-ranking are scored side by side.

The settings below were chosen on a validation split carved out of the gallery (never on the
queries): see ``benchmarks/suites/bench_demo.py`` and ``docs/benchmarks/demo.md``.
"""

from __future__ import annotations

import argparse
from typing import Any

from galleria.cli._common import CliError, add_command
from galleria.cli._parse import add_deprecated_alias, parse_int
from galleria.cli._rerank_options import add_report_options

__all__ = ["DEMO_EMBEDDER", "DEMO_INDEX_PARAMS", "DEMO_SETTINGS", "add_parser", "demo_configs", "run"]

#: Pixel embedder settings: 16×16 thumbnails, one gray channel.
DEMO_EMBEDDER: dict[str, Any] = {"size": 16, "grayscale": True}
#: HNSW parameters of the demo's index.
DEMO_INDEX_PARAMS: dict[str, Any] = {}
#: αQE and re-ranking settings: the best validation mAP@100 of the grid in ``benchmarks/suites/bench_demo.py``
#: (on the expanded query's pool of 200). The plateau is flat: k1 30-50, k2 6, λ 0-0.1 all lie within
#: 0.005 mAP@100 of each other there; λ = 0 ranks by the Jaccard distance of the k-reciprocal features alone.
DEMO_SETTINGS: dict[str, Any] = {
    "expansion_alpha": 1.0,
    "expansion_neighbors": 20,
    "k1": 50,
    "k2": 6,
    "lambda_value": 0.0,
    "pool": 200,
}

#: ``--dataset fashion-mnist``: queries from the test part, gallery from the training part (stratified).
FASHION_QUERIES = 1000
FASHION_GALLERY = 20_000
#: Pixel embedder settings for Fashion-MNIST's 28×28 grey images.
FASHION_EMBEDDER: dict[str, Any] = {"size": 28, "grayscale": True}

#: Fashion-MNIST with the pixel embedder: the setting ``galleria.tune`` chose on validation splits of the
#: gallery in ``benchmarks/suites/bench_real.py`` (DBA + αQE; values rounded to three digits).
FASHION_TUNED: dict[str, Any] = {"neighbors": 9, "alpha": 4.07, "aqe_neighbors": 12, "aqe_alpha": 1.0}

_EXAMPLES = """\
  galleria demo
  galleria demo --dataset fashion-mnist        # needs Debian's dataset-fashion-mnist (or --fashion-root)
  galleria demo --n-queries 500 --seed 1 --report demo-report/
  galleria demo --json --cache-dir /tmp/galleria-cache
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria demo``."""
    parser = add_command(
        subparsers,
        "demo",
        help="run the whole pipeline on the bundled handwritten digits",
        description=(
            "Write scikit-learn's 1,797 handwritten digits as PNG files into the cache folder (once), index "
            "all but the query images with the pixel embedder and an HNSW index, and compare plain "
            "retrieval, alpha query expansion, and alpha query expansion + k-reciprocal re-ranking: "
            "Recall@1, Recall@5, mAP@100, MRR and ms per query. Needs the demo extra "
            "(pip install -e '.[demo]')."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument(
        "--dataset",
        default="digits",
        choices=("digits", "fashion-mnist"),
        help="digits (bundled, default) or fashion-mnist (1,000 test queries, 20,000-image gallery)",
    )
    parser.add_argument(
        "--fashion-root",
        default=None,
        metavar="DIR",
        help="folder of the Fashion-MNIST idx files (default: where Debian puts them)",
    )
    parser.add_argument(
        "--n-queries", default=None, metavar="N", help="query images (default: 300; fashion-mnist 1000)"
    )
    add_deprecated_alias(parser, "--queries", dest="n_queries", replacement="--n-queries N")
    parser.add_argument(
        "--seed", default="0", metavar="N", help="seed of the query split (default: %(default)s)"
    )
    parser.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="cache folder for the digit images (default: $GALLERIA_CACHE_DIR or the platform cache folder)",
    )
    add_report_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo and print its table."""
    from galleria.datasets import digits_folder, load_image_folder

    seed = parse_int("--seed", args.seed, minimum=0)
    if args.dataset == "fashion-mnist":
        return _run_fashion(args, seed)
    if args.fashion_root is not None:
        raise CliError("--fashion-root needs --dataset fashion-mnist")
    n_queries = parse_int("--n-queries", "300" if args.n_queries is None else args.n_queries)
    folder = digits_folder(args.cache_dir)
    dataset = load_image_folder(folder)
    split = dataset.split(n_queries=n_queries, seed=seed)
    dataset_meta = {
        "name": "sklearn digits",
        "root": str(folder),
        "n_images": len(dataset),
        "n_labels": len(dataset.classes),
        "seed": seed,
    }
    return _evaluate_demo(args, split, DEMO_EMBEDDER, dataset_meta, demo_configs(), "handwritten digits")


def demo_configs() -> list[Any]:
    """The digits demo's configurations: plain, αQE and αQE + k-reciprocal at :data:`DEMO_SETTINGS`."""
    from galleria.evaluation import standard_configs

    params = {key: DEMO_SETTINGS[key] for key in ("k1", "k2", "lambda_value")}
    return standard_configs(
        expansion_alpha=DEMO_SETTINGS["expansion_alpha"],
        expansion_neighbors=DEMO_SETTINGS["expansion_neighbors"],
        pool=DEMO_SETTINGS["pool"],
        rerank_params=params,
    )


def _run_fashion(args: argparse.Namespace, seed: int) -> int:
    """The demo on Fashion-MNIST: the same pipeline, written once as PNG files into the cache folder."""
    from galleria.datasets.fashion_mnist import DEBIAN_ROOT, fashion_mnist_folder
    from galleria.evaluation import RetrievalConfig

    n_queries = parse_int("--n-queries", FASHION_QUERIES if args.n_queries is None else args.n_queries)
    root = args.fashion_root or DEBIAN_ROOT
    try:
        split = fashion_mnist_folder(
            args.cache_dir, root, n_queries=n_queries, n_gallery=FASHION_GALLERY, seed=seed, on_write=_tell
        )
    except FileNotFoundError as error:
        raise CliError(str(error)) from None
    dataset_meta = {
        "name": "Fashion-MNIST",
        "root": root,
        "n_images": len(split.query_paths) + len(split.gallery_paths),
        "n_labels": len(set(split.gallery_labels)),
        "seed": seed,
    }
    configs = [
        RetrievalConfig("plain"),
        # k-reciprocal at the paper's values: the row docs/benchmarks/ reports for this demo
        RetrievalConfig("rerank", rerank=True, pool=200, rerank_preset="paper"),
        RetrievalConfig("tuned", rerank=True, rerank_method="dba", rerank_params=FASHION_TUNED, pool=400),
    ]
    return _evaluate_demo(args, split, FASHION_EMBEDDER, dataset_meta, configs, "Fashion-MNIST")


def _tell(stage: str, count: int, folder: Any) -> None:
    """Say on stderr that the Fashion-MNIST images are written into the cache (once), and their size."""
    import sys

    if stage == "writing":
        print(
            f"galleria demo: writing {count:,} Fashion-MNIST images as PNG files (about "
            f"{count * _PNG_BYTES / 1e6:.0f} MB) into {folder} (once; later runs reuse them) ...",
            file=sys.stderr,
            flush=True,
        )
        return
    size = sum(entry.stat().st_size for entry in folder.rglob("*.png"))
    print(f"galleria demo: wrote {count:,} PNG files ({size / 1e6:.0f} MB) into {folder}", file=sys.stderr)


#: Bytes of one 28×28 Fashion-MNIST PNG on disk, about (83 MB for 21,000 measured).
_PNG_BYTES = 4000


def _evaluate_demo(
    args: argparse.Namespace,
    split: Any,
    embedder_options: dict[str, Any],
    dataset_meta: dict[str, Any],
    configs: Any,
    name: str,
) -> int:
    """The demo's evaluation, shared by both datasets: pixel embedder, HNSW, cosine."""
    from galleria.cli._evaluation_run import run_evaluation
    from galleria.embedders import PixelEmbedder, embedder_config

    embedder = PixelEmbedder(**embedder_options)
    meta = {
        "dataset": dataset_meta,
        "embedder": {"spec": "pixel", **(embedder_config(embedder) or {})},
        "index": {"name": "hnsw", "space": "cosine", "params": DEMO_INDEX_PARAMS},
    }
    return run_evaluation(
        split=split,
        embedder=embedder,
        index="hnsw",
        space="cosine",
        index_params=DEMO_INDEX_PARAMS or None,
        configs=configs,
        num_workers=4,
        skip_errors=False,
        meta=meta,
        out=args.out,
        as_json=args.json,
        title=f"galleria demo ({name})",
    )
