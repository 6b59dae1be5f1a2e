"""galleria's own walk of FAISS bytes checks every id, offset and size: these tests call the walker
directly on crafted streams (valid indexes serialised by faiss, then patched at computed offsets),
so they fail if galleria ever relies on faiss's own checks, which differ between versions."""

from __future__ import annotations

import struct
from collections.abc import Callable

import faiss
import numpy as np
import pytest

from galleria.index import _faiss
from galleria.index._faiss_check import check_faiss_bytes
from galleria.index._faiss_rules import (
    IVF_LIST_OVERHEAD,
    allocation_budget,
    check_direct_map,
    check_hnsw_graph,
    check_linear_transform,
    check_unique_ids,
    precomputed_table_bytes,
)

HEADER = 4 + 4 + 8 + 16 + 1 + 4  # fourcc, d, ntotal, two unused, is_trained, metric


def vectors(count: int, dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(count, dim)).astype(np.float32)


def walk_vector(data: bytes, at: int, item: int) -> tuple[int, int, int]:
    """(start of the items, their count, position after) of a length-prefixed vector at ``at``."""
    (count,) = struct.unpack_from("<Q", data, at)
    return at + 8, count, at + 8 + count * item


def put(data: bytes, at: int, fmt: str, value: int) -> bytes:
    patched = bytearray(data)
    struct.pack_into("<" + fmt, patched, at, value)
    return bytes(patched)


def refused(data: bytes, match: str, **kwargs: int) -> None:
    with pytest.raises(ValueError, match=match):
        check_faiss_bytes(data, "crafted", **kwargs)


# ---------------------------------------------------------------------------------------------- HNSW


