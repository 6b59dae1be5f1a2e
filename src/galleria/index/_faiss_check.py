"""Check serialised FAISS bytes against an allow-list, to the last id, before FAISS ever parses them.

FAISS's reader trusts its input: a serialised IVF index may declare *on-disk* inverted lists that
name another file, which ``faiss.deserialize_index`` then opens read-write and maps shared; other
types run arbitrary-size allocations or load hooks; and FAISS's search trusts every id and offset
it reads (an HNSW neighbour id past the end makes the search write out of bounds; an IVF direct
map entry past its list makes ``reconstruct`` read heap memory). A store file is untrusted, so
galleria walks the byte stream itself first and accepts only the in-memory types it writes:

* flat (``IndexFlatL2`` / ``IndexFlatIP``),
* HNSW over flat storage (``IndexHNSWFlat``),
* IVF-flat and IVF-PQ with in-memory (array) inverted lists, quantised by a flat index,
* PQ (``IndexPQ``),
* ID maps (``IndexIDMap`` / ``IndexIDMap2``) of those,
* a pre-transform (``IndexPreTransform``) by linear maps (OPQ, random rotation) of those.

Every count is checked against the bytes that remain before anything would be allocated, every
float array must be finite (NaN/inf vectors are refused for every type), only the L2 and
inner-product metrics are accepted, and the stream must end exactly where the index ends. The
walker does not rely on any check FAISS itself may or may not make (they differ between
versions): what it validates of HNSW graphs, IVF lists and direct maps, ID maps, PQ, linear
transforms and memory is listed in :mod:`galleria.index._faiss_rules`.

Anything else raises ValueError naming the type that was refused. Each check is a small function
of plain arrays (``check_hnsw_graph``, ``check_unique_ids``, ``check_direct_map``, ...) so a
loader that streams the bytes can call the same checks.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from galleria.index._faiss_reader import Reader as _Reader
from galleria.index._faiss_reader import Refused as _Refused
from galleria.index._faiss_reader import Shape as _Shape
from galleria.index._faiss_rules import (
    IVF_LIST_OVERHEAD,
    MAX_HNSW_EF,
    allocation_budget,
    check_direct_map,
    check_hnsw_graph,
    check_linear_transform,
    check_unique_ids,
)

__all__ = [
    "ALLOWED_FAISS_TYPES",
    "IVF_LIST_OVERHEAD",
    "PQ_SEARCH_TYPES",
    "allocation_budget",
    "check_direct_map",
    "check_faiss_bytes",
    "check_hnsw_graph",
    "check_linear_transform",
    "check_unique_ids",
]


#: FAISS type codes galleria reads, with the class each one stands for.
ALLOWED_FAISS_TYPES: dict[str, str] = {
    "IxF2": "IndexFlatL2",
    "IxFI": "IndexFlatIP",
    "IxFl": "IndexFlat",
    "IHNf": "IndexHNSWFlat",
    "IwFl": "IndexIVFFlat",
    "IwPQ": "IndexIVFPQ",
    "IxPq": "IndexPQ",
    "IxMp": "IndexIDMap",
    "IxM2": "IndexIDMap2",
    "IxPT": "IndexPreTransform",
}
#: ``IndexPQ.search_type`` values FAISS defines (ST_PQ, ST_HE, ST_generalized_HE, ST_SDC,
#: ST_polysemous, ST_polysemous_generalize); any other leaves FAISS's output arrays unwritten.
PQ_SEARCH_TYPES = frozenset(range(6))
_FLAT = ("IxF2", "IxFI", "IxFl")
_TRANSFORMS = {"LTra": "LinearTransform", "rrot": "RandomRotationMatrix"}
#: Nesting depth allowed (a pre-transform of an ID map of an IVF index with its quantizer is 4).
_MAX_DEPTH = 6


# ---------------------------------------------------------------------------------- the walk


def _index_header(reader: _Reader) -> _Shape:
    dim = int(reader.unpack("i", "dimension"))
    total = int(reader.unpack("q", "ntotal"))
    reader.take(16, "header")  # two unused int64 fields
    trained = reader.flag("is_trained")
    metric = int(reader.unpack("i", "metric type"))
    if metric not in (0, 1):
        raise _Refused(f"metric type {metric} (galleria reads inner product 0 and L2 1 only)")
    if not 0 < dim <= 1 << 16 or total < 0:
        raise _Refused(f"invalid dimension {dim} or row count {total}")
    if total and not trained:  # FAISS would refuse the first search of it
        raise _Refused(f"an index of {total} rows that is not trained")
    return _Shape(dim, total)


def _flat(reader: _Reader) -> _Shape:
    shape = _index_header(reader)
    codes = reader.count(4, "flat vectors")  # stored as bytes: 4 per float
    if codes != shape.total * shape.dim:
        raise _Refused(f"flat index holds {codes} floats for {shape.total} rows of dimension {shape.dim}")
    reader.floats("flat vectors", length=codes)
    return shape


def _hnsw(reader: _Reader, depth: int) -> _Shape:
    shape = _index_header(reader)
    probabilities = reader.array("<f8", "HNSW level probabilities")
    cumulative = reader.array("<i4", "HNSW neighbours per level")
    levels = reader.array("<i4", "HNSW levels")
    offsets = reader.array("<u8", "HNSW offsets")
    neighbours = reader.array("<i4", "HNSW neighbours")
    entry, top, construction, search, beam = struct.unpack("<5i", reader.take(20, "HNSW settings"))
    for value, name in ((construction, "efConstruction"), (search, "efSearch"), (beam, "upper_beam")):
        if not 1 <= value <= MAX_HNSW_EF:
            raise _Refused(f"HNSW {name} {value} outside [1, {MAX_HNSW_EF}]")
    try:
        check_hnsw_graph(
            probabilities=probabilities,
            cumulative=cumulative,
            levels=levels,
            offsets=offsets,
            neighbours=neighbours,
            entry_point=entry,
            max_level=top,
            total=shape.total,
        )
    except ValueError as error:
        raise _Refused(str(error)) from None
    kind, storage = _index(reader, depth + 1, _FLAT, None)
    if storage != shape:
        raise _Refused(f"HNSW storage {ALLOWED_FAISS_TYPES[kind]} does not match the graph")
    return shape


def _product_quantizer(reader: _Reader) -> tuple[int, int, int]:
    """Walk a product quantizer; return (code size, subquantizers, bits)."""
    dim = int(reader.unpack("Q", "PQ dimension"))
    subquantizers = int(reader.unpack("Q", "PQ subquantizers"))
    bits = int(reader.unpack("Q", "PQ bits"))
    if not (0 < subquantizers <= dim <= 1 << 16 and 0 < bits <= 16 and dim % subquantizers == 0):
        raise _Refused(f"invalid product quantizer (d={dim}, M={subquantizers}, nbits={bits})")
    centroids = reader.floats("PQ centroids")
    if centroids.size != dim << bits:
        raise _Refused("PQ centroids do not match the quantizer's shape")
    return (subquantizers * bits + 7) // 8, subquantizers, bits


def _ivf_header(reader: _Reader, depth: int) -> tuple[_Shape, int, int, np.ndarray]:
    """Walk an IVF header; return (shape, nlist, direct map type, direct map entries)."""
    shape = _index_header(reader)
    lists = int(reader.unpack("Q", "nlist"))
    probes = int(reader.unpack("Q", "nprobe"))
    if not 0 < lists <= 1 << 24 or not 1 <= probes <= 1 << 30:  # FAISS casts nprobe to a signed int
        raise _Refused(f"invalid number of inverted lists {lists} or nprobe {probes}")
    reader.extra += lists * IVF_LIST_OVERHEAD
    _, quantizer = _index(reader, depth + 1, _FLAT, None)
    if quantizer != _Shape(shape.dim, lists):
        raise _Refused("IVF coarse quantizer does not match the index")
    map_type = int(reader.unpack("B", "direct map type"))
    entries = reader.array("<i8", "direct map")
    if map_type == 2:
        if entries.size:
            raise _Refused("IVF hash-table direct map also lists array entries")
        entries = reader.array("<i8", "direct map hash table", length=2 * reader.count(16, "hash table"))
    elif map_type not in (0, 1):
        raise _Refused(f"unknown direct map type {map_type}")
    return shape, lists, map_type, entries


def _inverted_lists(
    reader: _Reader, lists: int, code_size: int, total: int, *, float_codes: bool = False
) -> list[np.ndarray]:
    """Walk array inverted lists; return each list's ids (codes that are vectors must be finite)."""
    kind = reader.fourcc()
    if kind != "ilar":
        raise _Refused(
            f"inverted lists of type {kind!r} (only in-memory array lists 'ilar' are read; on-disk or "
            "other lists would make FAISS open other files)"
        )
    if int(reader.unpack("Q", "nlist")) != lists or int(reader.unpack("Q", "code size")) != code_size:
        raise _Refused("inverted lists do not match their index")
    layout = reader.fourcc()
    sizes = np.zeros(lists, dtype=np.uint64)
    if layout == "full":
        raw = reader.array("<u8", "list sizes")
        if raw.size != lists:
            raise _Refused("inverted list sizes do not match nlist")
        sizes[:] = raw
    elif layout == "sprs":
        pairs = reader.array("<u8", "sparse list sizes")
        if pairs.size % 2 or (pairs.size and int(pairs[0::2].max()) >= lists):
            raise _Refused("invalid sparse inverted list sizes")
        sizes[pairs[0::2]] = pairs[1::2]
    else:
        raise _Refused(f"unknown inverted list layout {layout!r}")
    if int(sizes.max(initial=0)) > total or int(sizes.sum(dtype=np.float64)) != total:
        raise _Refused("inverted lists do not hold the index's rows")
    ids = []
    for size in sizes.tolist():
        if size:
            if float_codes:
                reader.floats("inverted list vectors", length=size * code_size // 4)
            else:
                reader.take(size * code_size, "inverted list codes")
            ids.append(reader.array("<i8", "inverted list ids", length=size))
        else:
            ids.append(np.zeros(0, dtype=np.int64))
    return ids


def _ivf_lists(
    reader: _Reader,
    shape: _Shape,
    lists: int,
    code_size: int,
    direct: tuple[int, np.ndarray],
    limit: int,
    *,
    float_codes: bool = False,
) -> None:
    list_ids = _inverted_lists(reader, lists, code_size, shape.total, float_codes=float_codes)
    try:
        check_unique_ids(list_ids, limit, "IVF inverted lists")
        check_direct_map(direct[0], direct[1], list_ids, limit)
    except ValueError as error:
        raise _Refused(str(error)) from None


def _ivf_flat(reader: _Reader, depth: int, limit: int | None) -> _Shape:
    shape, lists, map_type, entries = _ivf_header(reader, depth)
    bound = shape.total if limit is None else limit
    _ivf_lists(reader, shape, lists, shape.dim * 4, (map_type, entries), bound, float_codes=True)
    return shape


def _ivf_pq(reader: _Reader, depth: int, limit: int | None) -> _Shape:
    shape, lists, map_type, entries = _ivf_header(reader, depth)
    reader.flag("by_residual")
    code_size = int(reader.unpack("Q", "code size"))
    if code_size != _product_quantizer(reader)[0]:
        raise _Refused("IVF-PQ code size does not match its product quantizer")
    bound = shape.total if limit is None else limit
    _ivf_lists(reader, shape, lists, code_size, (map_type, entries), bound)
    return shape


def _pq(reader: _Reader) -> _Shape:
    shape = _index_header(reader)
    code_size = _product_quantizer(reader)[0]
    if reader.count(1, "PQ codes") != shape.total * code_size:
        raise _Refused("PQ codes do not match the row count")
    reader.take(shape.total * code_size, "PQ codes")
    search_type = int(reader.unpack("i", "PQ search type"))
    if search_type not in PQ_SEARCH_TYPES:
        raise _Refused(f"PQ search type {search_type} is not one FAISS knows ({sorted(PQ_SEARCH_TYPES)})")
    reader.flag("PQ encode_signs")
    reader.take(4, "PQ polysemous_ht")
    return shape


def _id_map(reader: _Reader, depth: int, limit: int | None) -> _Shape:
    shape = _index_header(reader)
    _, inner = _index(reader, depth + 1, tuple(ALLOWED_FAISS_TYPES), None)
    if reader.count(8, "ID map") != shape.total or inner != shape:
        raise _Refused("ID map does not match its index")
    ids = reader.array("<i8", "ID map", length=shape.total)
    try:
        check_unique_ids(ids, shape.total if limit is None else limit, "ID map")
    except ValueError as error:
        raise _Refused(str(error)) from None
    return shape


def _transform(reader: _Reader) -> tuple[int, int]:
    """Walk one vector transform; return (d_in, d_out)."""
    kind = reader.fourcc()
    if kind not in _TRANSFORMS:
        raise _Refused(f"vector transform {kind!r} is not one galleria reads ({sorted(_TRANSFORMS)})")
    have_bias = reader.flag("have_bias")
    matrix = reader.floats("transform matrix")
    bias = reader.floats("transform bias")
    d_in, d_out = struct.unpack("<2i", reader.take(8, "transform shape"))
    trained = reader.flag("transform is_trained")
    try:
        check_linear_transform(matrix.size, bias.size, have_bias, d_in, d_out, trained)
    except ValueError as error:
        raise _Refused(str(error)) from None
    return d_in, d_out


def _pre_transform(reader: _Reader, depth: int, limit: int | None) -> _Shape:
    shape = _index_header(reader)
    steps = int(reader.unpack("i", "transform count"))
    if not 0 < steps <= 4:
        raise _Refused(f"invalid number of vector transforms {steps}")
    width = shape.dim
    for _ in range(steps):
        d_in, d_out = _transform(reader)
        if d_in != width:
            raise _Refused(f"vector transform takes dimension {d_in}, but receives {width}")
        width = d_out
    allowed = tuple(k for k in ALLOWED_FAISS_TYPES if k != "IxPT")
    _, inner = _index(reader, depth + 1, allowed, shape.total if limit is None else limit)
    if inner.total != shape.total or inner.dim != width:
        raise _Refused("pre-transform does not match its index (rows or dimension)")
    return shape


def _index(reader: _Reader, depth: int, allowed: tuple[str, ...], limit: int | None) -> tuple[str, _Shape]:
    """Walk one index; ``limit`` bounds the labels it may return (None: its own row count)."""
    if depth > _MAX_DEPTH:
        raise _Refused("indexes nested too deeply")
    kind = reader.fourcc()
    if kind not in allowed:
        printable = kind if kind.isprintable() else kind.encode("latin-1").hex()
        where = "" if depth == 0 else " inside another index"
        raise _Refused(
            f"faiss index type {printable!r}{where} is not one galleria reads; allowed: "
            + ", ".join(f"{ALLOWED_FAISS_TYPES[k]} ({k})" for k in allowed)
        )
    if kind in _FLAT:
        shape = _flat(reader)
    elif kind == "IHNf":
        shape = _hnsw(reader, depth)
    elif kind == "IwFl":
        shape = _ivf_flat(reader, depth, limit)
    elif kind == "IwPQ":
        shape = _ivf_pq(reader, depth, limit)
    elif kind == "IxPq":
        shape = _pq(reader)
    elif kind in ("IxMp", "IxM2"):
        shape = _id_map(reader, depth, limit)
    else:
        shape = _pre_transform(reader, depth, limit)
    return kind, shape


def _as_view(data: Any) -> memoryview:
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise ValueError(f"faiss bytes must be a 1-D uint8 array, got {data.dtype} of shape {data.shape}")
        data = np.ascontiguousarray(data)
    return memoryview(data).cast("B")


def check_faiss_bytes(
    data: Any, what: str, allowed: tuple[str, ...] | None = None, *, id_limit: int | None = None
) -> str:
    """Walk serialised FAISS bytes; return the top-level class name if galleria may deserialise them.

    Parameters
    ----------
    data : bytes, bytearray, memoryview or 1-D uint8 array
        What ``faiss.serialize_index`` wrote (read in place, not copied).
    what : str
        Names the data in error messages.
    allowed : tuple of str, optional
        Top-level type codes accepted (default: every type of :data:`ALLOWED_FAISS_TYPES`).
    id_limit : int, optional
        Labels the index may return lie in ``[0, id_limit)`` (default: its row count). An index
        that keeps removed ids masked passes its total of ids ever added.

    Raises
    ------
    ValueError
        Naming the type refused, or what is malformed (counts past the end, non-finite floats,
        ids or offsets out of range, trailing bytes, allocations past :func:`allocation_budget`).

    Examples
    --------
    >>> import faiss, numpy as np
    >>> flat = faiss.IndexFlatL2(4)
    >>> flat.add(np.eye(4, dtype=np.float32))
    >>> check_faiss_bytes(faiss.serialize_index(flat), "example")
    'IndexFlatL2'
    """
    reader = _Reader(_as_view(data))
    try:
        kind, _ = _index(reader, 0, tuple(ALLOWED_FAISS_TYPES) if allowed is None else allowed, id_limit)
        if reader.pos != reader.size:
            raise _Refused(f"{reader.size - reader.pos} unexpected bytes after the index")
        budget = allocation_budget(reader.size)
        if reader.extra > budget:
            raise _Refused(
                f"the index would allocate {reader.extra} bytes beyond its own {reader.size} "
                f"(at most {budget}: 256 MiB or 4 times the file's size)"
            )
    except _Refused as error:
        raise ValueError(f"{what}: {error}") from None
    return ALLOWED_FAISS_TYPES[kind]
