"""``galleria add``: embed more images into an existing store file."""

from __future__ import annotations

import argparse
from typing import Any

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._edits import (
    add_wait_option,
    expand_paths,
    file_stat,
    hold_graph,
    read_manifest,
    readable,
    save_with_manifest,
    store_writer,
)
from galleria.cli._store_options import add_load_options, load_store

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria add photos.safetensors new/IMG_0100.jpg new/IMG_0101.jpg
  galleria add photos.safetensors more-photos/ --skip-errors
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria add``."""
    parser = add_command(
        subparsers,
        "add",
        help="embed more images (files or folders) into a store file",
        description=(
            "Embed the given image files, and every image under the given folders (walked as `galleria "
            "build` walks them), with the store's own embedder, add them to its index and save the store "
            "in place, atomically. Images already in the store are left as they are."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("store", metavar="STORE", help="store file to change")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="image files or folders to add")
    parser.add_argument(
        "--skip-errors", action="store_true", help="skip unreadable images instead of stopping"
    )
    add_load_options(parser)
    add_wait_option(parser)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Add the images and save the store."""
    from galleria.cli._parse import check_existing_file

    check_existing_file("store file", args.store)
    with store_writer(args, args.store):  # one writer at a time; the store is read under the lock
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from galleria.cli._parse import check_existing_file
    from galleria.images.reading import ImageReadError

    check_existing_file("store file", args.store)
    paths = expand_paths(args.paths, "PATH")
    store = load_store(args, args.store)
    hold_graph(store, args.store)  # STORE.graph follows the change (updated, not discarded)
    stats = read_manifest(args.store)
    present = [path for path in paths if path in store]
    new = [path for path in paths if path not in store]
    skipped: list[str] = []
    if args.skip_errors:
        new, skipped = readable(new)
    stats.update({path: stat for path in new if (stat := file_stat(path)) is not None})
    before = len(store)
    if new:
        try:
            store.add_images(new, progress=not args.json)
        except ImageReadError as error:  # the store file is left as it was
            raise CliError(f"{error} (pass --skip-errors to skip unreadable images)") from None
        save_with_manifest(store, args.store, stats)
    added = len(store) - before
    if args.json:
        print_json(
            {
                "store": args.store,
                "added": added,
                "already_present": len(present),
                "skipped": skipped,
                "count": len(store),
            }
        )
    else:
        print(
            f"added {added} image(s), {len(present)} already present, skipped {len(skipped)} → {args.store}"
        )
    return 0