class HnswLayout:
    """Offsets of every field of a serialised top-level ``IndexHNSWFlat``."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        assert data[:4] == b"IHNf"
        (self.total,) = struct.unpack_from("<q", data, 8)
        position = HEADER
        self.fields: dict[str, tuple[int, int]] = {}
        for name, item in (
            ("probas", 8),
            ("cumulative", 4),
            ("levels", 4),
            ("offsets", 8),
            ("neighbours", 4),
        ):
            start, count, position = walk_vector(data, position, item)
            self.fields[name] = (start, count)
        self.settings = position  # entry point, max level, efConstruction, efSearch, upper_beam

    def array(self, name: str) -> np.ndarray:
        start, count = self.fields[name]
        dtype = {"probas": "<f8", "offsets": "<u8"}.get(name, "<i4")
        return np.frombuffer(self.data, dtype=dtype, count=count, offset=start)

    def set(self, name: str, index: int, value: int) -> bytes:
        start, _ = self.fields[name]
        fmt, size = ("Q", 8) if name == "offsets" else ("i", 4)
        return put(self.data, start + index * size, fmt, value)

    def setting(self, slot: int, value: int) -> bytes:
        return put(self.data, self.settings + 4 * slot, "i", value)


@pytest.fixture(scope="module")
def hnsw() -> HnswLayout:
    index = faiss.IndexHNSWFlat(8, 4)
    index.add(vectors(300, 8))
    layout = HnswLayout(faiss.serialize_index(index).tobytes())
    assert check_faiss_bytes(layout.data, "good") == "IndexHNSWFlat"
    return layout


@pytest.mark.parametrize("value", ["ntotal", 10**6, 2**31 - 1, -2, -(2**31)])
def test_hnsw_neighbour_ids_out_of_range(hnsw: HnswLayout, value: object) -> None:
    bad = hnsw.total if value == "ntotal" else int(value)  # type: ignore[call-overload]
    for slot in (0, hnsw.fields["neighbours"][1] - 1):
        refused(hnsw.set("neighbours", slot, bad), r"crafted: HNSW neighbour ids must lie in \[-1, 300\)")


@pytest.mark.parametrize("entry", [10**6, 300, -5, -1])
def test_hnsw_entry_point_out_of_range(hnsw: HnswLayout, entry: int) -> None:
    refused(hnsw.setting(0, entry), r"HNSW entry point .* not a node on the top level")


def test_hnsw_entry_point_below_the_top_level(hnsw: HnswLayout) -> None:
    levels = hnsw.array("levels")
    low = int(np.flatnonzero(levels == 1)[0])
    refused(hnsw.setting(0, low), r"entry point .* top level")


@pytest.mark.parametrize("level", [1000, 0, -1, 2**31 - 1])
def test_hnsw_max_level_inconsistent(hnsw: HnswLayout, level: int) -> None:
    refused(hnsw.setting(1, level), r"HNSW max level")


@pytest.mark.parametrize("slot", [2, 3, 4])
@pytest.mark.parametrize("value", [0, 2**31 - 1, -7])
def test_hnsw_search_settings_bounded(hnsw: HnswLayout, slot: int, value: int) -> None:
    refused(hnsw.setting(slot, value), r"HNSW (efConstruction|efSearch|upper_beam)")


@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("value", [1 << 40, 2**64 - 1, 1])
def test_hnsw_offsets_huge_or_not_monotone(hnsw: HnswLayout, where: str, value: int) -> None:
    count = hnsw.fields["offsets"][1]
    index = {"first": 0, "middle": count // 2, "last": count - 1}[where]
    refused(hnsw.set("offsets", index, value), r"HNSW offsets")


def test_hnsw_levels_out_of_range(hnsw: HnswLayout) -> None:
    for value in (0, -1, 1000, 2):  # a node raised one level without the slots for it
        node = int(np.flatnonzero(hnsw.array("levels") == 1)[0])
        refused(hnsw.set("levels", node, value), r"HNSW (node levels|offsets)")


def test_hnsw_cumulative_counts_tampered(hnsw: HnswLayout) -> None:
    refused(hnsw.set("cumulative", 0, 3), r"neighbours per level")
    refused(hnsw.set("cumulative", 2, 1), r"neighbours per level|offsets")
    refused(hnsw.set("cumulative", hnsw.fields["cumulative"][1] - 1, 1 << 30), r"neighbours per level")


def test_hnsw_upper_layer_neighbour_must_reach_the_layer(hnsw: HnswLayout) -> None:
    levels = hnsw.array("levels").astype(np.int64)
    cumulative = hnsw.array("cumulative").astype(np.int64)
    offsets = hnsw.array("offsets").astype(np.int64)
    upper = int(np.flatnonzero(levels >= 2)[0])
    ground = int(np.flatnonzero(levels == 1)[-1])  # read past its own slots on layer 1
    slot = int(offsets[upper] + cumulative[1])
    refused(hnsw.set("neighbours", slot, ground), r"neighbour on layer 1 that does not reach that layer")


def test_hnsw_probability_count_must_match_layers(hnsw: HnswLayout) -> None:
    start, count = hnsw.fields["probas"]
    refused(put(hnsw.data, start, "d", float("nan")), r"probabilities")  # type: ignore[arg-type]
    assert count == hnsw.fields["cumulative"][1] - 1


def test_empty_hnsw_is_accepted_and_checked() -> None:
    index = faiss.IndexHNSWFlat(4, 4)
    data = faiss.serialize_index(index).tobytes()
    assert check_faiss_bytes(data, "empty") == "IndexHNSWFlat"
    layout = HnswLayout(data)
    refused(layout.setting(0, 0), r"empty HNSW")


def test_hnsw_graph_checker_accepts_what_faiss_builds() -> None:
    for count, links in ((1, 2), (50, 4), (700, 16)):
        index = faiss.IndexHNSWFlat(6, links)
        index.add(vectors(count, 6, seed=count))
        graph = index.hnsw
        check_hnsw_graph(
            probabilities=faiss.vector_to_array(graph.assign_probas),
            cumulative=faiss.vector_to_array(graph.cum_nneighbor_per_level),
            levels=faiss.vector_to_array(graph.levels),
            offsets=faiss.vector_to_array(graph.offsets),
            neighbours=faiss.vector_to_array(graph.neighbors),
            entry_point=int(graph.entry_point),
            max_level=int(graph.max_level),
            total=count,
        )


# ---------------------------------------------------------------------------------------------- IVF


class IvfLayout:
    """Offsets of a serialised top-level ``IndexIVFFlat`` (flat quantizer) with a direct map."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        (self.dim,) = struct.unpack_from("<i", data, 4)
        (self.total,) = struct.unpack_from("<q", data, 8)
        (self.lists,) = struct.unpack_from("<Q", data, HEADER)
        quantizer = HEADER + 16
        _, _, after = walk_vector(data, quantizer + HEADER, 4)
        self.map_type_at = after
        self.map_at, self.map_count, after = walk_vector(data, after + 1, 8)
        if data[self.map_type_at] == 2:
            self.map_at, pairs, after = walk_vector(data, after, 16)
            self.map_count = 2 * pairs
        assert data[after : after + 4] == b"ilar"
        after += 4 + 16
        assert data[after : after + 4] == b"full"
        sizes_at, _, after = walk_vector(data, after + 4, 8)
        self.sizes = np.frombuffer(data, dtype="<u8", count=self.lists, offset=sizes_at)
        self.ids_at: list[int] = []
        for size in self.sizes.tolist():
            after += size * self.dim * 4
            self.ids_at.append(after)
            after += size * 8

    def first_id_at(self) -> int:
        return self.ids_at[int(np.flatnonzero(self.sizes)[0])]


