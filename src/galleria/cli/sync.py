"""``galleria sync``: bring a store file up to date with its folder."""

from __future__ import annotations

import argparse
import os
from typing import Any

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._edits import (
    add_wait_option,
    file_stat,
    hold_graph,
    read_manifest,
    readable,
    save_with_manifest,
    store_writer,
)
from galleria.cli._parse import check_existing_folder
from galleria.cli._store_options import add_load_options, load_store

__all__ = ["add_parser", "moved_root", "plan_sync", "run"]

_EXAMPLES = """\
  galleria sync photos.safetensors photos/
  galleria sync photos.safetensors photos/ --skip-errors --json
  galleria sync photos.safetensors /new/place/photos/ --root /new/place/photos/   # after moving the folder
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
    add_wait_option(parser)
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


def moved_root(stored: list[str], listed: list[str], folder: str) -> tuple[str, str, int] | None:
    """``(old root, new root, files found again)`` when the stored gallery's folder moved under ``folder``.

    The old root is the common folder of the stored paths. It counts as moved when that folder no
    longer exists and at least half of the stored files are found again, by their path relative to
    it, under one folder inside ``folder`` (the new root, ``folder`` itself or one of its sub-folders).

    Examples
    --------
    >>> moved_root(["/gone/a/1.png", "/gone/b/2.png"], ["/new/a/1.png", "/new/b/2.png"], "/new")
    ('/gone', '/new', 2)
    >>> moved_root(["/gone/cat/1.png", "/gone/cat/2.png"], ["/new/cat/1.png", "/new/cat/2.png"], "/new")
    ('/gone/cat', '/new/cat', 2)
    """
    if not stored:
        return None
    root = os.path.commonpath(stored) if len(stored) > 1 else os.path.dirname(stored[0])
    if os.path.isdir(root):
        return None
    relative = {os.path.relpath(path, root) for path in stored}
    found: dict[str, int] = {}
    for path in listed:
        parts = os.path.relpath(path, folder).split(os.sep)
        for start in range(len(parts)):
            if os.path.join(*parts[start:]) in relative:
                new_root = os.path.join(folder, *parts[:start])
                found[new_root] = found.get(new_root, 0) + 1
                break
    if not found:
        return None
    new_root, count = max(found.items(), key=lambda item: item[1])
    return (root, new_root, count) if count * 2 >= len(stored) else None


def _refuse_a_moved_gallery(stored: list[str], listed: list[str], folder: str, store_file: str) -> None:
    """CliError with the ``--root`` hint when a plain sync would add a moved gallery a second time."""
    moved = moved_root(stored, listed, folder)
    if moved is None:
        return
    root, new_root, found = moved
    raise CliError(
        f"the store's images were under {root!r}, which is gone, and {found} of its {len(stored)} "
        f"files are under {new_root!r}: the gallery moved. Re-anchor the store instead of adding them "
        f"all again: galleria sync {store_file} {folder} --root {new_root}"
    )


def run(args: argparse.Namespace) -> int:
    """Synchronise the store with the folder and save it."""
    from galleria.cli._parse import check_existing_file

    if os.path.isdir(args.store) and os.path.isfile(args.folder):
        raise CliError(
            "the store comes first: galleria sync STORE FOLDER "
            f"(here: galleria sync {args.folder} {args.store})"
        )
    check_existing_file("store file", args.store)
    with store_writer(args, args.store):  # one writer at a time; the store is read under the lock
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from galleria.datasets import list_images
    from galleria.images.reading import ImageReadError
    from galleria.store import is_url

    folder = os.path.abspath(check_existing_folder("FOLDER", args.folder))
    store = load_store(args, args.store)
    hold_graph(store, args.store)  # STORE.graph follows the change (updated, not discarded)
    files = [path for path in store.paths if not is_url(path)]  # URL-only items are left as they are
    listed = list_images(folder)
    if args.root is None:
        _refuse_a_moved_gallery(files, listed, folder, args.store)
    stats = read_manifest(args.store)
    new, vanished, changed = plan_sync(files, listed, folder, stats, os.stat(args.store).st_mtime_ns)
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
        try:
            store.add_images(to_embed, progress=not args.json)
        except ImageReadError as error:  # the store file is left as it was
            raise CliError(f"{error} (pass --skip-errors to skip unreadable images)") from None
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
