"""``galleria search``: query a saved store with images or text; optional αQE and re-ranking."""

from __future__ import annotations

import argparse
import csv
import os
import sys
from typing import Any

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._parse import parse_int
from galleria.cli._rerank_options import add_expand_options, add_rerank_options, add_settings_option
from galleria.cli._retrieval import config_from_args, used_settings
from galleria.cli._store_options import add_load_options, load_store
from galleria.viewer.text import format_score, printable

__all__ = ["TEXT_HEADER", "add_parser", "query_paths_from", "run"]

#: The header line of the text output's table, above each query's results.
TEXT_HEADER = "rank  distance  path"

_EXAMPLES = """\
  galleria search photos.safetensors --image query.jpg
  galleria search photos.safetensors --image a.jpg b.jpg -k 5 --json
  galleria search photos.safetensors --image query.jpg --expand --rerank --pool 200
  galleria search photos.safetensors --queries queries.txt --skip-errors --csv > results.csv
  galleria search photos.safetensors --queries photos/ --exclude-self -k 5     # near-duplicates
  galleria search photos-clip.safetensors --text "a dog on a beach" -k 20
  galleria search photos.safetensors --image query.jpg --settings tuned.json
  galleria search laion.safetensors --image query.jpg --embedder clip:ViT-B-32:openai   # imported store
"""


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
    queries.add_argument(
        "--queries",
        metavar="FILE|FOLDER",
        help="a text file with one query image path a line, or a folder: every image under it",
    )
    queries.add_argument("--text", nargs="+", metavar="TEXT", help="query text(s)")
    parser.add_argument("-k", default="10", metavar="K", help="results per query (default: %(default)s)")
    parser.add_argument(
        "--skip-errors", action="store_true", help="skip unreadable query images (listed on stderr)"
    )
    parser.add_argument(
        "--exclude-self",
        action="store_true",
        help="leave a query image out of its own results when it is in the gallery",
    )
    add_rerank_options(parser)
    add_expand_options(parser)
    add_load_options(parser)
    add_settings_option(parser)
    parser.add_argument(
        "--embedder",
        default=None,
        metavar="SPEC",
        help=(
            "the model that made the store's vectors, as `galleria models` spells it (for a store that "
            "records none, such as an imported clip-retrieval folder); checked against the store"
        ),
    )
    parser.add_argument(
        "--batch-size", default=None, metavar="N", help="queries embedded per batch (default: the embedder's)"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the results as JSON")
    output.add_argument("--csv", action="store_true", help="print the results as CSV: query,rank,path,score")
    parser.set_defaults(run=run)


def query_paths_from(source: str) -> list[str]:
    """The query image paths of ``--queries``: a folder's images, or a file's non-blank lines.

    Relative paths in a list file are taken relative to the file's folder; lines starting with ``#``
    are comments.
    """
    from galleria.datasets import IMAGE_EXTENSIONS, list_images

    if os.path.isdir(source):
        return list_images(source)
    if not os.path.isfile(source):
        raise CliError(f"--queries {source!r} does not exist")
    if source.lower().endswith(IMAGE_EXTENSIONS):
        raise CliError(
            f"--queries {source!r} is an image file; --queries takes a folder or a text file of paths "
            f"(give query images with --image {source})"
        )
    base = os.path.dirname(os.path.abspath(source))
    try:
        with open(source, encoding="utf-8") as stream:
            lines = [line.strip() for line in stream]
    except UnicodeDecodeError:
        raise CliError(
            f"--queries {source!r} is not a text file of paths (give a folder of images, or one path a line)"
        ) from None
    paths = [os.path.join(base, line) for line in lines if line and not line.startswith("#")]
    if not paths:
        raise CliError(f"--queries {source!r} lists no path")
    return paths


def _image_queries(
    paths: list[str], skip_errors: bool, embedder: Any = None
) -> tuple[list[str], list[Any], list[str]]:
    """Read the query images as the store read its gallery: the paths kept, their arrays, the unreadable."""
    from galleria.images.reading import ImageReadError, reader_for

    read_rgb = reader_for(embedder)  # the same draft scale for large JPEGs as the gallery's

    kept: list[str] = []
    arrays: list[Any] = []
    bad: list[str] = []
    for path in paths:
        if not os.path.exists(path):
            if skip_errors:
                print(f"skipped {printable(path)}: no such file", file=sys.stderr)
                bad.append(path)
                continue
            raise CliError(f"query image {path!r} does not exist")
        if not os.path.isfile(path):
            if skip_errors:
                print(f"skipped {printable(path)}: not a file", file=sys.stderr)
                bad.append(path)
                continue
            raise CliError(f"query image {path!r} is not a file")
        try:
            arrays.append(read_rgb(path))
        except ImageReadError as error:
            if not skip_errors:
                raise CliError(f"{error} (pass --skip-errors to skip unreadable queries)") from None
            print(f"skipped {printable(path)}: {printable(error.reason or error)}", file=sys.stderr)
            bad.append(path)
            continue
        kept.append(path)
    return kept, arrays, bad


def _refuse_text_without_text_side(path: str) -> None:
    """CliError when the store's recorded embedder has no text side (read from the header only)."""
    from galleria.cli._parse import check_existing_file
    from galleria.store.persistence import read_store_header

    entry = read_store_header(check_existing_file("store file", path)).get("embedder")
    config = entry.get("config") if isinstance(entry, dict) else None
    kind = config.get("type") if isinstance(config, dict) else None
    if entry is not None and kind != "clip" and isinstance(kind, str):
        names = {"timm": "TimmEmbedder", "pixel": "PixelEmbedder"}
        raise CliError(
            f"--text needs an embedder with a text side (clip); store {path!r} was built with "
            f"{names.get(kind, kind)}, which embeds images only"
        )


def _searchable_store(args: argparse.Namespace, kind: str, batch_size: int | None) -> Any:
    """The store, with the embedder that embeds its queries (its own, or the one ``--embedder`` names)."""
    from galleria.cli._query_embedder import query_embedder

    if kind == "text" and args.embedder is None:
        _refuse_text_without_text_side(args.store)  # from the header: before any model is loaded
    embedder = query_embedder(args.embedder, args.store, getattr(args, "runtime", None))
    store = load_store(args, args.store, embedder)
    if store.embedder is None:
        raise CliError(
            f"store {args.store!r} has no embedder (it was made from vectors); it cannot embed queries"
        )
    if batch_size is not None:
        store.embedder.batch_size = batch_size
    if kind == "text" and not callable(getattr(store.embedder, "embed_text", None)):
        built = "was built with" if args.embedder is None else "is searched with"
        raise CliError(
            f"--text needs an embedder with a text side (clip); store {args.store!r} {built} "
            f"{type(store.embedder).__name__}, which embeds images only"
        )
    return store


def _payload(args: argparse.Namespace, k: int, searcher: Any, config: Any, answers: Any) -> dict[str, Any]:
    """The JSON-able result: the settings used and, per query, its ranked paths and scores."""
    kind, query_names, lists, skipped = answers
    expand, rerank = used_settings(searcher.config, config)
    return {
        "store": args.store,
        "k": k,
        "expand": expand,
        "rerank": rerank,
        "skipped": skipped,
        "queries": [
            {
                "query": query,
                "kind": kind,
                "results": [
                    {"rank": rank, "path": candidate.path, "score": float(candidate.score)}
                    for rank, candidate in enumerate(candidates[:k], start=1)
                ],
            }
            for query, candidates in zip(query_names, lists, strict=True)
        ],
    }


def _print(args: argparse.Namespace, payload: dict[str, Any], kind: str) -> None:
    """Print the results as JSON, CSV or a table: a header line, then rank, distance and whole path."""
    if args.json:
        print_json(payload)
    elif args.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["query", "rank", "path", "score"])
        for entry in payload["queries"]:
            for result in entry["results"]:
                writer.writerow(
                    [
                        printable(entry["query"]),
                        result["rank"],
                        printable(result["path"]),
                        format_score(result["score"], 6),
                    ]
                )
    else:
        for number, entry in enumerate(payload["queries"]):
            if number:
                print()
            print(f"{kind} query: {printable(entry['query'])}")
            if entry["results"]:
                print(TEXT_HEADER)
            for result in entry["results"]:
                print(
                    f"{result['rank']:>4}  {format_score(result['score'], 6):>8}  {printable(result['path'])}"
                )


