"""``galleria search``: query a saved store with images or text; optional αQE and re-ranking."""

from __future__ import annotations

import argparse
import os
from typing import Any

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._options import (
    add_expand_options,
    add_rerank_options,
    add_settings_option,
    check_existing_file,
    expand_settings,
    parse_int,
    rerank_settings,
    settings_config,
)

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria search photos.safetensors --image query.jpg
  galleria search photos.safetensors --image a.jpg b.jpg -k 5 --json
  galleria search photos.safetensors --image query.jpg --expand --rerank --pool 200
  galleria search photos-clip.safetensors --text "a dog on a beach" -k 20
  galleria search photos.safetensors --image query.jpg --settings tuned.json
"""

#: Default number of candidates re-ranked per query.
DEFAULT_POOL = 100


def add_parser(subparsers: Any) -> None:
    """Register ``galleria search``."""
    parser = add_command(
        subparsers,
        "search",
        help="find the gallery images closest to query images or text",
        description=(
            "Load a store written by `galleria build` and print, for every query, the k best gallery "
            "images with their distances (lower is closer). Text queries need an embedder with a text "
            "side (clip)."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("store", metavar="STORE", help="store file written by `galleria build`")
    queries = parser.add_mutually_exclusive_group(required=True)
    queries.add_argument("--image", nargs="+", metavar="PATH", help="query image file(s)")
    queries.add_argument("--text", nargs="+", metavar="TEXT", help="query text(s)")
    parser.add_argument("-k", default="10", metavar="K", help="results per query (default: %(default)s)")
    add_rerank_options(parser, pool_default=DEFAULT_POOL)
    add_expand_options(parser)
    add_settings_option(parser)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Answer the queries and print the ranked paths and scores."""
    from galleria.rerank import make_reranker
    from galleria.store import InMemoryImageEmbeddingStore

    k = parse_int("-k", args.k)
    tuned = settings_config(args)
    rerank = rerank_settings(args)
    expand = expand_settings(args)
    if tuned is not None:  # --settings FILE: the tuned αQE and re-ranking
        expand = (
            {"expansion_alpha": tuned.expansion_alpha, "expansion_neighbors": tuned.expansion_neighbors}
            if tuned.query_expansion
            else None
        )
        rerank = dict(tuned.settings(), pool=tuned.pool) if tuned.rerank else None
    if rerank is not None and rerank["pool"] < k:
        raise CliError(f"--pool must be at least -k ({k}), got {rerank['pool']}")
    check_existing_file("store file", args.store)
    if args.image:
        for path in args.image:
            if not os.path.exists(path):
                raise CliError(f"query image {path!r} does not exist")
            if not os.path.isfile(path):
                raise CliError(f"query image {path!r} is not a file")
    store = InMemoryImageEmbeddingStore.load_from_disk(args.store)
    if args.text and not callable(getattr(store.embedder, "embed_text", None)):
        raise CliError(
            f"--text needs an embedder with a text side (clip); store {args.store!r} was built with "
            f"{type(store.embedder).__name__}, which embeds images only"
        )
    depth = rerank["pool"] if rerank is not None else k
    expansion: dict[str, Any] = {"query_expansion": expand is not None, **(expand or {})}
    reranker = None
    if rerank is not None:
        method = rerank.get("rerank_method", "k-reciprocal")
        if tuned is not None:
            params = tuned.reranker_params()
        elif method == "k-reciprocal":
            params = {key: rerank[key] for key in ("k1", "k2", "lambda_value")}
        else:
            params = dict(rerank.get("rerank_params", {}))
        reranker = make_reranker(method, store, **params)
        store = reranker.store  # DBA + αQE searches the augmented store (made here unless saved so)
    if args.image:
        lists = store.retrieve_top_k_similar(list(args.image), depth, **expansion)
        queries: list[str] = list(args.image)
    else:
        lists = store.retrieve_by_text(list(args.text), depth, **expansion)
        queries = list(args.text)
    if reranker is not None:
        lists = reranker.rerank_batch(lists, top_k=k)
    kind = "image" if args.image else "text"
    payload = {
        "store": args.store,
        "k": k,
        "expand": expand,
        "rerank": rerank,
        "queries": [
            {
                "query": query,
                "kind": kind,
                "results": [
                    {"rank": rank, "path": candidate.path, "score": float(candidate.score)}
                    for rank, candidate in enumerate(candidates[:k], start=1)
                ],
            }
            for query, candidates in zip(queries, lists, strict=True)
        ],
    }
    if args.json:
        print_json(payload)
        return 0
    for number, entry in enumerate(payload["queries"]):
        if number:
            print()
        print(f"{kind} query: {entry['query']}")
        for result in entry["results"]:
            print(f"  {result['rank']:>3}  {result['score']:.6f}  {result['path']}")
    return 0
