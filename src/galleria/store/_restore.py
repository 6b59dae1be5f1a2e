"""Restoring a read store file's index and embedder, moving its paths under a new root, and checking
the load arguments (:func:`galleria.store.persistence.read_store`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from galleria.embedders import embedder_from_config
from galleria.index import SearchIndex, index_from_bytes
from galleria.store._checks import check_embedder, check_embedder_dim
from galleria.store._urls import is_url

__all__ = ["REMOTE_INDEXES", "check_load_arguments", "moved", "reanchor", "restore_embedder", "restore_index"]

#: Indexes whose rows live in a service the file names (a vector database): reconnecting to it needs
#: the caller's consent (``connect=True``), since a file never chooses what galleria opens or contacts.
REMOTE_INDEXES = frozenset({"milvus"})


def reanchor(paths: Sequence[str], root: Any) -> tuple[str, str] | None:
    """(old prefix, new prefix) that moves the gallery's common folder to ``root``."""
    if root is None or not paths:
        return None
    if isinstance(root, os.PathLike):
        root = os.fspath(root)
    if not isinstance(root, str) or not root:
        raise TypeError(f"root must be a non-empty str or os.PathLike, got {root!r}")
    files = [path for path in paths if not is_url(path)]  # URL-only items are never re-anchored
    if not files:
        return None
    if not all(os.path.isabs(path) for path in files):
        return "", os.path.abspath(root)
    return os.path.commonpath([os.path.dirname(path) for path in files]), os.path.abspath(root)


def moved(path: str, anchor: tuple[str, str]) -> str:
    old, new = anchor
    if is_url(path):
        return path
    if not old:
        return os.path.join(new, path)
    if path == old or path.startswith(old.rstrip(os.sep) + os.sep):
        return os.path.join(new, os.path.relpath(path, old))
    return path


def restore_index(
    name: str,
    header: dict[str, Any],
    arrays: dict[str, Any],
    search_index: Any,
    connect: bool,
) -> tuple[SearchIndex, bool]:
    """The store's index: the one passed in (maybe to fill from the vectors) or the saved one
    (``arrays["index"]`` is the container already read from the file, its faiss data still there)."""
    rows, space, vectors = header["rows"], header["space"], arrays.get("vectors")
    if search_index is not None:
        if search_index.space != space:
            raise ValueError(
                f"search_index has space {search_index.space!r}, but the store was saved in {space!r}"
            )
        if len(search_index) == 0 and rows:
            if vectors is None:
                raise ValueError(
                    f"{name!r} holds no vectors to fill the empty search_index; pass an index that holds "
                    f"the store's {rows} rows"
                )
            return search_index, True
        if len(search_index) == rows:
            return search_index, False
        raise ValueError(f"search_index holds {len(search_index)} rows, but the store has {rows} paths")
    if "index" not in arrays:
        raise ValueError(
            f"{name!r} was saved with a {header['index']['name']!r} index that could not be serialised; "
            "pass it back with search_index="
        )
    if header["index"]["name"] in REMOTE_INDEXES and not connect:
        params = header["index"]["params"]
        raise ValueError(
            f"{name!r} keeps its vectors in {header['index']['name']} (uri {params.get('uri')!r}, collection "
            f"{params.get('collection')!r}); a store file never chooses what galleria connects to: pass "
            "connect=True (--connect on the command line) to reconnect to it, or search_index= an index "
            "you opened yourself"
        )
    try:
        index = index_from_bytes(header["index"]["name"], arrays["index"])
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"{name!r}: the saved index cannot be restored: {error}") from error
    if len(index) != rows or index.space != space:
        raise ValueError(f"{name!r}: the saved index does not match the header (rows or space)")
    return index, False


def restore_embedder(
    name: str, saved: Any, embedder: Any, checkpoint: Any, dim: int | None, runtime: Any = None
) -> Any:
    if embedder is not None:
        if checkpoint is not None:
            raise ValueError("pass either embedder= or checkpoint=, not both")
        if dim is not None:
            try:
                check_embedder_dim(embedder, dim, "embedder")
            except ValueError as error:
                raise ValueError(f"{name!r}: {error}") from None
        return embedder
    if saved is None:
        if checkpoint is not None:
            raise ValueError(f"{name!r} was saved without an embedder, so checkpoint= has no use")
        return None
    if saved["config"] is None:
        raise ValueError(
            f"{name!r} was saved with an embedder that has no config(); pass embedder= to load it"
        )
    try:
        rebuilt = embedder_from_config(saved["config"], checkpoint=checkpoint, runtime=runtime)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{name!r}: cannot rebuild the saved embedder: {error}") from error
    if dim is not None:  # before anything is embedded: the config must not choose the batch's size
        try:
            check_embedder_dim(rebuilt, dim, "the saved embedder")
        except ValueError as error:
            raise ValueError(f"{name!r}: {error} (header key 'dim')") from None
    return rebuilt


def check_load_arguments(embedder: Any, search_index: Any, connect: Any, mmap: Any) -> None:
    """TypeError for a load argument of the wrong type (``read_store``'s keywords)."""
    check_embedder(embedder, allow_none=True)
    if not isinstance(connect, bool):
        raise TypeError(f"connect must be a bool, got {connect!r}")
    if search_index is not None and not isinstance(search_index, SearchIndex):
        raise TypeError(f"search_index must be a SearchIndex or None, got {type(search_index).__name__}")
    if not isinstance(mmap, bool):
        raise TypeError(f"mmap must be a bool, got {mmap!r}")
