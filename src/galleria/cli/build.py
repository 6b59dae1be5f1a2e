"""``galleria build``: embed a folder of images and save the searchable store to one file."""

from __future__ import annotations

import argparse
import os
from typing import Any

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._options import (
    add_store_options,
    check_existing_folder,
    make_embedder,
    parse_embedder_spec,
    parse_int,
)

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria build photos/ --out photos.safetensors
  galleria build photos/ --out photos.safetensors --index hnsw --workers 8 --skip-errors
  galleria build photos/ --out photos-clip.safetensors --embedder clip:ViT-B-32:openai
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria build``."""
    parser = add_command(
        subparsers,
        "build",
        help="embed a folder of images into a store file",
        description=(
            "Embed every image under IMAGE_DIR (sub-folders included, hidden ones skipped) with a progress "
            "bar, index the vectors and save the store to one .safetensors file."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("image_dir", metavar="IMAGE_DIR", help="folder of images to index")
    parser.add_argument("--out", required=True, metavar="STORE", help="store file to write (.safetensors)")
    add_store_options(parser)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Build and save the store; print how many images were indexed and skipped."""
    from galleria.datasets import list_images
    from galleria.store import InMemoryImageEmbeddingStore

    image_dir = check_existing_folder("IMAGE_DIR", args.image_dir)
    parse_embedder_spec(args.embedder)
    workers = parse_int("--workers", args.workers)
    out = args.out
    if os.path.isdir(out):
        raise CliError(f"--out {out!r} is a directory; give a file name such as gallery.safetensors")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise CliError(f"--out {out!r}: folder {parent!r} does not exist")
    paths = list_images(image_dir)
    embedder = make_embedder(args.embedder)
    store = InMemoryImageEmbeddingStore(
        paths, embedder, args.index, space=args.space, skip_errors=args.skip_errors, num_workers=workers
    )
    store.build_store(progress=not args.json)
    if len(store) == 0:
        raise CliError(f"no image under {image_dir!r} could be read; nothing to save")
    store.save_to_disk(out)
    skipped = [str(item) for item in store.skipped]
    if args.json:
        print_json(
            {
                "store": out,
                "indexed": len(store),
                "skipped": skipped,
                "embedder": args.embedder,
                "index": args.index,
                "space": args.space,
            }
        )
    else:
        print(f"indexed {len(store)} image(s), skipped {len(skipped)} → {out}")
    return 0
