"""``galleria export clip-retrieval STORE DIR``: a store written in clip-retrieval's layout."""

from __future__ import annotations

import argparse
import os
from typing import Any

from galleria.cli._common import add_command, print_json
from galleria.cli._store_options import add_load_options, load_store

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria export clip-retrieval photos.safetensors photos_clip_retrieval/
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria export``."""
    parser = add_command(
        subparsers,
        "export",
        help="write a store as a clip-retrieval folder (img_emb/, metadata/, image.index)",
        description=(
            "Write the store's vectors as img_emb/img_emb_N.npy, its paths (and URLs, and the captions "
            "kept in STORE.captions.parquet) as metadata/metadata_N.parquet and a flat faiss image.index, "
            "so that clip-retrieval's back end can serve the gallery."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("format", choices=("clip-retrieval",), help="the folder's layout")
    parser.add_argument("store", metavar="STORE", help="store file")
    parser.add_argument(
        "folder", metavar="DIR", help="folder to write (new, or without clip-retrieval files)"
    )
    parser.add_argument("--part-rows", type=int, default=1_000_000, metavar="N", help="rows per part")
    add_load_options(parser)
    parser.add_argument("--json", action="store_true", help="print the files written as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Export the store."""
    from galleria.store.clip_retrieval import export_clip_retrieval

    store = load_store(args, args.store)
    captions = args.store + ".captions.parquet"
    files = export_clip_retrieval(
        store,
        args.folder,
        part_rows=args.part_rows,
        captions_file=captions if os.path.isfile(captions) else None,
    )
    if args.json:
        print_json({"folder": args.folder, "files": files})
    else:
        print(f"wrote {len(files)} files to {args.folder}")
    return 0
