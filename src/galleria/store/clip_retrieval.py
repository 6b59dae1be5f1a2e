"""clip-retrieval / autofaiss folders opened as galleria stores, and galleria stores written as them.

The layout clip-retrieval's inference writes (``FOLDER`` or ``FOLDER/embeddings``)::

    img_emb/img_emb_{N}.npy          float16 or float32 (rows, d), one part per N (zero-padded)
    metadata/metadata_{N}.parquet    one row per embedding row: image_path, caption, url, ...
    image.index                      autofaiss's index over the parts in order (optional; also
                                     looked for in FOLDER/index/)

Everything in the folder is untrusted. Every part (``img_emb/``, each ``.npy`` and ``.parquet`` file,
the index) must resolve inside the folder: a symbolic link leading out of it could pull a user's own
files into a store that is then shared, so it is refused unless ``follow_links`` (``--follow-links``)
is given, and then each link followed is said. ``.npy`` headers are parsed without pickle and checked
(2-D, float16/float32, one dimension for all parts, exact file size) before the data is mapped; every
parquet file must have exactly its part's row count and the path column; before a row group is
decompressed, the sizes its metadata records must stay within a decompression-ratio cap for the
whole file (:data:`MAX_EXPANSION` times its size plus :data:`EXPANSION_SLACK`) and within the field
caps per row; every path is a non-empty string of at most :data:`MAX_PATH` characters without control
characters, every caption at most :data:`MAX_CAPTION` bytes (ValueError naming the file and the row,
the value cut to a readable length). The index is
walked by galleria's FAISS checks like every FAISS file; its ``ntotal`` and dimension must match
the embeddings (refused otherwise). An index the checks refuse (an HNSW coarse quantiser, on-disk
inverted lists) is not used: the store's index is rebuilt from the ``.npy`` parts, with a message.
No file a file names is ever opened, and nothing is fetched: an item known by its URL only
(``scheme://...``) keeps the URL as its path (see docs/cli.md, "URL-only items").

pyarrow (the ``clip-retrieval`` extra) reads and writes the parquet files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from galleria._file_formats import map_npy
from galleria._files import atomic_path, atomic_stream, resolve_inside, short
from galleria._moved import moved_names
from galleria.index import ExternalSearchIndex
from galleria.store._clip_index import index_file, read_index, tune_index
from galleria.store._clip_metadata import PATH_COLUMNS, metadata_part, read_captions
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = ["ClipRetrievalFolder", "export_clip_retrieval", "import_clip_retrieval", "read_clip_retrieval"]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(
    __name__,
    {
        "EXPANSION_SLACK": "galleria.store._clip_metadata",
        "MAX_CAPTION": "galleria.store._clip_metadata",
        "MAX_EXPANSION": "galleria.store._clip_metadata",
        "MAX_PATH": "galleria.store._clip_metadata",
    },
)

_PART = re.compile(r"^img_emb_(\d{1,9})\.npy$")
_DTYPES = (np.dtype("<f2"), np.dtype("<f4"))
#: Galleries up to this size are rebuilt with the exact index, larger ones with IVF-PQ.
_EXACT_REBUILD = 100_000


def _parquet() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as error:  # pragma: no cover - the extra is installed in the tests
        raise ImportError(
            "reading clip-retrieval metadata needs pyarrow: pip install 'galleria[clip-retrieval]'"
        ) from error
    return pa, pq


@dataclass
class ClipRetrievalFolder:
    """What :func:`read_clip_retrieval` found: paths (or URLs), vectors, captions and the index."""

    paths: list[str]
    vectors: np.ndarray
    captions: list[str | None]
    index: Any = None  # the checked faiss index, or None (absent or refused)
    messages: list[str] = field(default_factory=list)


def _inside(path: str, root: str, follow_links: bool, messages: list[str]) -> str:
    """``path`` once it resolves inside ``root``; a link leading out is refused unless ``follow_links``
    (then followed, and said)."""
    try:
        resolve_inside(path, root, "the part")
    except ValueError:
        real = os.path.realpath(path)
        if not follow_links:
            raise ValueError(
                f"{short(path)} resolves to {short(real)}, outside the folder {short(root)}: a link "
                "out of the folder is not imported; pass --follow-links (follow_links=True) to follow it"
            ) from None
        messages.append(
            f"following the link {short(path)} to {short(real)}, outside the folder (--follow-links)"
        )
    return path


def _locate(folder: str) -> tuple[str, str]:
    for base in (folder, os.path.join(folder, "embeddings")):
        if os.path.isdir(os.path.join(base, "img_emb")):
            return os.path.join(base, "img_emb"), os.path.join(base, "metadata")
    raise ValueError(f"folder {folder!r} holds no img_emb/ (nor embeddings/img_emb/) of clip-retrieval")


def _npy_part(path: str) -> np.ndarray:
    """One embeddings part, its header checked without pickle before it is mapped."""
    array: np.ndarray = map_npy(path, "embeddings file", _DTYPES)
    if array.ndim != 2 or array.shape[1] < 1:
        raise ValueError(
            f"embeddings file {short(path)} must hold a 2-D float16/float32 array, got {array.dtype} "
            f"{short(array.shape)}"
        )
    return array


def read_clip_retrieval(folder: Any, *, use: str = "auto", follow_links: bool = False) -> ClipRetrievalFolder:
    """Read and check a clip-retrieval / autofaiss folder (module docstring); nothing is written.

    ``use``: which parquet column names an item — ``"image_path"``, ``"url"``, or ``"auto"`` (the
    image path where a row has one, else its URL). ``follow_links``: follow parts that are links
    leading out of the folder (refused otherwise).
    """
    if use not in ("auto", *PATH_COLUMNS):
        raise ValueError(f"use must be 'auto', 'image_path' or 'url', got {use!r}")
    root = os.fspath(folder)
    messages: list[str] = []
    embeddings, metadata = _locate(root)
    _inside(embeddings, root, follow_links, messages)
    if os.path.lexists(metadata):
        _inside(metadata, root, follow_links, messages)
    numbers = sorted((int(m.group(1)), name) for name in os.listdir(embeddings) if (m := _PART.match(name)))
    if not numbers:
        raise ValueError(f"folder {embeddings!r} holds no img_emb_N.npy part")
    parts: list[np.ndarray] = []
    paths: list[str] = []
    captions: list[str | None] = []
    seen: dict[str, str] = {}
    for number, name in numbers:
        part = _npy_part(_inside(os.path.join(embeddings, name), root, follow_links, messages))
        if parts and part.dtype != parts[0].dtype:
            raise ValueError(f"embeddings file {name!r} holds {part.dtype}, the first part {parts[0].dtype}")
        if parts and part.shape[1] != parts[0].shape[1]:
            raise ValueError(
                f"embeddings file {name!r} has dimension {part.shape[1]}, the first part {parts[0].shape[1]}"
            )
        digits = name[len("img_emb_") : -len(".npy")]
        parquet = os.path.join(metadata, f"metadata_{digits}.parquet")
        if not os.path.lexists(parquet):
            raise ValueError(f"metadata file {parquet!r} of part {number} is missing")
        found, notes = metadata_part(_inside(parquet, root, follow_links, messages), part.shape[0], name, use)
        for row, item in enumerate(found):
            if item in seen:
                raise ValueError(
                    f"metadata file {short(parquet)}: row {row} repeats the path {short(item)} "
                    f"of {seen[item]}"
                )
            seen[item] = f"part {number}, row {row}"
        parts.append(part)
        paths.extend(found)
        captions.extend(notes)
    vectors = np.concatenate([np.asarray(part, dtype=np.float32) for part in parts])
    if not np.isfinite(vectors).all():
        raise ValueError(f"folder {embeddings!r}: the embeddings must be finite")
    result = ClipRetrievalFolder(paths, vectors, captions, messages=messages)
    located = index_file(root)
    if located is not None:
        _inside(located, root, follow_links, messages)
        result.index = read_index(located, vectors.shape[0], vectors.shape[1], result.messages)
    return result


#: The side files of a store that an import replacing it removes (they describe the old store).
_SIDE_SUFFIXES = (".graph", ".map", ".files.json", ".captions.parquet")


def import_clip_retrieval(
    folder: Any,
    out: Any = None,
    *,
    use: str = "auto",
    index: str | None = None,
    say: Callable[[str], None] = print,
    follow_links: bool = False,
    overwrite: bool = False,
) -> InMemoryImageEmbeddingStore:
    """A galleria store of a clip-retrieval folder; saved to ``out`` (with ``out.captions.parquet``) if given.

    The folder's ``image.index`` is the store's index when galleria's checks accept it and, its
    search knob tuned (IVF ``nprobe``, HNSW ``efSearch``), it reaches the recall@10 galleria's
    IVF-PQ meets by default on a sample of the folder's own vectors; otherwise (or with ``index``
    naming a galleria index: ``"exact"``, ``"hnsw"``, ``"ivfpq"``) the index is built from the
    vectors, in the inner-product space clip-retrieval uses. Scores are distances either way
    (``1 - <q, v>``). ``say`` gets each message. An existing ``out`` is replaced only with
    ``overwrite`` (its side files, which describe the old store, are removed); ``out`` is written
    atomically, so a failure leaves the old store as it was.
    """
    from galleria._files import check_output_path

    if out is not None:
        target = check_output_path(out, "out")
        if os.path.exists(target) and not overwrite:
            raise ValueError(
                f"out {short(target)} already exists; pass overwrite=True (--overwrite) to replace it"
            )
    found = read_clip_retrieval(folder, use=use, follow_links=follow_links)
    for message in found.messages:
        say(message)
    chosen: Any = index
    if chosen is None and found.index is not None:
        label = tune_index(found.index, found.vectors, say)
        if label is not None:
            chosen = ExternalSearchIndex.from_faiss_index(found.index, name=label)
    if chosen is None:
        chosen = "exact" if len(found.paths) <= _EXACT_REBUILD else "ivfpq"
    space = None if not isinstance(chosen, str) else "ip"
    store = InMemoryImageEmbeddingStore.from_embeddings(found.paths, found.vectors, None, chosen, space=space)
    if out is not None:
        _save_import(store, os.fspath(out), found.paths, found.captions)
    return store


def _save_import(
    store: InMemoryImageEmbeddingStore, out: str, paths: list[str], captions: list[str | None]
) -> None:
    """Save the store to ``out`` with its captions, each file atomically; then remove the side files
    of the store it replaced (all but the captions just written)."""
    import contextlib

    captions_file = out + ".captions.parquet"
    if any(caption is not None for caption in captions):
        with atomic_path(captions_file) as temporary:  # moved into place only once the store is
            _write_captions_to(temporary, paths, captions)
            store.save_to_disk(out)
        kept = {captions_file}
    else:
        store.save_to_disk(out)
        kept = set()
    for suffix in _SIDE_SUFFIXES:
        side = out + suffix
        if side not in kept and os.path.lexists(side) and not os.path.isdir(side):
            with contextlib.suppress(FileNotFoundError):
                os.remove(side)


def _write_captions_to(temporary: str, paths: list[str], captions: list[str | None]) -> None:
    pa, pq = _parquet()
    pq.write_table(pa.table({"image_path": paths, "caption": captions}), temporary)


def export_clip_retrieval(
    store: InMemoryImageEmbeddingStore, folder: Any, *, part_rows: int = 1_000_000, captions_file: Any = None
) -> list[str]:
    """Write ``store`` as a clip-retrieval folder (img_emb/, metadata/, image.index); returns the files.

    The vectors are written as the store holds them (float32); the metadata has ``image_path`` (the
    store's path, a URL for URL-only items), ``url`` (the URL, or null) and ``caption`` (from
    ``captions_file`` — ``STORE.captions.parquet`` written by :func:`import_clip_retrieval` — or null);
    ``image.index`` is a flat faiss index over the vectors (inner product; L2 for an l2 store).
    The folder must not hold clip-retrieval files already.
    """
    import faiss

    from galleria.store._urls import is_url

    if not isinstance(part_rows, int) or isinstance(part_rows, bool) or part_rows < 1:
        raise ValueError(f"part_rows must be a positive int, got {part_rows!r}")
    root = os.fspath(folder)
    for sub in ("img_emb", "metadata", "image.index"):
        if os.path.exists(os.path.join(root, sub)):
            raise ValueError(f"folder {root!r} already holds {sub}; export into a new folder")
    paths = store.paths
    vectors = np.ascontiguousarray(
        store._gallery_vectors(np.arange(len(paths), dtype=np.int64)), dtype=np.float32
    )
    captions = read_captions(os.fspath(captions_file), paths) if captions_file else [None] * len(paths)
    pa, pq = _parquet()
    os.makedirs(os.path.join(root, "img_emb"), exist_ok=True)
    os.makedirs(os.path.join(root, "metadata"), exist_ok=True)
    count = max(1, -(-len(paths) // part_rows))
    digits = len(str(count - 1))
    written = []
    for number in range(count):
        rows = slice(number * part_rows, min(len(paths), (number + 1) * part_rows))
        tag = str(number).zfill(digits)
        target = os.path.join(root, "img_emb", f"img_emb_{tag}.npy")
        with atomic_stream(target) as stream:
            np.save(stream, vectors[rows], allow_pickle=False)
        table = pa.table(
            {
                "image_path": paths[rows],
                "url": [item if is_url(item) else None for item in paths[rows]],
                "caption": pa.array(captions[rows], type=pa.string()),
            }
        )
        meta = os.path.join(root, "metadata", f"metadata_{tag}.parquet")
        with atomic_path(meta) as temporary:
            pq.write_table(table, temporary)
        written += [target, meta]
    flat = faiss.IndexFlatL2(vectors.shape[1]) if store.space == "l2" else faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    with atomic_stream(os.path.join(root, "image.index")) as stream:
        stream.write(faiss.serialize_index(flat).tobytes())
    return [*written, os.path.join(root, "image.index")]
