"""Gallery paths as tensors (store format 3): the compact path table, its file checks, old files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.numpy import save_file

from _support.store_support import stored_paths
from galleria import InMemoryImageEmbeddingStore
from galleria.store import _paths
from galleria.store._paths import PathTable

DATA = Path(__file__).resolve().parents[1] / "data"

# ---------------------------------------------------------------- the table against a list and a dict

# Any str a store can hold in memory: multi-byte characters, lone surrogates (undecodable file
# names come back from os.listdir as those), NUL.
_PATH = st.text(min_size=1, max_size=12)


def _check_against_list(table: PathTable, paths: list[str], probes: list[str]) -> None:
    rows = {path: row for row, path in enumerate(paths)}  # the definition: a dict
    assert len(table) == len(paths)
    assert list(table) == paths
    assert [table[row] for row in range(len(paths))] == paths
    assert [table[-row - 1] for row in range(len(paths))] == paths[::-1]
    assert table[1:4] == paths[1:4] and table[::-2] == paths[::-2]
    for path in paths + probes:
        assert table.row(path) == rows.get(path)
        assert (path in table) == (path in rows)
    asked = paths[::-1] + probes
    np.testing.assert_array_equal(table.rows_of(asked), [rows.get(path, -1) for path in asked])
    with pytest.raises(IndexError):
        table[len(paths)]


@settings(max_examples=60, deadline=None)
@given(st.lists(_PATH, max_size=40, unique=True), st.lists(_PATH, max_size=8), st.data())
def test_table_agrees_with_a_list_and_a_dict(paths: list[str], probes: list[str], data: Any) -> None:
    table = PathTable.from_paths(paths)
    _check_against_list(table, paths, probes)
    assert table.duplicate() is None
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(paths), max_size=len(paths))), bool)
    kept = [path for path, flag in zip(paths, keep.tolist(), strict=True) if flag]
    _check_against_list(table.select(keep), kept, paths)
    added = [path for path in probes if path not in paths]
    added = list(dict.fromkeys(added))
    _check_against_list(table.extended(added), paths + added, probes)


@settings(max_examples=40, deadline=None)
@given(st.lists(_PATH, min_size=2, max_size=30))
def test_duplicates_are_found(paths: list[str]) -> None:
    table = PathTable.from_paths(paths)
    twice = [path for path in paths if paths.count(path) > 1]
    found = table.duplicate()
    assert (found is None) == (not twice)
    assert found is None or found in twice


def test_colliding_hashes_still_find_the_right_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows that share a hash are told apart byte by byte (here every hash is one of three)."""
    monkeypatch.setattr(_paths, "_hash", lambda key: len(key) % 3)
    paths = [f"p{i}" * (i % 5 + 1) for i in range(200)]
    paths = list(dict.fromkeys(paths)) + [f"q{i}" for i in range(50)]
    table = PathTable.from_paths(paths)
    _check_against_list(table, paths, ["nope", "p0p0p0p0p0p0", "q50"])
    assert table.duplicate() is None
    assert PathTable.from_paths([*paths, paths[17]]).duplicate() == paths[17]
    assert PathTable.from_paths(["ab", "cd", "ab"]).duplicate() == "ab"  # a run of three


def test_table_is_compact_and_read_only() -> None:
    count = 100_000
    table = PathTable.from_paths([f"gallery/{i:08d}.jpg" for i in range(count)])
    held = sum(array.nbytes for array in (table.data, table.offsets, table._sorted, table._order))
    assert held == count * (20 + 8 + 4 + 4) + 8  # bytes, offsets, sorted hashes, rows
    with pytest.raises(ValueError):
        table.data[0] = 0
    with pytest.raises(ValueError):
        table.offsets[0] = 1


# ---------------------------------------------------------------- a store keeps the table


def _store(rows: int = 30, kind: str = "exact") -> InMemoryImageEmbeddingStore:
    vectors = np.random.default_rng(5).normal(size=(rows, 6)).astype(np.float32)
    return InMemoryImageEmbeddingStore.from_embeddings(
        [f"/g/ü{i:03d}.png" for i in range(rows)], vectors, search_index=kind, space="l2"
    )


def test_loading_and_searching_make_no_str_per_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store()
    file = tmp_path / "s.safetensors"
    store.save_to_disk(file)

    def refuse(self: PathTable) -> Any:
        raise AssertionError("the whole path table was decoded")

    monkeypatch.setattr(PathTable, "__iter__", refuse)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    assert isinstance(loaded._paths, PathTable)
    query = store.embeddings[4]
    assert [c.path for c in loaded.retrieve_by_vector(query, k=3)[0]] == [
        c.path for c in store.retrieve_by_vector(query, k=3)[0]
    ]
    assert "/g/ü004.png" in loaded and "/g/x.png" not in loaded
    np.testing.assert_array_equal(loaded.embeddings_of(["/g/ü007.png"]), store.embeddings[7:8])
    loaded.save_to_disk(tmp_path / "again.safetensors")  # saving writes the table's arrays as they are
    monkeypatch.undo()
    assert (tmp_path / "again.safetensors").read_bytes() == file.read_bytes()