def ivf_bytes(map_type: int, ids: np.ndarray | None = None) -> bytes:
    data = vectors(320, 4, seed=3)
    index = faiss.IndexIVFFlat(faiss.IndexFlatL2(4), 4, 8)
    index.train(data)
    if ids is None:
        index.add(data)
    else:
        index.add_with_ids(data, ids)
    if map_type:
        index.set_direct_map_type(map_type)
    return faiss.serialize_index(index).tobytes()


@pytest.mark.parametrize("map_type", [0, 1, 2])
def test_valid_ivf_with_every_direct_map_passes(map_type: int) -> None:
    assert check_faiss_bytes(ivf_bytes(map_type), "good") == "IndexIVFFlat"


@pytest.mark.parametrize("value", [8 << 32, (1 << 32) | 10**6, -2, 2**63 - 1, (3 << 32) | 1])
def test_ivf_array_direct_map_entries_out_of_range(value: int) -> None:
    layout = IvfLayout(ivf_bytes(1))
    for entry in (0, layout.map_count - 1):
        refused(put(layout.data, layout.map_at + 8 * entry, "q", value), r"IVF direct map")


def test_ivf_hash_table_direct_map_tampered() -> None:
    layout = IvfLayout(ivf_bytes(2))
    refused(put(layout.data, layout.map_at + 8, "q", 8 << 32), r"IVF direct map names an inverted list")
    refused(put(layout.data, layout.map_at + 8, "q", 10**6), r"IVF direct map points past|other ids")
    refused(put(layout.data, layout.map_at, "q", 10**6), r"IVF direct map points at list slots")
    first_key = struct.unpack_from("<q", layout.data, layout.map_at)[0]
    refused(put(layout.data, layout.map_at + 16, "q", first_key), r"IVF direct map lists an id twice")


def test_ivf_array_direct_map_entry_pointing_at_another_id() -> None:
    layout = IvfLayout(ivf_bytes(1))
    entries = np.frombuffer(layout.data, dtype="<i8", count=layout.map_count, offset=layout.map_at)
    refused(put(layout.data, layout.map_at, "q", int(entries[1])), r"slots that hold other ids")


@pytest.mark.parametrize("value", [320, 10**6, -1, -(2**40)])
def test_ivf_list_ids_out_of_range(value: int) -> None:
    layout = IvfLayout(ivf_bytes(0))
    refused(put(layout.data, layout.first_id_at(), "q", value), r"IVF inverted lists holds id")


def test_ivf_duplicate_list_ids() -> None:
    layout = IvfLayout(ivf_bytes(0))
    other = struct.unpack_from("<q", layout.data, layout.ids_at[int(np.flatnonzero(layout.sizes)[-1])])[0]
    refused(put(layout.data, layout.first_id_at(), "q", other), r"holds an id twice")


def test_ivf_ids_may_reach_the_callers_limit() -> None:
    """galleria's IVF-PQ keeps removed ids masked: its labels reach the total of ids ever added."""
    data = ivf_bytes(0, ids=np.arange(320, dtype=np.int64) * 2)
    refused(data, r"outside \[0, 320\)")
    assert check_faiss_bytes(data, "masked", id_limit=639) == "IndexIVFFlat"
    refused(data, r"outside \[0, 638\)", id_limit=638)


def test_ivf_nprobe_and_list_count_bounded() -> None:
    data = ivf_bytes(0)
    refused(put(data, HEADER + 8, "Q", 0), r"nprobe")
    refused(put(data, HEADER + 8, "Q", 1 << 63), r"nprobe")  # found by the corpus: negative in FAISS
    assert check_faiss_bytes(put(data, HEADER + 8, "Q", 1 << 30), "wide") == "IndexIVFFlat"
    refused(put(data, HEADER, "Q", 0), r"inverted lists")
    refused(put(data, HEADER, "Q", 1 << 30), r"inverted lists")


