"""clip-retrieval / autofaiss folders opened as galleria stores, and galleria stores written as them.

The layout clip-retrieval's inference writes (``FOLDER`` or ``FOLDER/embeddings``)::

    img_emb/img_emb_{N}.npy          float16 or float32 (rows, d), one part per N (zero-padded)
    metadata/metadata_{N}.parquet    one row per embedding row: image_path, caption, url, ...
    image.index                      autofaiss's index over the parts in order (optional; also
                                     looked for in FOLDER/index/)

Everything in the folder is untrusted. ``.npy`` headers are parsed without pickle and checked (2-D,
float16/float32, one dimension for all parts, exact file size) before the data is mapped; every
parquet file must have exactly its part's row count and the path column, and every path is a
non-empty string without control characters (ValueError naming the file and the row). The index is
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
import struct
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from galleria._files import atomic_path, open_regular_file
from galleria.index import ExternalSearchIndex
from galleria.index._faiss import deserialize
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = ["ClipRetrievalFolder", "export_clip_retrieval", "import_clip_retrieval", "read_clip_retrieval"]

_PART = re.compile(r"^img_emb_(\d{1,9})\.npy$")
_DTYPES = (np.dtype("<f2"), np.dtype("<f4"))
_PATH_COLUMNS = ("image_path", "url")
#: Galleries up to this size are rebuilt with the exact index, larger ones with IVF-PQ.
_EXACT_REBUILD = 100_000
_MAX_PATH = 4096


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


def _locate(folder: str) -> tuple[str, str]:
    for base in (folder, os.path.join(folder, "embeddings")):
        if os.path.isdir(os.path.join(base, "img_emb")):
            return os.path.join(base, "img_emb"), os.path.join(base, "metadata")
    raise ValueError(f"folder {folder!r} holds no img_emb/ (nor embeddings/img_emb/) of clip-retrieval")


def _npy_part(path: str) -> np.ndarray:
    """One embeddings part, its header checked without pickle before it is mapped."""
    with open_regular_file(path, "embeddings file") as stream:
        try:
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(stream, max_header_size=4096)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(stream, max_header_size=4096)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except (ValueError, SyntaxError, struct.error) as error:
            raise ValueError(f"embeddings file {path!r} is not a valid .npy file: {error}") from None
        offset, size = stream.tell(), os.fstat(stream.fileno()).st_size
    if dtype.hasobject:
        raise ValueError(f"embeddings file {path!r} holds Python objects (pickle); refused")
    if dtype not in _DTYPES or len(shape) != 2 or shape[1] < 1:
        raise ValueError(
            f"embeddings file {path!r} must hold a 2-D float16/float32 array, got {dtype} {shape}"
        )
    if size != offset + shape[0] * shape[1] * dtype.itemsize:
        raise ValueError(f"embeddings file {path!r} is {size} bytes, not what its header {shape} says")
    array: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
    if array.shape != shape or array.dtype != dtype:
        raise ValueError(f"embeddings file {path!r} changed while it was read")
    return array


def _bad_text(value: str) -> bool:
    return any(unicodedata.category(char) in ("Cc", "Cf", "Cs") for char in value)


def _metadata_part(path: str, rows: int, part: str, use: str) -> tuple[list[str], list[str | None]]:
    """(paths, captions) of one metadata part of ``rows`` rows; ValueError naming the file and row."""
    _, pq = _parquet()
    with open_regular_file(path, "metadata file") as stream:
        try:
            parquet = pq.ParquetFile(stream)
            count = parquet.metadata.num_rows
            names = set(parquet.schema_arrow.names)
        except Exception as error:  # pyarrow raises its own types on damaged files
            raise ValueError(f"metadata file {path!r} is not a readable parquet file: {error}") from None
        if count != rows:
            first = min(count, rows)
            raise ValueError(
                f"metadata file {path!r} has {count} rows but {part} has {rows} embeddings "
                f"(row {first} is the first without its {'metadata' if count < rows else 'embedding'})"
            )
        wanted = [column for column in _PATH_COLUMNS if column in names]
        if use != "auto":
            wanted = [use] if use in names else []
        if not wanted:
            missing = "'image_path' (nor 'url')" if use == "auto" else repr(use)
            raise ValueError(f"metadata file {path!r} has no column {missing}")
        columns = wanted + (["caption"] if "caption" in names else [])
        table = parquet.read(columns=columns)
    values = {name: table.column(name).to_pylist() for name in columns}
    paths = []
    for row in range(rows):
        chosen = next((values[name][row] for name in wanted if values[name][row]), None)
        if not isinstance(chosen, str) or not chosen:
            raise ValueError(f"metadata file {path!r}: row {row} has no {' or '.join(wanted)} string")
        if len(chosen) > _MAX_PATH or _bad_text(chosen):
            raise ValueError(
                f"metadata file {path!r}: row {row}: the path {chosen!r} holds control characters"
            )
        paths.append(chosen)
    captions = values.get("caption", [None] * rows)
    for row, caption in enumerate(captions):
        if caption is not None and not isinstance(caption, str):
            raise ValueError(f"metadata file {path!r}: row {row}: the caption is not a string")
    return paths, captions


def _index_file(folder: str) -> str | None:
    for candidate in (os.path.join(folder, "image.index"), os.path.join(folder, "index", "image.index")):
        if os.path.lexists(candidate):
            return candidate
    return None


def _read_index(path: str, rows: int, dim: int, messages: list[str]) -> Any:
    """The checked faiss index in ``path``; None (with a message) if galleria's checks refuse it."""
    with open_regular_file(path, "faiss index") as stream:
        size = os.fstat(stream.fileno()).st_size
        head = stream.read(16)
        if len(head) < 16:
            raise ValueError(f"faiss index {path!r} is too short to be an index")
        (ndim,), (ntotal,) = struct.unpack("<i", head[4:8]), struct.unpack("<q", head[8:16])
        if ntotal != rows or ndim != dim:
            raise ValueError(
                f"faiss index {path!r} holds {ntotal} vectors of dimension {ndim}, but the embeddings are "
                f"{rows} of dimension {dim}; refused"
            )
        limit = rows * (dim * 4 + 1024) + (64 << 20)
        if size > limit:
            raise ValueError(f"faiss index {path!r} is {size} bytes, more than {limit} for {rows} vectors")
        data = np.empty(size, dtype=np.uint8)
        stream.seek(0)
        if stream.readinto(data.data) != size:  # type: ignore[attr-defined]
            raise ValueError(f"faiss index {path!r} changed while it was read")
    try:
        index = deserialize(data, f"faiss index {path!r}", id_limit=rows)
    except ValueError as error:
        messages.append(f"{error}; the index is rebuilt from the .npy files")
        return None
    if index.ntotal != rows or index.d != dim:  # pragma: no cover - the header said so already
        raise ValueError(f"faiss index {path!r} does not hold the {rows} embeddings; refused")
    return index


