"""What ``add``, ``remove`` and ``sync`` share: the file-stat manifest beside a store, and saving.

``galleria sync`` must know whether a file changed since it was embedded. A store file records paths,
not file sizes or times, so the commands that write a store also write ``STORE.files.json`` beside it:
``{"format": "galleria-files", "version": 1, "files": {path: [size, mtime_ns], ...}}``. It is a hint
only: a missing or unreadable manifest makes ``sync`` compare file times with the store file's own.
Both files are written atomically (the store first).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from galleria._files import atomic_write_bytes, load_json, read_regular_file, writer_lock
from galleria.cli._common import CliError

__all__ = [
    "MANIFEST_SUFFIX",
    "add_wait_option",
    "expand_paths",
    "file_stat",
    "manifest_path",
    "parse_manifest",
    "read_manifest",
    "readable",
    "save_with_manifest",
    "store_writer",
]

MANIFEST_SUFFIX = ".files.json"
_FORMAT = "galleria-files"

Stat = tuple[int, int]


def manifest_path(store_path: str) -> str:
    """The manifest file of the store file ``store_path``."""
    return store_path + MANIFEST_SUFFIX


def file_stat(path: str) -> Stat | None:
    """(size, mtime in ns) of a file, or None if it cannot be read."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return int(info.st_size), int(info.st_mtime_ns)


#: Largest manifest read: its entries are about as long as the store's own paths.
MAX_MANIFEST_BYTES = 64 << 20


def parse_manifest(store_path: str) -> dict[str, Stat]:
    """The recorded file stats of ``STORE.files.json``; ValueError naming the file and the key.

    The manifest is untrusted like the store: only a regular file is read (a FIFO or a link to a
    device is refused before a byte is read), at most :data:`MAX_MANIFEST_BYTES` or twice the store
    file's size, whichever is larger. FileNotFoundError when there is none.
    """
    name = manifest_path(store_path)
    try:
        limit = max(MAX_MANIFEST_BYTES, 2 * os.path.getsize(store_path))
    except OSError:
        limit = MAX_MANIFEST_BYTES
    payload = load_json(read_regular_file(name, "file manifest", limit), repr(name))
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ValueError(f"{name!r}: manifest key 'format' must be {_FORMAT!r}")
    files = payload.get("files")
    if not isinstance(files, dict):
        raise ValueError(f"{name!r}: manifest key 'files' must map paths to [size, mtime_ns]")
    stats: dict[str, Stat] = {}
    for path, entry in files.items():
        if not (
            isinstance(entry, list)
            and len(entry) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 63 for v in entry)
        ):
            raise ValueError(
                f"{name!r}: manifest key 'files' entry {path[:80]!r} must be [size, mtime_ns], "
                f"got {repr(entry)[:80]}"
            )
        stats[path] = (entry[0], entry[1])
    return stats


def read_manifest(store_path: str) -> dict[str, Stat]:
    """The recorded file stats; empty (with a note on stderr) when the manifest is missing or invalid."""
    try:
        return parse_manifest(store_path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        print(f"note: ignoring the unreadable manifest: {error}", file=sys.stderr)
        return {}


def save_with_manifest(store: Any, store_path: str, stats: Mapping[str, Stat]) -> None:
    """Save ``store`` to ``store_path`` atomically, then its manifest with the stats of its paths.

    The store is what matters; the manifest is a hint. When the store is saved but its manifest
    cannot be written (a full disk), the old manifest is removed (it describes another store) and a
    warning says so: the command succeeds, and ``sync`` falls back to comparing file times.
    """
    store.save_to_disk(store_path)
    _follow_graph(store, store_path)
    files = {path: list(stats[path]) for path in store.paths if path in stats}
    payload = {"format": _FORMAT, "version": 1, "files": files}
    name = manifest_path(store_path)
    try:
        atomic_write_bytes(name, (json.dumps(payload, sort_keys=True) + "\n").encode())
    except OSError as error:
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)
        print(
            f"warning: the store {store_path!r} is saved, but its file manifest {name!r} could not be "
            f"written ({error.strerror or error}); `galleria sync` will compare file times instead",
            file=sys.stderr,
        )


def hold_graph(store: Any, store_path: str) -> None:
    """Hold ``STORE.graph`` with the store just loaded (if it is of its state), so that the save after
    a change updates it instead of leaving it stale (:func:`galleria.store.graph.hold_graph_file`)."""
    from galleria.store.graph_keeping import hold_graph_file

    hold_graph_file(store, store_path)


def _follow_graph(store: Any, store_path: str) -> None:
    """Write the held graph, updated to the saved store's state; a failure leaves it stale (a warning)."""
    from galleria.store.graph import graph_file_for
    from galleria.store.graph_keeping import follow_graph_file

    try:
        follow_graph_file(store, store_path)
    except (OSError, ValueError) as error:
        print(
            f"warning: the store {store_path!r} is saved, but its neighbour graph "
            f"{graph_file_for(store_path)!r} could not be updated ({error}); it is stale and will be rebuilt "
            "when next needed",
            file=sys.stderr,
        )


def add_wait_option(parser: argparse.ArgumentParser) -> None:
    """``--wait SECONDS`` of the commands that change a store file."""
    parser.add_argument(
        "--wait",
        default="0",
        metavar="SECONDS",
        help="when another galleria process is changing the store, wait up to SECONDS for it to finish "
        "instead of failing at once (default: %(default)s)",
    )


@contextlib.contextmanager
def store_writer(args: argparse.Namespace, store_path: str) -> Iterator[None]:
    """Hold the writer lock of ``store_path`` (``STORE.lock``; :func:`galleria._files.writer_lock`).

    Taken before the store is read, so a second writer reads what the first one saved; without
    ``--wait`` a store another process is changing is refused at once (exit 2).
    """
    from galleria.cli._parse import parse_float

    wait = parse_float("--wait", getattr(args, "wait", "0"))
    with writer_lock(store_path, wait):
        yield


def expand_paths(items: Iterable[str], what: str) -> list[str]:
    """Absolute image paths of ``items``: files as they are, folders walked as ``build`` walks them."""
    from galleria.datasets import list_images

    found: list[str] = []
    for item in items:
        if os.path.isdir(item):
            found.extend(list_images(os.path.abspath(item)))
        elif os.path.exists(item):
            found.append(os.path.abspath(item))
        else:
            raise CliError(f"{what} {item!r} does not exist")
    return list(dict.fromkeys(found))


def readable(paths: list[str], workers: int = 1) -> tuple[list[str], list[str]]:
    """Split ``paths`` into the images that decode and those that do not (each reported on stderr),
    reading with ``workers`` threads; both lists keep the order of ``paths``."""
    from concurrent.futures import ThreadPoolExecutor

    from galleria.images.reading import ImageReadError, read_rgb
    from galleria.viewer.text import printable

    def problem(path: str) -> str | None:
        try:
            read_rgb(path)
        except ImageReadError as error:
            return str(error.reason or error)
        return None

    with ThreadPoolExecutor(max(1, workers)) as pool:
        problems = list(pool.map(problem, paths))
    good: list[str] = []
    bad: list[str] = []
    for path, reason in zip(paths, problems, strict=True):
        if reason is None:
            good.append(path)
        else:
            print(f"skipped {printable(path)}: {printable(reason)}", file=sys.stderr)
            bad.append(path)
    return good, bad
