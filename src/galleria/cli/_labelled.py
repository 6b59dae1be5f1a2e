"""The labelled gallery of ``evaluate`` and ``tune``: a ``root/<label>/<image>`` folder or a built store.

A store file is used as it is: its vectors are split into test queries and gallery, and nothing is
embedded again (its model is not even loaded). Each image's label is its first folder under the
store's common root, as ``load_image_folder`` labels the folder the store was built from, so a folder
and the store built from it give the same split for the same seed.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from galleria.cli._common import CliError
from galleria.cli._options import check_existing_file, parse_float, parse_int

__all__ = [
    "LabelledSource",
    "check_store_options",
    "gallery_of_store",
    "open_source",
    "split_of",
    "split_option",
    "store_labels",
]


@dataclass
class LabelledSource:
    """Labelled images: where they come from, their paths and labels, and the loaded store (if any)."""

    kind: str  # "folder" or "store"
    given: str  # the argument as typed
    root: str
    paths: list[str]
    labels: list[str]
    store: Any = None


class _VectorsOnly:
    """The embedder of a store loaded for its vectors alone: its model is not rebuilt, nothing is embedded."""

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def embed(self, images: Any) -> np.ndarray:
        raise RuntimeError("this store was loaded for its stored vectors only; it embeds no image")


def store_labels(paths: list[str]) -> tuple[str, list[str]]:
    """The common root of a store's paths and each path's label (its first folder under that root).

    Examples
    --------
    >>> store_labels(["/g/cat/1.png", "/g/cat/kit/2.png", "/g/dog/3.png"])
    ('/g', ['cat', 'cat', 'dog'])
    >>> store_labels(["/g/cat/1.png", "/g/cat/2.png"])  # one label: the images' own folder
    ('/g', ['cat', 'cat'])
    """
    root = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0])
    if all(os.path.dirname(path) == root for path in paths):  # no label folders below the root
        root = os.path.dirname(root)
    labels = [os.path.relpath(path, root).split(os.sep, 1)[0] for path in paths]
    return root, labels


def check_store_options(args: argparse.Namespace, source: str) -> None:
    """Refuse the options that make or feed an embedder when the source is a store file."""
    given = [
        option
        for option, dest, default in (
            ("--embedder", "embedder", "pixel"),
            ("--device", "device", None),
            ("--batch-size", "batch_size", None),
            ("--skip-errors", "skip_errors", False),
        )
        if getattr(args, dest, default) != default
    ]
    if given:
        raise CliError(
            f"{', '.join(given)} does not apply to the store file {source!r}: its stored vectors are "
            "used and nothing is embedded"
        )


def open_source(args: argparse.Namespace, source: str, what: str) -> LabelledSource:
    """The labelled images of ``source`` (a folder, or a store file loaded for its vectors)."""
    if not os.path.exists(source):
        raise CliError(f"{what} {source!r} does not exist")
    if os.path.isdir(source):
        from galleria.datasets import load_image_folder

        dataset = load_image_folder(os.path.abspath(source))
        return LabelledSource("folder", source, dataset.root, list(dataset.paths), list(dataset.labels))
    check_existing_file("store file", source)
    check_store_options(args, source)
    from galleria.cli._storefile import read_store_header
    from galleria.store import InMemoryImageEmbeddingStore

    header = read_store_header(source)
    dim = header.get("dim")
    options: dict[str, Any] = {}
    if getattr(args, "root", None) is not None:
        options["root"] = args.root
    if getattr(args, "connect", False):
        options["connect"] = True
    embedder = _VectorsOnly(int(dim)) if isinstance(dim, int) and header.get("embedder") else None
    store = InMemoryImageEmbeddingStore.load_from_disk(source, embedder, **options)
    if len(store) == 0:
        raise CliError(f"the store {source!r} holds no image")
    space = getattr(args, "space", "cosine")
    if space not in ("cosine", store.space):  # cosine is the option's default: only a choice is refused
        raise CliError(
            f"--space {space} does not apply to the store file {source!r}: its vectors are in the "
            f"{store.space} space"
        )
    paths = sorted(store.paths)
    root, labels = store_labels(paths)
    return LabelledSource("store", source, root, paths, labels, store)


def split_option(args: argparse.Namespace, default_fraction: float) -> dict[str, Any]:
    """``{"n_queries": N}`` or ``{"query_fraction": F}`` from ``--n-queries`` / ``--query-fraction``."""
    if getattr(args, "n_queries", None) is not None:
        return {"n_queries": parse_int("--n-queries", args.n_queries)}
    text = default_fraction if args.query_fraction is None else args.query_fraction
    try:
        value = parse_float("--query-fraction", text, maximum=1.0)
    except CliError:
        value = 0.0
    if not 0.0 < value < 1.0:
        raise CliError(f"--query-fraction must be a number strictly between 0 and 1, got {text!r}")
    return {"query_fraction": value}


def split_of(source: LabelledSource, option: dict[str, Any], seed: int) -> Any:
    """The seeded, label-stratified split of ``source`` (a ``QueryGallerySplit``)."""
    from galleria.datasets import ImageFolder

    try:
        return ImageFolder(source.root, source.paths, source.labels).split(seed=seed, **option)
    except ValueError as error:
        raise CliError(f"cannot split {source.given!r} into queries and gallery: {error}") from None


def gallery_of_store(
    source: LabelledSource, paths: list[str], index: str, params: dict[str, Any] | None
) -> Any:
    """A built store over the stored vectors of ``paths`` (no image read, no model run)."""
    from galleria.store import InMemoryImageEmbeddingStore

    loaded = source.store
    return InMemoryImageEmbeddingStore.from_embeddings(
        paths, loaded.embeddings_of(paths), None, index, space=loaded.space, index_params=params
    )