def read_clip_retrieval(folder: Any, *, use: str = "auto") -> ClipRetrievalFolder:
    """Read and check a clip-retrieval / autofaiss folder (module docstring); nothing is written.

    ``use``: which parquet column names an item — ``"image_path"``, ``"url"``, or ``"auto"`` (the
    image path where a row has one, else its URL).
    """
    if use not in ("auto", *_PATH_COLUMNS):
        raise ValueError(f"use must be 'auto', 'image_path' or 'url', got {use!r}")
    root = os.fspath(folder)
    embeddings, metadata = _locate(root)
    numbers = sorted((int(m.group(1)), name) for name in os.listdir(embeddings) if (m := _PART.match(name)))
    if not numbers:
        raise ValueError(f"folder {embeddings!r} holds no img_emb_N.npy part")
    parts: list[np.ndarray] = []
    paths: list[str] = []
    captions: list[str | None] = []
    seen: dict[str, str] = {}
    for number, name in numbers:
        part = _npy_part(os.path.join(embeddings, name))
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
        found, notes = _metadata_part(parquet, part.shape[0], name, use)
        for row, item in enumerate(found):
            if item in seen:
                raise ValueError(
                    f"metadata file {parquet!r}: row {row} repeats the path {item!r} of {seen[item]}"
                )
            seen[item] = f"part {number}, row {row}"
        parts.append(part)
        paths.extend(found)
        captions.extend(notes)
    vectors = np.concatenate([np.asarray(part, dtype=np.float32) for part in parts])
    if not np.isfinite(vectors).all():
        raise ValueError(f"folder {embeddings!r}: the embeddings must be finite")
    result = ClipRetrievalFolder(paths, vectors, captions)
    located = _index_file(root)
    if located is not None:
        result.index = _read_index(located, vectors.shape[0], vectors.shape[1], result.messages)
    return result


