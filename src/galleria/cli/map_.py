"""``galleria map``: compute the gallery's 2-D map and keep it beside the store (STORE.map)."""

from __future__ import annotations

import argparse
import resource
import sys
import time
from typing import Any

from galleria.cli._common import add_command, print_json
from galleria.cli._parse import parse_int
from galleria.cli._store_options import add_load_options, load_store
from galleria.store import TSNE_SAMPLE

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria map photos.safetensors
  galleria map photos.safetensors --method pca --json
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria map``."""
    parser = add_command(
        subparsers,
        "map",
        help="compute the gallery's 2-D map (for the page's /map) and keep it beside the store",
        description=(
            "Lay the gallery's vectors out in two dimensions (t-SNE with the map extra, "
            "pip install 'galleria[map]'; PCA without it) and keep the map in STORE.map, keyed to the "
            "store's vectors. A map of the same gallery is reused; images added since it was drawn are "
            "placed from their nearest mapped neighbours (--rebuild draws it anew). galleria serve "
            "shows it at /map. The neighbour graph's build and t-SNE's iterations show progress on "
            "stderr (a bar on a terminal, a line every few seconds elsewhere)."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("store", metavar="STORE", help="store file written by `galleria build`")
    parser.add_argument(
        "--method", default="auto", choices=("auto", "tsne", "pca"), help="projection (default: auto)"
    )
    parser.add_argument("--rebuild", action="store_true", help="draw the map anew even if STORE.map holds it")
    parser.add_argument(
        "--sample",
        default=None,
        metavar="N",
        help=f"t-SNE of a larger gallery lays out a seeded sample of N images and places the others from "
        f"their neighbours in the store's graph (default: {TSNE_SAMPLE}; 0: t-SNE of every image)",
    )
    add_load_options(parser)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Compute (or reuse) the map, keep it, print the figures."""
    import os

    from galleria._progress import PhaseProgress
    from galleria.store.gallery_map import MAP_UNITS, gallery_map, map_file_for

    sample = None if args.sample is None else parse_int("--sample", args.sample, minimum=0)
    store = load_store(args, args.store)
    side = map_file_for(args.store)
    if args.rebuild and os.path.exists(side):
        os.remove(side)
    start = time.perf_counter()
    with PhaseProgress("map", MAP_UNITS, enabled=not args.json) as reporter:  # graph, then t-SNE
        result = gallery_map(
            store, method=args.method, store_file=args.store, sample=sample, on_progress=reporter
        )
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak_bytes = int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB
    figures: dict[str, object] = {
        "images": len(store),
        "method": result.method,
        "placed": result.placed,
        "sampled": result.sampled,
        "seconds": round(seconds, 3),
        "peak_rss_bytes": peak_bytes,
        "file": side,
    }
    if args.json:
        print_json(figures)
    else:
        placed = f", {result.placed} placed from their neighbours" if result.placed else ""
        if result.sampled:
            placed += f", t-SNE of a sample of {result.sampled}, the others placed along the graph"
        print(
            f"map of {len(store)} images ({result.method}{placed}) in {seconds:.1f} s, "
            f"peak memory {peak_bytes / 2**20:.0f} MiB: {side}"
        )
    return 0
