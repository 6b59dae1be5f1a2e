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
import struct
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from galleria._files import (
    atomic_path,
    atomic_stream,
    check_parquet_expansion,
    map_npy,
    open_parquet,
    open_regular_file,
    resolve_inside,
    short,
)
from galleria.index import ExternalSearchIndex
from galleria.index._faiss import deserialize
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = ["ClipRetrievalFolder", "export_clip_retrieval", "import_clip_retrieval", "read_clip_retrieval"]

_PART = re.compile(r"^img_emb_(\d{1,9})\.npy$")
_DTYPES = (np.dtype("<f2"), np.dtype("<f4"))
_PATH_COLUMNS = ("image_path", "url")
#: Galleries up to this size are rebuilt with the exact index, larger ones with IVF-PQ.
_EXACT_REBUILD = 100_000
#: The longest item path (characters) and caption (UTF-8 bytes) a metadata file may hold.
MAX_PATH = 4096
MAX_CAPTION = 64 << 10
#: A metadata file may decompress to at most this many times its size, plus :data:`EXPANSION_SLACK`.
MAX_EXPANSION = 64
EXPANSION_SLACK = 16 << 20
#: Bytes a row may take besides its path and caption in the columns read (lengths, nulls, pages).
_ROW_OVERHEAD = 64


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


def _bad_text(value: str) -> bool:
    return any(unicodedata.category(char) in ("Cc", "Cf", "Cs") for char in value)


def _check_expansion(parquet: Any, what: str, columns: list[str], size: int) -> None:
    """The decompression caps of a metadata or captions file (module docstring)."""
    check_parquet_expansion(
        parquet,
        what,
        columns,
        size,
        ratio=MAX_EXPANSION,
        slack=EXPANSION_SLACK,
        per_row=MAX_PATH * 4 * len(columns) + MAX_CAPTION + _ROW_OVERHEAD * len(columns),
    )


def _metadata_part(path: str, rows: int, part: str, use: str) -> tuple[list[str], list[str | None]]:
    """(paths, captions) of one metadata part of ``rows`` rows; ValueError naming the file and row."""
    _parquet()  # the ImportError naming the extra
    name, path = path, short(path)
    with open_regular_file(name, "metadata file") as stream:
        size = os.fstat(stream.fileno()).st_size
        parquet = open_parquet(stream, f"metadata file {path}")
        count = parquet.metadata.num_rows
        names = set(parquet.schema_arrow.names)
        if count != rows:
            first = min(count, rows)
            raise ValueError(
                f"metadata file {path} has {count} rows but {part} has {rows} embeddings "
                f"(row {first} is the first without its {'metadata' if count < rows else 'embedding'})"
            )
        wanted = [column for column in _PATH_COLUMNS if column in names]
        if use != "auto":
            wanted = [use] if use in names else []
        if not wanted:
            missing = "'image_path' (nor 'url')" if use == "auto" else repr(use)
            raise ValueError(f"metadata file {path} has no column {missing}")
        columns = wanted + (["caption"] if "caption" in names else [])
        _check_expansion(parquet, f"metadata file {path}", columns, size)
        values: dict[str, list[Any]] = {column: [] for column in columns}
        for group in range(parquet.metadata.num_row_groups):
            try:
                table = parquet.read_row_group(group, columns=columns)
            except Exception as error:  # pyarrow's own types on damaged pages
                raise ValueError(
                    f"metadata file {path}: row group {group} cannot be read: {short(str(error))}"
                ) from None
            for column in columns:
                values[column].extend(table.column(column).to_pylist())
    return _checked_rows(path, rows, wanted, values)


def _checked_rows(
    path: str, rows: int, wanted: list[str], values: dict[str, list[Any]]
) -> tuple[list[str], list[str | None]]:
    paths = []
    for row in range(rows):
        chosen = next((values[name][row] for name in wanted if values[name][row]), None)
        if not isinstance(chosen, str) or not chosen:
            raise ValueError(
                f"metadata file {path}: row {row} has no {' or '.join(wanted)} string, got {short(chosen)}"
            )
        if len(chosen) > MAX_PATH:
            raise ValueError(
                f"metadata file {path}: row {row}: the path is {len(chosen)} characters long, more "
                f"than the {MAX_PATH} allowed: {short(chosen)}"
            )
        if _bad_text(chosen):
            raise ValueError(
                f"metadata file {path}: row {row}: the path {short(chosen)} holds control characters"
            )
        paths.append(chosen)
    captions = values.get("caption", [None] * rows)
    for row, caption in enumerate(captions):
        if caption is not None and not isinstance(caption, str):
            raise ValueError(f"metadata file {path}: row {row}: the caption is not a string")
        if caption is not None and len(caption.encode("utf-8", "surrogatepass")) > MAX_CAPTION:
            raise ValueError(
                f"metadata file {path}: row {row}: the caption is longer than the {MAX_CAPTION} bytes "
                f"allowed: {short(caption)}"
            )
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


def read_clip_retrieval(folder: Any, *, use: str = "auto", follow_links: bool = False) -> ClipRetrievalFolder:
    """Read and check a clip-retrieval / autofaiss folder (module docstring); nothing is written.

    ``use``: which parquet column names an item — ``"image_path"``, ``"url"``, or ``"auto"`` (the
    image path where a row has one, else its URL). ``follow_links``: follow parts that are links
    leading out of the folder (refused otherwise).
    """
    if use not in ("auto", *_PATH_COLUMNS):
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
        found, notes = _metadata_part(
            _inside(parquet, root, follow_links, messages), part.shape[0], name, use
        )
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
    located = _index_file(root)
    if located is not None:
        _inside(located, root, follow_links, messages)
        result.index = _read_index(located, vectors.shape[0], vectors.shape[1], result.messages)
    return result


