"""The labelled gallery of ``evaluate`` and ``tune``: a ``root/<label>/<image>`` folder or a built store.

A store file is used as it is: its vectors are split into test queries and gallery, and nothing is
embedded again (its model is not even loaded). Each image's label is its first folder under the
labels' root: ``--labels-root`` when given, else the folder the store was built from (recorded at
build), else — for a store written before that record — the paths' common root. A folder and the
store built from it give the same split for the same seed, with or without ``--skip-errors``: a
folder's unreadable images are found before the split is drawn, which then covers the readable
images only, as the store does.

Scoring is refused (one line, exit 2) when the labels cannot mean what the user thinks
(:func:`galleria.datasets.labels.label_problem`), or when a store's paths have left the root its
labels were drawn from (after ``galleria add`` of an outside folder).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from galleria.cli._common import CliError
from galleria.cli._parse import check_existing_file, parse_float, parse_int

__all__ = [
    "LabelledSource",
    "add_labels_root_option",
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
    #: Images of a folder found unreadable before the split (``--skip-errors``), left out of it.
    unreadable: list[str] = field(default_factory=list)

    def summary(self) -> Any:
        """The :class:`~galleria.datasets.labels.LabelSummary` of these labels."""
        from galleria.datasets.labels import summarise_labels

        return summarise_labels(self.labels, self.root)


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


def add_labels_root_option(parser: argparse.ArgumentParser) -> None:
    """``--labels-root DIR``: the folder whose sub-folders are a store's labels."""
    parser.add_argument(
        "--labels-root",
        default=None,
        metavar="DIR",
        help="a store file's labels are the first folders under DIR (default: the folder the store was "
        "built from, recorded at build; for older stores, the paths' common folder)",
    )


def _open_folder(args: argparse.Namespace, source: str) -> LabelledSource:
    from galleria.datasets import load_image_folder

    if getattr(args, "labels_root", None) is not None:
        raise CliError(
            f"--labels-root applies to a store file; the labels of the folder {source!r} are its sub-folders"
        )
    dataset = load_image_folder(os.path.abspath(source))
    paths, labels = list(dataset.paths), list(dataset.labels)
    unreadable: list[str] = []
    if getattr(args, "skip_errors", False):
        from galleria.cli._edits import readable

        label_of = dict(zip(paths, labels, strict=True))
        paths, unreadable = readable(paths, parse_int("--workers", getattr(args, "workers", "4")))
        labels = [label_of[path] for path in paths]
        if not paths:
            raise CliError(f"no image under {source!r} could be read; nothing to evaluate")
    return LabelledSource("folder", source, dataset.root, paths, labels, unreadable=unreadable)


def _store_labels(
    args: argparse.Namespace, source: str, store: Any, paths: list[str]
) -> tuple[str, list[str]]:
    """The labels' root and each path's label for a store (see the module docstring)."""
    from galleria.datasets.labels import labels_under

    given = getattr(args, "labels_root", None)
    if given is not None:
        root, origin = os.path.normpath(os.path.abspath(given)), "--labels-root"
    elif store.labels_root is not None:
        root, origin = store.labels_root, "recorded at build"
    else:
        return store_labels(paths)
    labels, outside = labels_under(paths, root)
    if outside:
        raise CliError(
            f"{len(outside)} of the {len(paths)} images of {source!r} lie outside the labels' root {root!r} "
            f"({origin}), e.g. {outside[0]!r}: their labels cannot be drawn. Give --labels-root DIR "
            "(a folder whose sub-folders hold every image), or remove them (galleria remove)"
        )
    return root, labels


def open_source(args: argparse.Namespace, source: str, what: str) -> LabelledSource:
    """The labelled images of ``source`` (a folder, or a store file loaded for its vectors)."""
    if not os.path.exists(source):
        raise CliError(f"{what} {source!r} does not exist")
    labelled = _open_folder(args, source) if os.path.isdir(source) else _open_store(args, source)
    from galleria.datasets.labels import label_problem

    problem = label_problem(labelled.labels)
    if problem is not None:
        raise CliError(
            f"cannot score {source!r}: its labels (the first folders under {labelled.root!r}) do not "
            f"look like classes: {problem}. Give a folder of root/<label>/<image>"
            + ("" if labelled.kind == "folder" else ", or --labels-root DIR")
        )
    return labelled


def _open_store(args: argparse.Namespace, source: str) -> LabelledSource:
    check_existing_file("store file", source)
    check_store_options(args, source)
    from galleria.store import InMemoryImageEmbeddingStore
    from galleria.store.persistence import read_store_header

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
    root, labels = _store_labels(args, source, store, paths)
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
