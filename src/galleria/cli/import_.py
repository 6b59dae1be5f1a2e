"""``galleria import clip-retrieval DIR --out STORE``: a clip-retrieval / autofaiss folder as a store."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from galleria.cli._common import add_command, print_json
from galleria.cli._edits import add_wait_option, store_writer

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria import clip-retrieval laion_subset/ --out laion.safetensors
  galleria import clip-retrieval embeddings_folder/ --out photos.safetensors --use url --json
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria import``."""
    parser = add_command(
        subparsers,
        "import",
        help="make a store of a clip-retrieval / autofaiss folder (embeddings, metadata, image.index)",
        description=(
            "Read img_emb/img_emb_N.npy (float16/float32) and metadata/metadata_N.parquet (image_path, url, "
            "caption) in part order, and image.index if present, check them all, and write a galleria "
            "store. The autofaiss index is reused when galleria's FAISS checks accept it, otherwise the "
            "index is rebuilt from the vectors (with a message). A reused index has its search knob "
            "(IVF nprobe, HNSW efSearch) tuned to the recall@10 galleria's IVF-PQ meets, measured on a "
            "sample of the folder's vectors; one that cannot reach it is rebuilt. Scores are distances "
            "(1 - inner product). Captions go to STORE.captions.parquet. Items known by URL only keep "
            "the URL as their path; nothing is ever fetched. Parts that are links out of DIR are refused "
            "without --follow-links; an existing STORE is replaced only with --overwrite."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("format", choices=("clip-retrieval",), help="the folder's layout")
    parser.add_argument("folder", metavar="DIR", help="the clip-retrieval output folder")
    parser.add_argument("--out", required=True, metavar="STORE", help="store file to write")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace STORE if it exists, and remove its side files (graph, map, manifest, captions)",
    )
    parser.add_argument(
        "--follow-links",
        action="store_true",
        help="follow parts of DIR (img_emb/, .npy, .parquet, image.index) that are symbolic links "
        "leading out of it (refused without it)",
    )
    add_wait_option(parser)
    parser.add_argument(
        "--use",
        default="auto",
        choices=("auto", "image_path", "url"),
        help="the column naming each item (auto: image_path where present, else url)",
    )
    parser.add_argument(
        "--index",
        default=None,
        choices=("exact", "hnsw", "ivfpq"),
        help="build this galleria index instead of reusing image.index",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Import the folder and save the store."""
    from galleria.store.clip_retrieval import import_clip_retrieval

    messages: list[str] = []

    def say(message: str) -> None:
        messages.append(message)
        print(f"galleria import: {message}", file=sys.stderr)

    from galleria.cli.build import _check_out

    _check_out(args.out, args.overwrite)
    with store_writer(args, args.out):  # one writer per store, as for build, add and remove
        _check_out(args.out, args.overwrite)  # another writer may have made it meanwhile
        store = import_clip_retrieval(
            args.folder,
            args.out,
            use=args.use,
            index=args.index,
            say=say,
            follow_links=args.follow_links,
            overwrite=args.overwrite,
        )
    summary = {
        "store": args.out,
        "items": len(store),
        "dim": store.dim,
        "space": store.space,
        "index": store.search_index.name,
        "index_params": store.search_index.params(),
        "messages": messages,
    }
    if args.json:
        print_json(summary)
    else:
        print(
            f"wrote {args.out}: {summary['items']} items of dimension {summary['dim']}, "
            f"index {summary['index']}"
        )
    return 0
