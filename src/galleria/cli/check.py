"""``galleria check``: verify a store file and its side files without searching it.

Each part is checked as loading checks it, and then some: the store file (header, every tensor's
digest, the path table, the re-ranking records, the index's own structure, then every row the index
holds read back and found finite), its file manifest ``STORE.files.json``, the checkpoint
``STORE.partial`` an interrupted build left (loaded like a store), the neighbour graph ``STORE.graph``
and the map ``STORE.map`` (damaged, or current / stale: of another state of the store, rebuilt when
next wanted), the writer lock ``STORE.lock`` (held by a running writer, or free), and the temporary
files killed saves left. No model is loaded and nothing is embedded or searched.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

import numpy as np

from galleria.cli._common import add_command, print_json
from galleria.viewer.text import printable

__all__ = ["add_parser", "check_store", "run"]

_EXAMPLES = """\
  galleria check photos.safetensors
  galleria check photos.safetensors --json
  galleria check photos.safetensors --full          # verify every row of STORE.graph
  galleria check photos.safetensors --seed 1234     # rerun a check on the rows it drew
"""

#: Rows read back at a time when the index is walked.
_CHUNK = 4096


def add_parser(subparsers: Any) -> None:
    """Register ``galleria check``."""
    parser = add_command(
        subparsers,
        "check",
        help="verify a store file and its side files (digests, records, index) without searching",
        description=(
            "Verify STORE as loading does (header, digests, paths, re-ranking records, the index's "
            "structure), read back every row its index holds, and check its side files: the file "
            "manifest STORE.files.json, an interrupted build's STORE.partial, the neighbour graph "
            "STORE.graph and the map STORE.map (current, stale or damaged), the writer lock STORE.lock "
            "and temporary files left by killed saves. Prints what it found; exit code 0 when all is "
            "well, 2 otherwise. No model is loaded and nothing is searched."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("store", metavar="STORE", help="store file to verify")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument(
        "--full",
        action="store_true",
        help="verify every row of the neighbour graph STORE.graph against the vectors (default: a "
        "sample of rows drawn afresh, its seed printed)",
    )
    parser.add_argument(
        "--seed",
        default=None,
        metavar="N",
        help="seed of the graph rows verified (the one a previous check printed, to rerun it)",
    )
    parser.set_defaults(run=run)


class _NoModel:
    """Stands in for the saved embedder: checking a store never loads its model."""

    def __init__(self, dim: Any) -> None:
        self.dim = dim

    def embed(self, images: Any) -> Any:  # pragma: no cover - never called
        raise RuntimeError("galleria check does not embed")


def _load(path: str) -> Any:
    """The store at ``path``, loaded with every check and no model (header first)."""
    from galleria.store import InMemoryImageEmbeddingStore
    from galleria.store.persistence import read_store_header

    dim = read_store_header(path).get("dim")
    embedder = _NoModel(dim) if isinstance(dim, int) else None
    return InMemoryImageEmbeddingStore.load_from_disk(path, embedder=embedder)


def _walk_index(store: Any) -> str:
    """Read back every row of the store's index; a description, or ValueError naming the first bad row."""
    index = store.search_index
    count = len(store)
    if len(index) != count:
        raise ValueError(f"the index holds {len(index)} rows but the store names {count} paths")
    if not index.can_reconstruct:
        return f"{count} rows; the {index.name} index cannot give its vectors back (not read)"
    for start in range(0, count, _CHUNK):
        rows = np.arange(start, min(count, start + _CHUNK))
        block = np.asarray(index.reconstruct(rows))
        finite = np.isfinite(block).all(axis=1)
        if not finite.all():
            raise ValueError(f"row {start + int(np.flatnonzero(~finite)[0])} of the index is not finite")
    return f"{count} rows read back, all finite"


def _part(name: str, ok: bool, detail: str, path: str | None = None) -> dict[str, Any]:
    return {"part": name, "ok": ok, "detail": detail, "path": path}


def _store_part(path: str) -> tuple[dict[str, Any], Any]:
    try:
        store = _load(path)
        walked = _walk_index(store)
    except (OSError, ValueError, TypeError, KeyError, RuntimeError, MemoryError) as error:
        return _part("store", False, " ".join(str(error).split()), path), None
    index = store.search_index
    detail = f"{len(store)} image(s), {index.name} index, {store.space} space, dim {store.dim}; {walked}"
    return _part("store", True, detail, path), store


def _manifest_part(path: str, store: Any) -> dict[str, Any]:
    from galleria.cli._edits import manifest_path, parse_manifest

    name = manifest_path(path)
    try:
        stats = parse_manifest(path)
    except FileNotFoundError:
        return _part("manifest", True, "none (sync compares file times)", name)
    except (OSError, ValueError) as error:
        return _part("manifest", False, " ".join(str(error).split()), name)
    detail = f"{len(stats)} file stat(s)"
    if store is not None:
        unknown = sum(1 for entry in stats if entry not in store)
        if unknown:
            detail += f", {unknown} for paths the store does not hold (ignored)"
    return _part("manifest", True, detail, name)


def _checkpoint_part(path: str) -> dict[str, Any]:
    from galleria.cli.build import checkpoint_path

    name = checkpoint_path(path)
    if not os.path.lexists(name):
        return _part("checkpoint", True, "none", name)
    try:
        partial = _load(name)
        _walk_index(partial)
    except (OSError, ValueError, TypeError, KeyError, RuntimeError, MemoryError) as error:
        return _part("checkpoint", False, "unloadable: " + " ".join(str(error).split()), name)
    detail = f"an interrupted build's checkpoint of {len(partial)} image(s); `build --resume` continues it"
    return _part("checkpoint", True, detail, name)