@pytest.mark.parametrize("kind", ["exact", "hnsw", "ivfpq"])
def test_mutation_of_a_loaded_store(tmp_path: Path, kind: str) -> None:
    store = _store(60, kind)
    file = tmp_path / "s.safetensors"
    store.save_to_disk(file)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    gone = ["/g/ü003.png", "/g/ü050.png"]
    loaded.remove_images(gone)
    expected = [path for path in store.paths if path not in gone]
    assert loaded.paths == expected and len(loaded) == 58
    assert "/g/ü003.png" not in loaded and loaded._rows_of(["/g/ü051.png"]).tolist() == [49]
    with pytest.raises(KeyError, match="not in the store"):
        loaded.embeddings_of(gone[:1])
    loaded.save_to_disk(file)
    again = InMemoryImageEmbeddingStore.load_from_disk(file)
    assert again.paths == expected
    np.testing.assert_array_equal(again.embeddings, loaded.embeddings)


def test_saving_a_path_no_store_file_can_hold_is_refused(tmp_path: Path) -> None:
    vectors = np.eye(3, dtype=np.float32)
    for bad in ("b\x00c", "b\udcff"):
        store = InMemoryImageEmbeddingStore.from_embeddings(["a", bad, "c"], vectors)
        with pytest.raises(ValueError, match=r"cannot be saved: path .*NUL or a character UTF-8"):
            store.save_to_disk(tmp_path / "bad.safetensors")
        assert not (tmp_path / "bad.safetensors").exists()
        assert bad in store and store.paths[1] == bad  # held in memory all the same


# ---------------------------------------------------------------- files written before format 3


@pytest.mark.parametrize("kind", ["exact", "hnsw", "ivfpq"])
def test_version_2_files_written_by_the_old_galleria_load(tmp_path: Path, kind: str) -> None:
    """tests/data/store_v2_*.safetensors were written by galleria before the paths became tensors."""
    file = DATA / f"store_v2_{kind}.safetensors"
    with safe_open(str(file), framework="numpy") as reader:
        header = json.loads(reader.metadata()["galleria"])
        assert set(reader.keys()) == {"index"}
    assert header["format_version"] == 2
    expected = [f"/gallery/café/ü{i:02d}-画像.png" for i in range(40) if i != 3]
    assert header["paths"] == expected
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    assert loaded.paths == expected and isinstance(loaded._paths, PathTable)
    assert expected[10] in loaded and "/gallery/café/ü03-画像.png" not in loaded
    queries = np.random.default_rng(1).normal(size=(5, 8)).astype(np.float32)
    before = [[(c.path, c.score) for c in row] for row in loaded.retrieve_by_vector(queries, k=5)]
    assert all(len(row) == 5 for row in before)
    loaded.save_to_disk(tmp_path / "v3.safetensors")  # written again in the current format
    again = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "v3.safetensors")
    assert again.paths == expected
    assert [[(c.path, c.score) for c in row] for row in again.retrieve_by_vector(queries, k=5)] == before
    loaded.remove_images([expected[0]])  # mutation starts from the table the old file filled
    assert loaded.paths == expected[1:]


# ---------------------------------------------------------------- hostile path tensors


def _seal(header: dict[str, Any]) -> str:
    text = json.dumps(header, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data).hexdigest()


@pytest.fixture(scope="module")
def good_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = InMemoryImageEmbeddingStore.from_embeddings(
        ["/g/a.png", "/g/é.png", "/g/c.png", "/g/dd.png"], np.eye(4, dtype=np.float32), space="l2"
    )
    file = tmp_path_factory.mktemp("paths") / "good.safetensors"
    store.save_to_disk(file)
    return file


def _resealed(good: Path, target: Path, edit: Any) -> Path:
    """``good`` with its path tensors (and header) edited by ``edit``, every digest recomputed."""
    with safe_open(str(good), framework="numpy") as reader:
        header = json.loads(reader.metadata()["galleria"])
        tensors = {key: reader.get_tensor(key) for key in reader.keys()}
    edit(header, tensors)
    header["tensors"] = {key: {"sha256": _digest(array)} for key, array in tensors.items()}
    save_file(
        tensors, str(target), metadata={"galleria": json.dumps(header), "galleria_sha256": _seal(header)}
    )
    return target