def import_clip_retrieval(
    folder: Any,
    out: Any = None,
    *,
    use: str = "auto",
    index: str | None = None,
    say: Callable[[str], None] = print,
) -> InMemoryImageEmbeddingStore:
    """A galleria store of a clip-retrieval folder; saved to ``out`` (with ``out.captions.parquet``) if given.

    The folder's ``image.index`` is the store's index when galleria's checks accept it; otherwise
    (or with ``index`` naming a galleria index: ``"exact"``, ``"hnsw"``, ``"ivfpq"``) the index is built
    from the vectors, in the inner-product space clip-retrieval uses. ``say`` gets each message.
    """
    found = read_clip_retrieval(folder, use=use)
    for message in found.messages:
        say(message)
    chosen: Any = index
    if chosen is None and found.index is not None:
        chosen = ExternalSearchIndex.from_faiss_index(found.index, name="autofaiss")
    elif chosen is None:
        chosen = "exact" if len(found.paths) <= _EXACT_REBUILD else "ivfpq"
    space = None if not isinstance(chosen, str) else "ip"
    store = InMemoryImageEmbeddingStore.from_embeddings(found.paths, found.vectors, None, chosen, space=space)
    if out is not None:
        store.save_to_disk(out)
        if any(caption is not None for caption in found.captions):
            _write_captions(os.fspath(out) + ".captions.parquet", found.paths, found.captions)
    return store


def _write_captions(target: str, paths: list[str], captions: list[str | None]) -> None:
    pa, pq = _parquet()
    table = pa.table({"image_path": paths, "caption": captions})
    with atomic_path(target) as temporary:
        pq.write_table(table, temporary)


def _read_captions(path: str, paths: list[str]) -> list[str | None]:
    """The captions kept beside a store, by path (checked like any metadata file)."""
    _, pq = _parquet()
    with open_regular_file(path, "captions file") as stream:
        parquet = pq.ParquetFile(stream)
        if parquet.metadata.num_rows > len(paths) or {"image_path", "caption"} - set(
            parquet.schema_arrow.names
        ):
            raise ValueError(
                f"captions file {path!r} must have image_path and caption, at most one row per item"
            )
        table = parquet.read(columns=["image_path", "caption"])
    kept = dict(zip(table.column("image_path").to_pylist(), table.column("caption").to_pylist(), strict=True))
    return [value if isinstance(value := kept.get(item), str) else None for item in paths]


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
    captions = _read_captions(os.fspath(captions_file), paths) if captions_file else [None] * len(paths)
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
        with atomic_path(target) as temporary, open(temporary, "wb") as stream:
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
    with atomic_path(os.path.join(root, "image.index")) as temporary, open(temporary, "wb") as stream:
        stream.write(faiss.serialize_index(flat).tobytes())
    return [*written, os.path.join(root, "image.index")]