def crafted_ivf(lists: int, *, dim: int = 1) -> bytes:
    """An empty trained IVF-flat with ``lists`` lists of dimension ``dim``, in sparse layout, by hand."""

    def header(kind: bytes, total: int) -> bytes:
        return kind + struct.pack("<iqqqBi", dim, total, 0, 0, 1, 1)

    centroids = np.arange(lists * dim, dtype="<f4")
    quantizer = header(b"IxF2", lists) + struct.pack("<Q", centroids.size) + centroids.tobytes()
    return (
        header(b"IwFl", 0)
        + struct.pack("<QQ", lists, 1)
        + quantizer
        + struct.pack("<BQ", 0, 0)
        + b"ilar"
        + struct.pack("<QQ", lists, 4 * dim)
        + b"sprs"
        + struct.pack("<Q", 0)
    )


def test_the_file_does_not_choose_memory_through_list_counts() -> None:
    small = crafted_ivf(16)
    assert check_faiss_bytes(small, "small") == "IndexIVFFlat"
    assert faiss.deserialize_index(np.frombuffer(small, dtype=np.uint8)).nlist == 16
    lists = 3 << 19  # 1.5 M lists of dimension 1: a 6 MB file that would cost 400 MB of list bookkeeping
    big = crafted_ivf(lists)
    assert lists * IVF_LIST_OVERHEAD > allocation_budget(len(big))
    refused(big, r"would allocate .* bytes beyond its own")


def test_precomputed_table_is_built_only_within_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    data = vectors(600, 8, seed=5)
    index = faiss.IndexIVFPQ(faiss.IndexFlatL2(8), 8, 4, 2, 4)
    index.train(data)
    index.add(data)
    raw = faiss.serialize_index(index)
    expected = precomputed_table_bytes(4, 2, 4)
    loaded = _faiss.deserialize(raw, "test")
    assert loaded.precomputed_table.size() == 0  # never built by the reader
    monkeypatch.setattr(_faiss, "allocation_budget", lambda size: expected - 1)
    _faiss.restore_precomputed_table(loaded, raw.size)
    assert loaded.precomputed_table.size() == 0
    monkeypatch.undo()
    _faiss.restore_precomputed_table(loaded, raw.size)
    assert loaded.precomputed_table.size() * 4 == expected
    query = data[:5]
    assert np.array_equal(loaded.search(query, 3)[1], index.search(query, 3)[1])


# ---------------------------------------------------------------------------------------------- ID maps


def id_map_bytes(
    ids: np.ndarray, *, wrap: bool = False, kind: Callable[..., object] = faiss.IndexIDMap
) -> bytes:
    index = kind(faiss.IndexFlatL2(4))
    index.add_with_ids(vectors(ids.size, 4, seed=7), ids)  # type: ignore[attr-defined]
    if wrap:
        rotation = faiss.RandomRotationMatrix(4, 4)
        rotation.init(1)
        index = faiss.IndexPreTransform(rotation, index)
    return faiss.serialize_index(index).tobytes()


def id_map_ids_at(data: bytes, count: int) -> int:
    return len(data) - 8 * count


@pytest.mark.parametrize("wrap", [False, True])
@pytest.mark.parametrize("kind", [faiss.IndexIDMap, faiss.IndexIDMap2])
def test_id_map_ids_in_range_and_unique(wrap: bool, kind: Callable[..., object]) -> None:
    good = id_map_bytes(np.arange(10, dtype=np.int64)[::-1].copy(), wrap=wrap, kind=kind)
    assert check_faiss_bytes(good, "good") in ("IndexIDMap", "IndexIDMap2", "IndexPreTransform")
    for ids, problem in (
        (np.arange(10) + 1, r"ID map holds id 10, outside \[0, 10\)"),
        (np.arange(10) * 1000, r"outside \[0, 10\)"),
        (np.array([-2, *range(1, 10)]), r"ID map holds id -2"),
        (np.array([0, 1, 2, 2, 2, 5, 6, 7, 8, 9]), r"ID map holds an id twice"),
    ):
        refused(id_map_bytes(ids.astype(np.int64), wrap=wrap, kind=kind), problem)


# ---------------------------------------------------------------------------------------------- PQ


