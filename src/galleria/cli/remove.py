"""``galleria remove``: take images out of a store file."""

from __future__ import annotations

import argparse
import os
from typing import Any

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._edits import add_wait_option, hold_graph, read_manifest, save_with_manifest, store_writer
from galleria.cli._store_options import add_load_options, load_store

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria remove photos.safetensors photos/blurry/IMG_0042.jpg
  galleria remove photos.safetensors photos/old/          # every stored image under the folder
  galleria remove photos.safetensors --all                # every image: an empty store
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria remove``."""
    parser = add_command(
        subparsers,
        "remove",
        help="remove images (files or folders) from a store file",
        description=(
            "Remove the given images from the store and save it in place, atomically. A folder stands for "
            "every stored image under it. The files themselves are not touched and need not exist. A path "
            "that is not in the store is an error, and then nothing is removed. A removal that would leave "
            "the store empty needs --all."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("store", metavar="STORE", help="store file to change")
    parser.add_argument("paths", nargs="*", metavar="PATH", help="stored image paths or folders")
    parser.add_argument(
        "--all",
        action="store_true",
        help="allow removing every image (with no PATH: remove them all); without it, a removal that "
        "would leave the store empty is refused",
    )
    add_load_options(parser)
    add_wait_option(parser)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Remove the images and save the store."""
    from galleria.cli._parse import check_existing_file

    check_existing_file("store file", args.store)
    with store_writer(args, args.store):  # one writer at a time; the store is read under the lock
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from galleria.store import is_url

    if not args.paths and not args.all:
        raise CliError("give the PATHs to remove, or --all to remove every image")
    store = load_store(args, args.store)
    hold_graph(store, args.store)  # STORE.graph follows the change (updated, not discarded)
    stored = store.paths
    gone: list[str] = [] if args.paths else list(stored)
    for item in args.paths:
        path = item if is_url(item) else os.path.abspath(item)  # a URL-only item is named as stored
        if path in store:
            gone.append(path)
            continue
        prefix = path.rstrip(os.sep) + os.sep
        under = [candidate for candidate in stored if candidate.startswith(prefix)]
        if not under:
            raise CliError(f"PATH {item!r} is not in the store {args.store!r} (nothing was removed)")
        gone.extend(under)
    gone = list(dict.fromkeys(gone))
    if gone and len(gone) == len(store) and not args.all:
        raise CliError(
            f"this would remove all {len(store)} image(s) of {args.store!r} and leave it empty; "
            "pass --all if that is what you want (nothing was removed)"
        )
    store.remove_images(gone)
    save_with_manifest(store, args.store, read_manifest(args.store))
    if args.json:
        print_json({"store": args.store, "removed": len(gone), "count": len(store)})
    else:
        print(f"removed {len(gone)} image(s), {len(store)} left → {args.store}")
    return 0
