"""``galleria sync``: bring a store file up to date with its folder."""

from __future__ import annotations

import argparse
import os
from typing import Any

from galleria.cli._common import add_command, print_json
from galleria.cli._edits import file_stat, read_manifest, readable, save_with_manifest
from galleria.cli._options import add_load_options, check_existing_folder, load_store

__all__ = ["add_parser", "plan_sync", "run"]

_EXAMPLES = """\
  galleria sync photos.safetensors photos/
  galleria sync photos.safetensors photos/ --skip-errors --json
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria sync``."""
    parser = add_command(
        subparsers,
        "sync",
        help="add new, remove vanished and re-embed changed images of a folder",
        description=(
            "Compare FOLDER (walked as `galleria build` walks it) with the store's images under it: embed "
            "the new files, remove the stored images whose files are gone, and re-embed the files whose "
            "size or modification time changed since they were embedded (recorded in STORE.files.json; "
            "without that record, files modified after the store file was written). The store is saved "
            "in place, atomically. Stored images outside FOLDER are left alone."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("store", metavar="STORE", help="store file to update")
    parser.add_argument("folder", metavar="FOLDER", help="the gallery folder")
    parser.add_argument(
        "--skip-errors", action="store_true", help="skip unreadable images instead of stopping"
    )
    add_load_options(parser)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(run=run)


def plan_sync(
    stored: list[str], listed: list[str], folder: str, stats: dict[str, Any], store_mtime_ns: int
) -> tuple[list[str], list[str], list[str]]:
    """The (new, vanished, changed) paths of a sync of ``folder``.

    Examples
    --------
    >>> plan_sync(["/g/a.png", "/g/b.png", "/h/c.png"], ["/g/a.png", "/g/d.png"], "/g", {}, 0)[:2]
    (['/g/d.png'], ['/g/b.png'])
    """
    prefix = folder.rstrip(os.sep) + os.sep
    listed_set = set(listed)
    stored_set = set(stored)
    new = [path for path in listed if path not in stored_set]
    vanished = [path for path in stored if path.startswith(prefix) and path not in listed_set]
    changed = []
    for path in stored:
        if path not in listed_set:
            continue
        now = file_stat(path)
        recorded = stats.get(path)
        if now is None:
            continue
        if (recorded is not None and tuple(recorded) != now) or (
            recorded is None and now[1] > store_mtime_ns
        ):
            changed.append(path)
    return new, vanished, changed


def run(args: argparse.Namespace) -> int:
    """Synchronise the store with the folder and save it."""
    from galleria.datasets import list_images

    folder = os.path.abspath(check_existing_folder("FOLDER", args.folder))
    store = load_store(args, args.store)
    listed = list_images(folder)
    stats = read_manifest(args.store)
    new, vanished, changed = plan_sync(store.paths, listed, folder, stats, os.stat(args.store).st_mtime_ns)
    to_embed = new + changed
    skipped: list[str] = []
    if args.skip_errors:
        to_embed, skipped = readable(to_embed)
    fresh = {path: stat for path in to_embed if (stat := file_stat(path)) is not None}
    before = len(store)
    unreadable_changed = [path for path in changed if path in skipped]
    if vanished or changed:
        store.remove_images(vanished + changed)
    if to_embed:
        store.add_images(to_embed, progress=not args.json)
    added = len(store) - (before - len(vanished) - len(changed))
    if vanished or changed or to_embed:
        save_with_manifest(store, args.store, {**stats, **fresh})
    summary = {
        "store": args.store,
        "added": added - len([path for path in changed if path in fresh and path in store]),
        "removed": len(vanished) + len(unreadable_changed),
        "reembedded": len([path for path in changed if path in store]),
        "skipped": skipped,
        "count": len(store),
    }
    if args.json:
        print_json(summary)
    else:
        print(
            f"added {summary['added']}, removed {summary['removed']}, re-embedded {summary['reembedded']}, "
            f"skipped {len(skipped)}: {len(store)} image(s) → {args.store}"
        )
    return 0