def _lock_part(path: str) -> dict[str, Any]:
    import fcntl

    from galleria._files import lock_path

    name = lock_path(os.path.abspath(path))
    if not os.path.lexists(name):
        return _part("lock", True, "free", name)
    try:
        descriptor = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        return _part("lock", False, f"cannot be opened: {error.strerror or error}", name)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _part("lock", True, "held: another galleria process is changing the store now", name)
    finally:
        os.close(descriptor)
    return _part("lock", True, "free (a lock file left by a writer that ended)", name)


def _graph_part(path: str, store: Any, full: bool = False, seed: int | None = None) -> dict[str, Any]:
    """``STORE.graph``: verified as :func:`~galleria.store.graph.read_graph_file` reads it (every row
    with ``full``; else a sample drawn with ``seed``, a fresh one when None)."""
    import warnings

    from galleria.store.graph import (
        VERIFY_ROWS,
        GraphStateWarning,
        graph_file_for,
        read_graph_file,
        read_graph_header,
    )

    name = graph_file_for(path)
    if not os.path.lexists(name):
        return _part("graph", True, "none (built when first wanted)", name)
    try:
        if store is None:
            header = read_graph_header(name)
            return _part(
                "graph", True, f"k={header['k']} ({header['method']}); not compared (no store)", name
            )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GraphStateWarning)
            graph = read_graph_file(name, store, verify=None if full else VERIFY_ROWS, seed=seed)
    except (OSError, ValueError) as error:
        return _part("graph", False, "damaged: " + " ".join(str(error).split()), name)
    except RuntimeError as error:  # the store cannot give its vectors back
        return _part("graph", True, "not compared: " + " ".join(str(error).split()), name)
    if graph is None or caught:
        return _part("graph", True, "stale: of another state of the store (rebuilt when next wanted)", name)
    if graph.seed is None:
        verified = f"all {graph.verified} rows verified"
    else:
        verified = f"{graph.verified} rows verified (seed {graph.seed}; --full verifies every row)"
    return _part("graph", True, f"current: k={graph.k} ({graph.method}); {verified}", name)


def _map_part(path: str, store: Any) -> dict[str, Any]:
    """``STORE.map``: verified as :func:`~galleria.store.gallery_map.read_map_file` reads it."""
    from galleria.store.gallery_map import CHECK_TOLERANCE, fingerprints, map_file_for, read_map_file

    name = map_file_for(path)
    if not os.path.lexists(name):
        return _part("map", True, "none (computed when first wanted)", name)
    size = len(store) if store is not None else (1 << 62)
    try:
        prints, checks, _, method = read_map_file(name, size)
    except (OSError, ValueError) as error:
        return _part("map", False, "damaged: " + " ".join(str(error).split()), name)
    detail = f"{len(prints)} point(s) ({method})"
    if store is None:
        return _part("map", True, detail + "; not compared (no store)", name)
    try:
        vectors = store._gallery_vectors(np.arange(len(store), dtype=np.int64))
    except RuntimeError as error:  # the store cannot give its vectors back
        return _part("map", True, f"{detail}; not compared: " + " ".join(str(error).split()), name)
    now, now_checks = fingerprints(store.paths, vectors)
    position = {int(value): row for row, value in enumerate(prints)}
    found = np.array([position.get(int(value), -1) for value in now], dtype=np.int64)
    known = found >= 0
    known[known] = np.abs(checks[found[known]] - now_checks[known]) <= CHECK_TOLERANCE
    if int(known.sum()) == len(now) == len(prints):
        return _part("map", True, "current: " + detail, name)
    if now.size and known.sum() * 2 < now.size:
        return _part("map", True, f"stale: {detail} of another gallery (recomputed when next wanted)", name)
    placed = len(now) - int(known.sum())
    return _part(
        "map", True, f"stale: {detail}; {placed} image(s) placed from their neighbours when next wanted", name
    )


def _temporaries_part(path: str) -> dict[str, Any]:
    folder, base = os.path.split(os.path.abspath(path))
    names = [re.escape(f".{base}{suffix}.") for suffix in ("", ".files.json", ".partial", ".graph", ".map")]
    pattern = re.compile(f"(?:{'|'.join(names)})" + r"\d+\.[^.]+\.tmp")
    try:
        left = sorted(entry for entry in os.listdir(folder) if pattern.fullmatch(entry))
    except OSError:
        left = []
    detail = "none" if not left else f"{len(left)} left by interrupted saves (removed by the next save)"
    return _part("temporary files", True, detail, folder)


def check_store(path: str, *, full: bool = False, seed: int | None = None) -> list[dict[str, Any]]:
    """The findings of ``galleria check`` for the store file ``path``: one dict per part checked
    (``full``: every row of the graph verified; ``seed``: the seed of the rows verified otherwise)."""
    store_part, store = _store_part(path)
    return [
        store_part,
        _manifest_part(path, store),
        _checkpoint_part(path),
        _graph_part(path, store, full, seed),
        _map_part(path, store),
        _lock_part(path),
        _temporaries_part(path),
    ]


def run(args: argparse.Namespace) -> int:
    """Print what was found; 0 when every part is fine, 2 otherwise."""
    from galleria.cli._parse import check_existing_file, parse_int

    check_existing_file("store file", args.store)
    seed = None if args.seed is None else parse_int("--seed", args.seed, minimum=0)
    parts = check_store(args.store, full=args.full, seed=seed)
    ok = all(part["ok"] for part in parts)
    if args.json:
        print_json({"store": args.store, "ok": ok, "parts": parts})
    else:
        for part in parts:
            mark = "ok  " if part["ok"] else "FAIL"
            print(printable(f"{mark} {part['part']:<16} {part['detail']}"))
        print("the store and its side files are sound" if ok else "problems found (see FAIL above)")
    return 0 if ok else 2
