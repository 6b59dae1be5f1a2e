"""``galleria graph``: build the gallery's neighbour graph and keep it beside the store (STORE.graph)."""

from __future__ import annotations

import argparse
import resource
import sys
import time
from typing import Any

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._edits import add_wait_option, store_writer
from galleria.cli._store_options import add_load_options, load_store

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria graph photos.safetensors --k 30
  galleria graph photos.safetensors --k 30 --method ivf --sample 2000 --json
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria graph``."""
    parser = add_command(
        subparsers,
        "graph",
        help="build the gallery's k-nearest-neighbour graph and keep it beside the store",
        description=(
            "Compute each gallery item's K nearest other items (exact up to 100,000 items, HNSW candidates "
            "refined exactly above) and keep them in STORE.graph, keyed to the store's state. A "
            "graph file of the same state with at least K neighbours is reused (--rebuild to build anew). "
            "Prints the time, the peak memory of the process and the recall measured against exact "
            "neighbours on a sample of items. The build and the recall measurement show progress on "
            "stderr (a bar on a terminal, a line every few seconds elsewhere)."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("store", metavar="STORE", help="store file written by `galleria build`")
    parser.add_argument("--k", type=int, required=True, metavar="K", help="neighbours per item (1..4096)")
    parser.add_argument(
        "--method",
        default="auto",
        choices=("auto", "exact", "hnsw", "ivf"),
        help="how to build it (default: auto)",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=2000,
        metavar="N",
        help="items whose recall is measured (default: 2000; 0: none)",
    )
    parser.add_argument("--rebuild", action="store_true", help="build anew even if STORE.graph holds it")
    add_load_options(parser)
    add_wait_option(parser)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.set_defaults(run=run)


def _peak_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB


def run(args: argparse.Namespace) -> int:
    """Build (or reuse) the graph, keep it, print the figures; under the store's writer lock, so that
    no `add` or `remove` changes the store (and its graph file) while the graph is built."""
    from galleria.cli._parse import check_existing_file

    check_existing_file("store file", args.store)
    with store_writer(args, args.store):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    import os
    import warnings

    import numpy as np

    from galleria._progress import PhaseProgress
    from galleria.index.neighbor_graph import exact_graph, graph_recall
    from galleria.store.graph import GraphFileWarning, graph_file_for, neighbor_graph, read_graph_header

    if args.sample < 0:
        raise CliError(f"--sample must be 0 or more, got {args.sample}")
    store = load_store(args, args.store)
    side = graph_file_for(args.store)
    if args.rebuild and os.path.exists(side):
        os.remove(side)
    before = os.stat(side).st_mtime_ns if os.path.exists(side) else None
    start = time.perf_counter()
    reporter = PhaseProgress("graph", enabled=not args.json)  # every phase counts images
    with reporter, warnings.catch_warnings():  # asked for the graph file itself: a damaged one is an error
        warnings.simplefilter("error", GraphFileWarning)
        try:
            ids, _distances = neighbor_graph(
                store,
                args.k,
                method=args.method,
                store_file=args.store,
                on_progress=reporter,  # the build's phases (exact: one; HNSW: its build, its search)
            )
        except GraphFileWarning as damaged:
            problem = str(damaged).removesuffix("; ignored and rebuilt")
            raise CliError(f"{problem} (run with --rebuild to replace it)") from None
        seconds = time.perf_counter() - start
        header = read_graph_header(side)
        sample = min(args.sample, len(store))
        recall = None
        if sample and ids.shape[1]:
            rows = np.sort(np.random.default_rng(0).choice(len(store), size=sample, replace=False))
            vectors = store._gallery_vectors(np.arange(len(store), dtype=np.int64))
            exact, _ = exact_graph(
                vectors,
                ids.shape[1],
                store.space,
                rows=rows,
                on_progress=lambda _, done, total: reporter("recall against exact", done, total),
            )
            recall = graph_recall(ids[rows], exact)
    figures = {
        "store": args.store,
        "graph_file": side,
        "items": len(store),
        "k": int(ids.shape[1]),
        "kept_k": header["k"],
        "method": header["method"],
        "reused": before is not None and os.stat(side).st_mtime_ns == before,
        "seconds": round(seconds, 3),
        "peak_rss_bytes": _peak_bytes(),
        "recall": recall,
        "recall_sample": sample if recall is not None else 0,
        "graph_bytes": os.path.getsize(side),
    }
    if args.json:
        print_json(figures)
        return 0
    measured = "not measured" if recall is None else f"{recall:.4f} on {sample} sampled items (against exact)"
    print(f"graph:      {side}")
    print(f"items:      {figures['items']}, k={figures['k']} ({figures['method']})")
    print(f"time:       {seconds:.2f} s" + (" (reused the kept graph)" if figures["reused"] else ""))
    print(f"peak RSS:   {figures['peak_rss_bytes'] / 2**20:.1f} MiB")
    print(f"recall@{figures['k']}:  {measured}")
    return 0