#: The side files of a store that an import replacing it removes (they describe the old store).
_SIDE_SUFFIXES = (".graph", ".map", ".files.json", ".captions.parquet")
#: The largest HNSW ``efSearch`` tried when tuning an imported HNSW index.
_MAX_EF_SEARCH = 4096


def _tune_index(index: Any, vectors: np.ndarray, say: Callable[[str], None]) -> str | None:
    """Tune the search knob of the imported faiss ``index`` (IVF ``nprobe``, HNSW ``efSearch``) to the
    recall@10 galleria's IVF-PQ meets by default, measured on a sample of the folder's own vectors
    against exact search; the label the store keeps (what was done and measured), or None when the
    index cannot be tuned to it (the caller rebuilds)."""
    import faiss

    from galleria.index._ivfpq_build import MIN_MEASURED_ROWS, SAMPLE_QUERIES, measure_recall, tune_probes
    from galleria.index._ivfpq_params import DEFAULT_RECALL_TARGET

    target = DEFAULT_RECALL_TARGET
    space = "ip" if int(index.metric_type) == faiss.METRIC_INNER_PRODUCT else "l2"
    count = vectors.shape[0]
    sample = min(count, SAMPLE_QUERIES)
    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index
    ivf = None
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:
        ivf = None
    hnsw = inner if isinstance(inner, faiss.IndexHNSW) else None
    if isinstance(inner, faiss.IndexFlat) or count < MIN_MEASURED_ROWS:
        if ivf is not None:
            ivf.nprobe = ivf.nlist  # a tiny gallery: probe every list, as galleria's IVF-PQ does
        if hnsw is not None:
            hnsw.hnsw.efSearch = max(int(hnsw.hnsw.efSearch), min(count, _MAX_EF_SEARCH))
        kind = "exact" if isinstance(inner, faiss.IndexFlat) else f"{count} vectors, every one reached"
        say(f"the folder's index ({type(inner).__name__}) is reused as it is ({kind})")
        return f"autofaiss {type(inner).__name__}"

    def search_with(setting: Callable[[int], None]) -> Callable[[np.ndarray, int, int], np.ndarray]:
        def search(queries: np.ndarray, k: int, knob: int) -> np.ndarray:
            setting(knob)
            return np.asarray(index.search(np.ascontiguousarray(queries, dtype=np.float32), k)[1])

        return search

    if ivf is not None:
        before = int(ivf.nprobe)
        recall = measure_recall(search_with(lambda knob: setattr(ivf, "nprobe", knob)), vectors, 0, space, 0)
        found = recall(before)
        probes, measured = (before, found) if found >= target else tune_probes(recall, int(ivf.nlist), target)
        ivf.nprobe = probes
        knob, old, new = "nprobe", before, probes
    elif hnsw is not None:
        before = int(hnsw.hnsw.efSearch)
        recall = measure_recall(
            search_with(lambda knob: setattr(hnsw.hnsw, "efSearch", knob)), vectors, 0, space, 0
        )
        measured, new = recall(before), before
        ef = max(16, before)
        while measured < target and ef < _MAX_EF_SEARCH:
            ef *= 2
            measured, new = recall(ef), ef
        hnsw.hnsw.efSearch = new
        knob, old = "efSearch", before
    else:
        recall = measure_recall(search_with(lambda knob: None), vectors, 0, space, 0)
        measured, knob, old, new = recall(0), "", 0, 0
    if measured < target:
        what = f" at {knob}={new}" if knob else ""
        say(
            f"the folder's index ({type(inner).__name__}) reaches recall@10 {measured:.3f} on {sample} "
            f"sampled vectors{what}, below {target}: it is rebuilt from the vectors"
        )
        return None
    change = (
        f"{knob} {old} -> {new}" if knob and new != old else (f"{knob} {new} kept" if knob else "no knob")
    )
    say(
        f"the folder's index ({type(inner).__name__}) is reused: recall@10 {measured:.3f} on {sample} "
        f"sampled vectors against exact search ({change}; target {target})"
    )
    return f"autofaiss {type(inner).__name__}, recall@10 {measured:.3f} at {change} (measured on import)"


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
        label = _tune_index(found.index, found.vectors, say)
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


def _read_captions(path: str, paths: list[str]) -> list[str | None]:
    """The captions kept beside a store, by path (checked like any metadata file: sizes bounded before
    a row group is decompressed, ``image_path`` strings, captions strings or nulls)."""
    _parquet()  # the ImportError naming the extra
    name, path = path, short(path)
    with open_regular_file(name, "captions file") as stream:
        size = os.fstat(stream.fileno()).st_size
        parquet = open_parquet(stream, f"captions file {path}")
        names = set(parquet.schema_arrow.names)
        if parquet.metadata.num_rows > len(paths) or {"image_path", "caption"} - names:
            raise ValueError(
                f"captions file {path} must have image_path and caption, at most one row per item"
            )
        _check_expansion(parquet, f"captions file {path}", ["image_path", "caption"], size)
        table = parquet.read(columns=["image_path", "caption"])
    items, texts = table.column("image_path").to_pylist(), table.column("caption").to_pylist()
    for row, (item, text) in enumerate(zip(items, texts, strict=True)):
        if not isinstance(item, str):
            raise ValueError(
                f"captions file {path}: row {row}: image_path must be a string, got "
                f"{type(item).__name__} {short(item)}"
            )
        if text is not None and not isinstance(text, str):
            raise ValueError(f"captions file {path}: row {row}: caption must be a string or null")
    kept = dict(zip(items, texts, strict=True))
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