@pytest.mark.parametrize("search_type", [6, 99, -1, 2**31 - 1])
def test_pq_search_type_must_be_known(search_type: int) -> None:
    index = faiss.IndexPQ(8, 2, 4)
    index.train(vectors(256, 8))
    index.add(vectors(20, 8, seed=1))
    data = faiss.serialize_index(index).tobytes()
    at = len(data) - 9  # search type (int), encode signs (bool), polysemous ht (int)
    assert check_faiss_bytes(put(data, at, "i", 3), "sdc") == "IndexPQ"
    refused(put(data, at, "i", search_type), r"PQ search type")


# ---------------------------------------------------------------------------------------------- transforms


def pretransform_bytes() -> tuple[bytes, int]:
    """An OPQ-rotated IVF-PQ and the offset of its LinearTransform's fields (after 'LTra')."""
    index = faiss.index_factory(8, "OPQ2,IVF4,PQ2x4")
    index.train(vectors(400, 8, seed=9))
    data = faiss.serialize_index(index).tobytes()
    at = data.index(b"LTra") + 4
    return data, at


def test_linear_transform_sizes_and_bias() -> None:
    data, at = pretransform_bytes()
    assert check_faiss_bytes(data, "good") == "IndexPreTransform"
    matrix_at = at + 1
    (matrix,) = struct.unpack_from("<Q", data, matrix_at)
    bias_at = matrix_at + 8 + 4 * matrix
    shape_at = bias_at + 8 + 4 * struct.unpack_from("<Q", data, bias_at)[0]
    refused(put(data, at, "B", 1), r"bias has 0 entries")  # bias declared but absent
    refused(put(data, at, "B", 7), r"have_bias must be 0 or 1")
    refused(put(data, shape_at, "i", 4), r"matrix has 64 entries for 4 → 8")
    refused(put(data, shape_at + 4, "i", 4), r"matrix has 64 entries for 8 → 4")
    refused(put(data, shape_at + 8, "B", 0), r"not trained")


def test_transform_chain_must_fit_the_dimensions() -> None:
    rotation = faiss.RandomRotationMatrix(8, 4)
    rotation.init(3)
    inner = faiss.IndexFlatL2(4)
    index = faiss.IndexPreTransform(rotation, inner)
    index.add(vectors(5, 8))
    data = faiss.serialize_index(index).tobytes()
    assert check_faiss_bytes(data, "good") == "IndexPreTransform"
    refused(put(data, 4, "i", 6), r"takes dimension 8, but receives 6")


def test_checker_functions_directly() -> None:
    check_unique_ids(np.array([2, 0, 1]), 3, "ids")
    with pytest.raises(ValueError, match="outside"):
        check_unique_ids(np.array([3]), 3, "ids")
    check_direct_map(1, np.array([0, 1 << 32], dtype=np.int64), [np.array([0]), np.array([1])], 2)
    with pytest.raises(ValueError, match="past the end"):
        check_direct_map(1, np.array([1, 1 << 32], dtype=np.int64), [np.array([0]), np.array([1])], 2)
    check_linear_transform(6, 3, True, 2, 3, True)
    check_linear_transform(6, 0, False, 2, 3, True)
    with pytest.raises(ValueError, match="bias"):
        check_linear_transform(6, 2, True, 2, 3, True)


def test_ivf_flat_list_vectors_must_be_finite() -> None:
    """Found by the attack corpus: an IVF-flat list vector patched to NaN loaded and came back as NaN."""
    layout = IvfLayout(ivf_bytes(0))
    first_list = int(np.flatnonzero(layout.sizes)[0])
    codes_at = layout.ids_at[first_list] - int(layout.sizes[first_list]) * layout.dim * 4
    for value in (0x7FC00000, 0x7F800000):  # NaN, +inf as float32 bits
        refused(put(layout.data, codes_at, "I", value), r"inverted list vectors holds NaN or infinite")


def test_an_untrained_index_with_rows_is_refused() -> None:
    """Found by the attack corpus: is_trained patched to 0 loaded, then every search raised RuntimeError."""
    index = faiss.IndexPQ(8, 2, 4)
    index.train(vectors(256, 8))
    index.add(vectors(20, 8, seed=1))
    data = faiss.serialize_index(index).tobytes()
    refused(put(data, HEADER - 5, "B", 0), r"an index of 20 rows that is not trained")
    empty = faiss.serialize_index(faiss.IndexPQ(8, 2, 4)).tobytes()
    assert check_faiss_bytes(empty, "untrained, empty") == "IndexPQ"
