"""``galleria build``: embed a folder of images and save the searchable store to one file."""

from __future__ import annotations

import argparse
import os
import sys
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
  galleria build photos/ --out photos.safetensors --engine ray --shards photos-shards/ --index ivfpq
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
    engine = parser.add_argument_group("engine (galleria[ray])")
    engine.add_argument(
        "--engine", default="threads", choices=("threads", "ray"), help="who embeds (default: %(default)s)"
    )
    engine.add_argument("--ray-address", default=None, metavar="ADDR", help="Ray cluster (default: local)")
    engine.add_argument("--actors", default="2", metavar="N", help="embedding actors (default: %(default)s)")
    engine.add_argument("--gpus-per-actor", default="0", metavar="X", help="GPUs per actor (default: 0)")
    engine.add_argument(
        "--shards", default=None, metavar="DIR", help="Parquet shard folder (default: STORE + '.shards')"
    )
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
    if getattr(args, "engine", "threads") == "ray":
        store = _build_on_ray(args, paths, embedder, out)
    else:
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
        for item in skipped:
            print(f"  skipped: {item}", file=sys.stderr)
    return 0


def _build_on_ray(args: argparse.Namespace, paths: list[str], embedder: Any, out: str) -> Any:
    """``--engine ray``: embed on Ray Data, write Parquet shards beside the store, build the index."""
    from galleria.engines import build_with_ray

    actors = parse_int("--actors", args.actors)
    try:
        gpus = float(args.gpus_per_actor)
    except ValueError:
        raise CliError(f"--gpus-per-actor must be a number, got {args.gpus_per_actor!r}") from None
    shards = args.shards if args.shards is not None else out + ".shards"
    try:
        return build_with_ray(
            paths,
            embedder,
            shards,
            args.index,
            space=args.space,
            skip_errors=args.skip_errors,
            address=args.ray_address,
            num_actors=actors,
            gpus_per_actor=gpus,
        )
    except ImportError as error:
        raise CliError(str(error)) from error