def run(args: argparse.Namespace) -> int:
    """Answer the queries and print the ranked paths and scores."""
    from galleria.retrieval import Searcher

    k = parse_int("-k", args.k)
    config = config_from_args(args)
    batch_size = None if args.batch_size is None else parse_int("--batch-size", args.batch_size)
    if config.rerank and config.pool < k:
        raise CliError(f"--pool must be at least -k ({k}), got {config.pool}")
    kind = "text" if args.text else "image"
    query_names: list[str] = []
    if kind == "image":
        query_names = list(args.image) if args.image else query_paths_from(args.queries)
    store = _searchable_store(args, kind, batch_size)
    skipped: list[str] = []
    queries: list[Any]
    if kind == "image":
        query_names, queries, skipped = _image_queries(query_names, args.skip_errors, store.embedder)
        if not queries:
            raise CliError("no query image could be read; nothing to search")
    else:
        query_names = list(args.text)
        queries = list(args.text)
    # The one path: adaptive values read from this store's gallery, DBA's augmented store swapped in.
    try:
        searcher = Searcher(store, config)
    except (TypeError, ValueError) as error:
        raise CliError(str(error)) from None
    exclude = None
    if args.exclude_self and kind == "image":
        exclude = [(os.path.abspath(name), name) for name in query_names]
    lists = searcher.search(queries, k, kind=kind, exclude=exclude)
    _print(args, _payload(args, k, searcher, config, (kind, query_names, lists, skipped)), kind)
    return 0