def _offsets(*values: int) -> Any:
    def edit(header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        tensors["path_offsets"] = np.array(values, dtype=np.int64)

    return edit


def _rows(*rows: bytes) -> Any:
    """Path tensors holding exactly these rows of bytes."""

    def edit(header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        tensors["path_bytes"] = np.frombuffer(b"".join(rows), dtype=np.uint8).copy()
        tensors["path_offsets"] = np.cumsum([0, *map(len, rows)], dtype=np.int64)

    return edit


def _retype(key: str, dtype: str, shape: tuple[int, ...] | None = None) -> Any:
    def edit(header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        changed = tensors[key].astype(dtype)
        tensors[key] = changed.reshape(shape) if shape else changed

    return edit


def _header(key: str, value: Any) -> Any:
    def edit(header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        header[key] = value

    return edit


def _drop(key: str) -> Any:
    def edit(header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        del tensors[key]

    return edit


# The good file's paths: "/g/a.png" (8 bytes), "/g/é.png" (9), "/g/c.png" (8), "/g/dd.png" (9).
_HOSTILE = {
    "offsets not rising": (_offsets(0, 9, 8, 25, 34), r"'path_offsets' must rise strictly"),
    "offsets past the end": (_offsets(0, 8, 17, 25, 99), r"'path_offsets' must run from 0 to the 34 bytes"),
    "offsets not from 0": (_offsets(2, 8, 17, 25, 34), r"'path_offsets' must run from 0"),
    "negative offset": (_offsets(0, -8, 17, 25, 34), r"'path_offsets' must rise strictly"),
    "an empty path": (_offsets(0, 8, 8, 25, 34), r"'path_offsets' must rise strictly"),
    "too few offsets": (
        _offsets(0, 8, 17, 34),
        r"'path_offsets' must be int64 of shape \(5,\) for the header's 4 rows",
    ),
    "too many offsets": (_offsets(0, 8, 17, 25, 30, 34), r"'path_offsets' must be int64 of shape \(5,\)"),
    "rows disagree": (
        _header("rows", 3),
        r"'path_offsets' must be int64 of shape \(4,\) for the header's 3 rows",
    ),
    "int32 offsets": (_retype("path_offsets", "<i4"), r"'path_offsets' must be int64"),
    "2-D offsets": (_retype("path_offsets", "<i8", (5, 1)), r"'path_offsets' must be int64 of shape"),
    "float bytes": (_retype("path_bytes", "<f4"), r"'path_bytes' must be 1-D uint8"),
    "bad UTF-8": (
        _rows(b"/g/a.png", b"/g/\xff.png", b"/g/c.png", b"/g/dd.png"),
        r"'path_bytes' is not valid UTF-8 \(at byte 11\)",
    ),
    "overlong UTF-8": (
        _rows(b"/g/a.png", b"\xc0\xaf", b"/g/c.png", b"/x"),
        r"'path_bytes' is not valid UTF-8",
    ),
    "encoded surrogate": (
        _rows(b"/g/a", b"\xed\xb3\xbf", b"/g/c", b"/x"),
        r"'path_bytes' is not valid UTF-8",
    ),
    "truncated character": (
        _rows(b"/g/a", b"/b", b"/c", b"/\xc3"),
        r"'path_bytes' is not valid UTF-8 \(at byte 9\)",
    ),
    "character split between paths": (_offsets(0, 8, 12, 25, 34), r"'path_offsets' splits a UTF-8 character"),
    "NUL byte": (_rows(b"/g/a.png", b"/g/\x00.png", b"/c", b"/d"), r"'path_bytes' holds a NUL byte"),
    "a path twice": (
        _rows(b"/g/a.png", b"/g/c.png", b"/g/a.png", b"/d"),
        r"'path_bytes' lists the path '/g/a.png' twice",
    ),
    "no offsets": (_drop("path_offsets"), r"lacks the tensor\(s\) \['path_offsets'\]"),
    "no bytes": (_drop("path_bytes"), r"lacks the tensor\(s\) \['path_bytes'\]"),
    "paths in the header too": (_header("paths", ["/g/a.png"] * 4), r"unknown header key\(s\) \['paths'\]"),
    "rows past the file": (_header("rows", 1 << 40), r"'rows' must be an integer in \[0, "),
}


@pytest.mark.parametrize("case", sorted(_HOSTILE))
def test_hostile_path_tensors_are_refused(good_file: Path, tmp_path: Path, case: str) -> None:
    edit, message = _HOSTILE[case]
    bad = _resealed(good_file, tmp_path / "bad.safetensors", edit)
    before = bad.read_bytes()
    with pytest.raises(ValueError, match=rf"bad\.safetensors.*{message}"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)
    assert bad.read_bytes() == before  # the file is left as it was


def test_resealed_but_unchanged_path_tensors_load(good_file: Path, tmp_path: Path) -> None:
    """The control for the cases above: the resealing itself is not what is refused."""
    same = _resealed(good_file, tmp_path / "same.safetensors", lambda header, tensors: None)
    with safe_open(str(same), framework="numpy") as reader:
        tensors = {key: reader.get_tensor(key) for key in reader.keys()}
    assert stored_paths(tensors) == ["/g/a.png", "/g/é.png", "/g/c.png", "/g/dd.png"]
    assert InMemoryImageEmbeddingStore.load_from_disk(same).paths == stored_paths(tensors)
