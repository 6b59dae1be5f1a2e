"""Check serialised FAISS bytes against an allow-list before FAISS ever parses them.

FAISS's reader trusts its input: a serialised IVF index may declare *on-disk* inverted lists that
name another file, which ``faiss.deserialize_index`` then opens read-write and maps shared; other
types run arbitrary-size allocations or load hooks. A store file is untrusted, so galleria walks
the byte stream itself first and accepts only the in-memory types it writes:

* flat (``IndexFlatL2`` / ``IndexFlatIP``),
* HNSW over flat storage (``IndexHNSWFlat``),
* IVF-flat and IVF-PQ with in-memory (array) inverted lists, quantised by a flat index,
* PQ (``IndexPQ``),
* ID maps (``IndexIDMap`` / ``IndexIDMap2``) of those,
* a pre-transform (``IndexPreTransform``) by linear maps (OPQ, random rotation) of those.

Every count is checked against the bytes that remain before anything would be allocated, every
float array must be finite (NaN/inf vectors are refused for every type), only the L2 and
inner-product metrics are accepted, and the stream must end exactly where the index ends.
Anything else raises ValueError naming the type that was refused.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from galleria.index._checks import all_finite

__all__ = ["ALLOWED_FAISS_TYPES", "check_faiss_bytes"]

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
_FLAT = ("IxF2", "IxFI", "IxFl")
_TRANSFORMS = {"LTra": "LinearTransform", "rrot": "RandomRotationMatrix"}
#: Nesting depth allowed (a pre-transform of an ID map of an IVF index with its quantizer is 4).
_MAX_DEPTH = 6


class _Refused(ValueError):
    """The stream holds a type outside the allow-list (or is malformed)."""


class _Reader:
    """Sequential little-endian reads over a byte buffer; every read is bounds-checked."""

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int, what: str) -> memoryview:
        if size < 0 or size > len(self.data) - self.pos:
            raise _Refused(f"{what} runs past the end of the data ({size} bytes at offset {self.pos})")
        view = memoryview(self.data)[self.pos : self.pos + size]
        self.pos += size
        return view

    def unpack(self, fmt: str, what: str) -> Any:
        layout = struct.Struct("<" + fmt)
        return layout.unpack(self.take(layout.size, what))[0]

    def fourcc(self) -> str:
        raw = bytes(self.take(4, "type code"))
        return raw.decode("latin-1")

    def count(self, item_size: int, what: str) -> int:
        """Read a vector length and check that ``length * item_size`` bytes remain."""
        length = int(self.unpack("Q", f"length of {what}"))
        if length * item_size > len(self.data) - self.pos:
            raise _Refused(f"{what} declares {length} items, more than the data holds")
        return length

    def vector(self, item_size: int, what: str) -> memoryview:
        return self.take(self.count(item_size, what) * item_size, what)

    def floats(self, what: str, *, length: int | None = None) -> np.ndarray:
        count = self.count(4, what) if length is None else length
        values = np.frombuffer(self.take(count * 4, what), dtype="<f4")
        if not all_finite(values):
            raise _Refused(f"{what} holds NaN or infinite values")
        return values


def _index_header(reader: _Reader) -> tuple[int, int]:
    dim = int(reader.unpack("i", "dimension"))
    total = int(reader.unpack("q", "ntotal"))
    reader.take(16, "header")  # two unused int64 fields
    reader.take(1, "is_trained")
    metric = int(reader.unpack("i", "metric type"))
    if metric not in (0, 1):
        raise _Refused(f"metric type {metric} (galleria reads inner product 0 and L2 1 only)")
    if not 0 < dim <= 1 << 16 or total < 0:
        raise _Refused(f"invalid dimension {dim} or row count {total}")
    return dim, total


def _flat(reader: _Reader) -> tuple[int, int]:
    dim, total = _index_header(reader)
    codes = reader.count(4, "flat vectors")  # stored as bytes: 4 per float
    if codes != total * dim:
        raise _Refused(f"flat index holds {codes} floats for {total} rows of dimension {dim}")
    reader.floats("flat vectors", length=codes)
    return dim, total


def _hnsw(reader: _Reader, depth: int) -> tuple[int, int]:
    dim, total = _index_header(reader)
    reader.vector(8, "HNSW level probabilities")
    reader.vector(4, "HNSW neighbours per level")
    reader.vector(4, "HNSW levels")
    reader.vector(8, "HNSW offsets")
    reader.vector(4, "HNSW neighbours")
    reader.take(20, "HNSW settings")  # entry point, max level, efConstruction, efSearch, unused
    kind, storage = _index(reader, depth + 1, _FLAT)
    if storage != (dim, total):
        raise _Refused(f"HNSW storage {ALLOWED_FAISS_TYPES[kind]} does not match the graph")
    return dim, total


def _product_quantizer(reader: _Reader) -> int:
    dim = int(reader.unpack("Q", "PQ dimension"))
    subquantizers = int(reader.unpack("Q", "PQ subquantizers"))
    bits = int(reader.unpack("Q", "PQ bits"))
    if not (0 < subquantizers <= dim <= 1 << 16 and 0 < bits <= 16 and dim % subquantizers == 0):
        raise _Refused(f"invalid product quantizer (d={dim}, M={subquantizers}, nbits={bits})")
    centroids = reader.floats("PQ centroids")
    if centroids.size != dim << bits:
        raise _Refused("PQ centroids do not match the quantizer's shape")
    return (subquantizers * bits + 7) // 8


def _ivf_header(reader: _Reader, depth: int) -> tuple[int, int, int]:
    dim, total = _index_header(reader)
    lists = int(reader.unpack("Q", "nlist"))
    reader.take(8, "nprobe")
    if not 0 < lists <= 1 << 24:
        raise _Refused(f"invalid number of inverted lists {lists}")
    _, quantizer = _index(reader, depth + 1, _FLAT)
    if quantizer != (dim, lists):
        raise _Refused("IVF coarse quantizer does not match the index")
    map_type = int(reader.unpack("B", "direct map type"))
    reader.vector(8, "direct map")
    if map_type == 2:
        reader.vector(16, "direct map hash table")
    elif map_type not in (0, 1):
        raise _Refused(f"unknown direct map type {map_type}")
    return dim, total, lists


def _inverted_lists(reader: _Reader, lists: int, code_size: int, total: int) -> None:
    kind = reader.fourcc()
    if kind != "ilar":
        raise _Refused(
            f"inverted lists of type {kind!r} (only in-memory array lists 'ilar' are read; on-disk or "
            "other lists would make FAISS open other files)"
        )
    if int(reader.unpack("Q", "nlist")) != lists or int(reader.unpack("Q", "code size")) != code_size:
        raise _Refused("inverted lists do not match their index")
    layout = reader.fourcc()
    sizes = np.zeros(lists, dtype=np.int64)
    if layout == "full":
        raw = np.frombuffer(reader.vector(8, "list sizes"), dtype="<u8")
        if raw.size != lists:
            raise _Refused("inverted list sizes do not match nlist")
        sizes[:] = raw.astype(np.int64)
    elif layout == "sprs":
        pairs = np.frombuffer(reader.vector(8, "sparse list sizes"), dtype="<u8").astype(np.int64)
        if pairs.size % 2 or (pairs.size and pairs[0::2].max(initial=0) >= lists):
            raise _Refused("invalid sparse inverted list sizes")
        sizes[pairs[0::2]] = pairs[1::2]
    else:
        raise _Refused(f"unknown inverted list layout {layout!r}")
    if (sizes < 0).any() or int(sizes.sum()) != total:
        raise _Refused("inverted lists do not hold the index's rows")
    for size in sizes.tolist():
        if size:
            reader.take(size * code_size, "inverted list codes")
            reader.take(size * 8, "inverted list ids")


def _ivf_flat(reader: _Reader, depth: int) -> tuple[int, int]:
    dim, total, lists = _ivf_header(reader, depth)
    start = reader.pos
    _inverted_lists(reader, lists, dim * 4, total)
    del start
    return dim, total


def _ivf_pq(reader: _Reader, depth: int) -> tuple[int, int]:
    dim, total, lists = _ivf_header(reader, depth)
    reader.take(1, "by_residual")
    code_size = int(reader.unpack("Q", "code size"))
    if code_size != _product_quantizer(reader):
        raise _Refused("IVF-PQ code size does not match its product quantizer")
    _inverted_lists(reader, lists, code_size, total)
    return dim, total


def _pq(reader: _Reader) -> tuple[int, int]:
    dim, total = _index_header(reader)
    code_size = _product_quantizer(reader)
    if reader.count(1, "PQ codes") != total * code_size:
        raise _Refused("PQ codes do not match the row count")
    reader.take(total * code_size, "PQ codes")
    reader.take(9, "PQ search settings")  # search type (int), encode signs (bool), polysemous ht (int)
    return dim, total


def _id_map(reader: _Reader, depth: int) -> tuple[int, int]:
    dim, total = _index_header(reader)
    _, inner = _index(reader, depth + 1, tuple(ALLOWED_FAISS_TYPES))
    if reader.count(8, "ID map") != total or inner != (dim, total):
        raise _Refused("ID map does not match its index")
    reader.take(total * 8, "ID map")
    return dim, total


def _pre_transform(reader: _Reader, depth: int) -> tuple[int, int]:
    dim, total = _index_header(reader)
    steps = int(reader.unpack("i", "transform count"))
    if not 0 < steps <= 4:
        raise _Refused(f"invalid number of vector transforms {steps}")
    for _ in range(steps):
        kind = reader.fourcc()
        if kind not in _TRANSFORMS:
            raise _Refused(f"vector transform {kind!r} is not one galleria reads ({sorted(_TRANSFORMS)})")
        reader.take(1, "have_bias")
        reader.floats("transform matrix")
        reader.floats("transform bias")
        reader.take(9, "transform shape")  # d_in, d_out (int), is_trained (bool)
    _, inner = _index(reader, depth + 1, tuple(k for k in ALLOWED_FAISS_TYPES if k != "IxPT"))
    if inner[1] != total:
        raise _Refused("pre-transform does not match its index")
    return dim, total


def _index(reader: _Reader, depth: int, allowed: tuple[str, ...]) -> tuple[str, tuple[int, int]]:
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
        shape = _ivf_flat(reader, depth)
    elif kind == "IwPQ":
        shape = _ivf_pq(reader, depth)
    elif kind == "IxPq":
        shape = _pq(reader)
    elif kind in ("IxMp", "IxM2"):
        shape = _id_map(reader, depth)
    else:
        shape = _pre_transform(reader, depth)
    return kind, shape


def check_faiss_bytes(data: Any, what: str, allowed: tuple[str, ...] | None = None) -> str:
    """Walk serialised FAISS bytes; return the top-level class name if galleria may deserialise them.

    Parameters
    ----------
    data : bytes or 1-D uint8 array
        What ``faiss.serialize_index`` wrote.
    what : str
        Names the data in error messages.
    allowed : tuple of str, optional
        Top-level type codes accepted (default: every type of :data:`ALLOWED_FAISS_TYPES`).

    Raises
    ------
    ValueError
        Naming the type refused, or what is malformed (counts past the end, non-finite floats,
        trailing bytes).

    Examples
    --------
    >>> import faiss, numpy as np
    >>> flat = faiss.IndexFlatL2(4)
    >>> flat.add(np.eye(4, dtype=np.float32))
    >>> check_faiss_bytes(faiss.serialize_index(flat), "example")
    'IndexFlatL2'
    """
    buffer = data if isinstance(data, bytes) else memoryview(data).cast("B")  # never a copy
    reader = _Reader(buffer)
    try:
        kind, _ = _index(reader, 0, tuple(ALLOWED_FAISS_TYPES) if allowed is None else allowed)
        if reader.pos != len(buffer):
            raise _Refused(f"{len(buffer) - reader.pos} unexpected bytes after the index")
    except _Refused as error:
        raise ValueError(f"{what}: {error}") from None
    return ALLOWED_FAISS_TYPES[kind]
