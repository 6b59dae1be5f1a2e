"""Extension records: one generic slot in the store file, checked by the codecs their owners register;
a record no codec reads is kept opaque and bounded, written back unchanged, used by nothing, listed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _support.store_files import OLD_RECORDS, old_layout, read_parts, write_old_layout, write_sealed
from _support.store_support import store_with_records
from galleria import InMemoryImageEmbeddingStore
from galleria.store.extensions import (
    MAX_EXTENSION_TENSORS,
    MAX_RECORD_BYTES,
    ExtensionCodec,
    ExtensionContext,
    OpaqueRecord,
    extension_codec,
    register_extension,
)

RECORD = {"version": 2, "note": "a plugin's table", "sizes": [3, 1]}


def _vectors() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(6, 4)).astype(np.float32)


def _plain(tmp_path: Path) -> Path:
    file = tmp_path / "plain.safetensors"
    InMemoryImageEmbeddingStore.from_embeddings([f"/g/{i}.png" for i in range(6)], _vectors()).save_to_disk(
        file
    )
    return file


def _with_unknown(tmp_path: Path, record: Any = RECORD, extra: dict[str, np.ndarray] | None = None) -> Path:
    """A store file holding a record of a plugin galleria does not know (its codec not registered)."""
    header, tensors = read_parts(_plain(tmp_path))
    header["extensions"] = {"plugin_table": record}
    tensors["ext/plugin_table/weights"] = np.arange(12, dtype=np.float32).reshape(6, 2) / 7
    tensors["ext/plugin_table/ids"] = np.array([5, 1, 4], dtype=np.int64)
    tensors.update(extra or {})
    return write_sealed(tmp_path / "plugin.safetensors", header, tensors)


def test_an_unknown_record_is_kept_opaque_and_written_back_unchanged(tmp_path: Path) -> None:
    assert extension_codec("plugin_table") is None
    file = _with_unknown(tmp_path)
    store = InMemoryImageEmbeddingStore.load_from_disk(file)
    held = store.extension("plugin_table")
    assert isinstance(held, OpaqueRecord) and held.record == RECORD
    plain = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "plain.safetensors")
    query = _vectors()[2] + 0.1
    assert (
        store.retrieve_by_vector(query, k=4)[0] == plain.retrieve_by_vector(query, k=4)[0]
    )  # used by nothing

    again = tmp_path / "again.safetensors"
    store.save_to_disk(again)
    (before, before_tensors), (after, after_tensors) = read_parts(file), read_parts(again)
    assert json.dumps(after["extensions"], sort_keys=True) == json.dumps(before["extensions"], sort_keys=True)
    for key in ("ext/plugin_table/weights", "ext/plugin_table/ids"):
        assert after_tensors[key].dtype == before_tensors[key].dtype
        assert after_tensors[key].tobytes() == before_tensors[key].tobytes()
        assert after["tensors"][key] == before["tensors"][key]  # the same digest: the same bytes


def test_galleria_info_lists_an_unread_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from galleria.cli import main

    file = _with_unknown(tmp_path)
    assert main(["info", str(file), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["extensions"]
    assert listed == [
        {
            "name": "plugin_table",
            "read": False,
            "record_bytes": len(json.dumps(RECORD, sort_keys=True, separators=(",", ":"))),
            "tensors": {"ids": "int64 [3]", "weights": "float32 [6, 2]"},
        }
    ]
    assert main(["info", str(file)]) == 0
    text = capsys.readouterr().out
    assert "extensions:     plugin_table (kept unread, no codec registered" in text
    assert main(["info", str(tmp_path / "plain.safetensors")]) == 0
    assert "extensions:" not in capsys.readouterr().out  # the line is there only for a file with records


def test_changed_rows_drop_an_opaque_record(tmp_path: Path) -> None:
    store = InMemoryImageEmbeddingStore.load_from_disk(_with_unknown(tmp_path))
    store.remove_images(["/g/0.png"])
    store.save_to_disk(tmp_path / "smaller.safetensors")
    header, tensors = read_parts(tmp_path / "smaller.safetensors")
    assert "extensions" not in header and not any(key.startswith("ext/") for key in tensors)


@pytest.mark.parametrize(
    ("record", "extra", "message"),
    [
        ("x" * MAX_RECORD_BYTES, None, "larger than"),
        (
            RECORD,
            {f"ext/plugin_table/t{i}": np.zeros(1, np.uint8) for i in range(MAX_EXTENSION_TENSORS)},
            "unexpected",
        ),
        (RECORD, {"ext/other/t": np.zeros(1, np.uint8)}, r"no header key 'extensions\.other'"),
        (RECORD, {"ext/Bad/t": np.zeros(1, np.uint8)}, "unexpected tensors"),
        (RECORD, {"ext/plugin_table/t": np.zeros(1, np.float16)}, "float16|dtype"),
    ],
)
def test_an_unknown_record_is_bounded(tmp_path: Path, record: Any, extra: Any, message: str) -> None:
    file = _with_unknown(tmp_path, record, extra)
    with pytest.raises(ValueError, match=message):
        InMemoryImageEmbeddingStore.load_from_disk(file)


@pytest.mark.parametrize(
    "slot",
    [[1], {"Bad": 1}, {f"r{i}": 1 for i in range(40)}],
    ids=["list", "bad-name", "too-many"],
)
def test_the_slot_itself_is_checked(tmp_path: Path, slot: Any) -> None:
    header, tensors = read_parts(_plain(tmp_path))
    header["extensions"] = slot
    file = write_sealed(tmp_path / "bad.safetensors", header, tensors)
    with pytest.raises(ValueError, match=r"bad\.safetensors.*'extensions'"):
        InMemoryImageEmbeddingStore.load_from_disk(file)


def test_a_record_both_at_the_top_and_in_the_slot_is_refused(tmp_path: Path) -> None:
    header, tensors = read_parts(_plain(tmp_path))
    record = {"method": "dba", "neighbors": 2, "alpha": 1.0}
    header["augmentation"] = record
    header["extensions"] = {"augmentation": record}
    file = write_sealed(tmp_path / "twice.safetensors", header, tensors)
    with pytest.raises(ValueError, match="also holds at its top level"):
        InMemoryImageEmbeddingStore.load_from_disk(file)


class _Counts(ExtensionCodec):
    """A plugin's codec: a record ``{"scale": float}`` and one float32 tensor of one value per row."""

    name = "test_counts"
    tensors = frozenset({"counts"})

    def check_record(self, record: Any, context: ExtensionContext) -> None:
        if not isinstance(record, dict) or set(record) != {"scale"}:
            raise context.fail("must be {'scale': number}")

    def check(self, record: Any, tensors: dict[str, np.ndarray], context: ExtensionContext) -> Any:
        counts = tensors.get("counts")
        if counts is None or counts.dtype != np.float32 or counts.shape != (context.rows,):
            raise context.fail(f"needs tensor {context.tensor('counts')!r} of one float32 per row")
        return record["scale"], counts

    def encode(self, value: Any) -> tuple[Any, dict[str, np.ndarray]]:
        return {"scale": value[0]}, {"counts": value[1]}


def test_a_registered_codec_reads_and_writes_its_record_in_the_slot(tmp_path: Path) -> None:
    register_extension(_Counts())
    header, tensors = read_parts(_plain(tmp_path))
    header["extensions"] = {"test_counts": {"scale": 2.5}}
    tensors["ext/test_counts/counts"] = np.arange(6, dtype=np.float32)
    file = write_sealed(tmp_path / "counts.safetensors", header, tensors)
    store = InMemoryImageEmbeddingStore.load_from_disk(file)
    scale, counts = store.extension("test_counts")
    assert scale == 2.5 and counts.tolist() == [0, 1, 2, 3, 4, 5]
    store.save_to_disk(tmp_path / "again.safetensors")
    again, again_tensors = read_parts(tmp_path / "again.safetensors")
    assert again["extensions"] == {"test_counts": {"scale": 2.5}}
    assert again_tensors["ext/test_counts/counts"].tolist() == counts.tolist()

    header["extensions"] = {"test_counts": {"scale": 2.5, "extra": 1}}
    with pytest.raises(ValueError, match=r"header key 'extensions\.test_counts' must be"):
        InMemoryImageEmbeddingStore.load_from_disk(write_sealed(file, header, tensors))
    header["extensions"] = {"test_counts": {"scale": 2.5}}
    tensors["ext/test_counts/counts"] = np.arange(5, dtype=np.float32)
    with pytest.raises(ValueError, match="ext/test_counts/counts"):
        InMemoryImageEmbeddingStore.load_from_disk(write_sealed(file, header, tensors))
    tensors["ext/test_counts/other"] = np.arange(6, dtype=np.float32)
    with pytest.raises(ValueError, match="unexpected tensors"):
        InMemoryImageEmbeddingStore.load_from_disk(write_sealed(file, header, tensors))


def test_a_plugin_attaches_its_record_through_the_public_method(tmp_path: Path) -> None:
    """``store.set_extension`` checks the value as a load would, a save writes it, a load reads it."""
    register_extension(_Counts())
    store = InMemoryImageEmbeddingStore.load_from_disk(_plain(tmp_path))
    store.set_extension("test_counts", (1.5, np.arange(6, dtype=np.float32)))
    scale, counts = store.extension("test_counts")
    assert scale == 1.5 and counts.tolist() == [0, 1, 2, 3, 4, 5]
    store.save_to_disk(tmp_path / "attached.safetensors")
    header, _ = read_parts(tmp_path / "attached.safetensors")
    assert header["extensions"]["test_counts"] == {"scale": 1.5}
    again = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "attached.safetensors")
    assert again.extension("test_counts")[1].tolist() == counts.tolist()

    # A value the codec refuses (one count per row) leaves the store as it was.
    with pytest.raises(
        ValueError, match=r"extension record 'test_counts' needs tensor 'ext/test_counts/counts'"
    ):
        store.set_extension("test_counts", (2.0, np.arange(5, dtype=np.float32)))
    assert store.extension("test_counts")[0] == 1.5
    with pytest.raises(TypeError, match="dtype a store file cannot hold"):
        store.set_extension("test_counts", (2.0, np.arange(6, dtype=np.float64)))
    with pytest.raises(ValueError, match="no codec is registered for the extension record 'nobody'"):
        store.set_extension("nobody", 1)
    with pytest.raises(ValueError, match="'rerank_statistics' is galleria's own"):
        store.set_extension("rerank_statistics", {})
    store.set_extension("test_counts", None)
    assert store.extension("test_counts") is None


def test_a_codec_must_agree_with_the_legacy_table() -> None:
    class Wrong(ExtensionCodec):
        name = "offline_diffusion"
        legacy_key = "offline_diffusion"
        legacy_tensors = {"diffusion_positions": "rows"}  # noqa: RUF012

    with pytest.raises(ValueError, match="LEGACY_RECORDS"):
        register_extension(Wrong())
    with pytest.raises(ValueError, match="codec name"):
        register_extension(type("Named", (ExtensionCodec,), {"name": "Bad Name"})())
    with pytest.raises(TypeError):
        register_extension(object())  # type: ignore[arg-type]


def _all_three(tmp_path: Path) -> tuple[InMemoryImageEmbeddingStore, Path]:
    file = tmp_path / "new.safetensors"
    return store_with_records(file), file


def _records(store: InMemoryImageEmbeddingStore) -> tuple[Any, ...]:
    offline = store._offline_diffusion
    assert offline is not None
    statistics = store._rerank_statistics
    return (
        store.augmentation,
        offline.params,
        offline.positions.tolist(),
        offline.values.tolist(),
        None if statistics is None else statistics.record(),
    )


def test_galleria_writes_its_own_records_in_the_slot(tmp_path: Path) -> None:
    store, file = _all_three(tmp_path)
    header, tensors = read_parts(file)
    offline = store._offline_diffusion
    assert offline is not None and store._rerank_statistics is not None
    assert header["extensions"] == {
        "augmentation": {"method": "dba", "neighbors": 2, "alpha": 1.5},
        "offline_diffusion": offline.params,
        "rerank_statistics": store._rerank_statistics.record(),
    }
    assert not set(OLD_RECORDS) & set(header)  # nothing at the top of the header any more
    assert {key for key in tensors if "diffusion" in key} == {
        "ext/offline_diffusion/positions",
        "ext/offline_diffusion/values",
    }
    assert tensors["ext/offline_diffusion/positions"].tolist() == offline.positions.tolist()
    assert _records(InMemoryImageEmbeddingStore.load_from_disk(file)) == _records(store)


def test_an_old_file_loads_the_same_and_a_save_moves_its_records_into_the_slot(tmp_path: Path) -> None:
    store, new = _all_three(tmp_path)
    old = write_old_layout(new, tmp_path / "old.safetensors")
    old_header, old_tensors = read_parts(old)
    assert set(OLD_RECORDS) <= set(old_header) and "extensions" not in old_header  # the layout of 0.2.0
    assert {"diffusion_positions", "diffusion_values"} <= set(old_tensors)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(old)
    assert _records(loaded) == _records(store)

    again = tmp_path / "again.safetensors"
    loaded.save_to_disk(again)
    (header, tensors), (fresh, fresh_tensors) = read_parts(again), read_parts(new)
    assert header == fresh  # the same header, digests included, as the store saved before
    assert not set(OLD_RECORDS) & set(header)
    assert sorted(tensors) == sorted(fresh_tensors)
    assert _records(InMemoryImageEmbeddingStore.load_from_disk(again)) == _records(store)


def test_an_old_record_no_codec_reads_moves_into_the_slot_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from galleria.store import extensions

    _, new = _all_three(tmp_path)
    old = write_old_layout(new, tmp_path / "old.safetensors")
    monkeypatch.delitem(extensions._CODECS, "offline_diffusion")  # a script that never imported rerank
    store = InMemoryImageEmbeddingStore.load_from_disk(old)
    held = store.extension("offline_diffusion")
    assert isinstance(held, OpaqueRecord) and set(held.tensors) == {"positions", "values"}
    store.save_to_disk(tmp_path / "again.safetensors")
    monkeypatch.undo()
    (header, tensors), (fresh, fresh_tensors) = read_parts(tmp_path / "again.safetensors"), read_parts(new)
    assert header["extensions"]["offline_diffusion"] == fresh["extensions"]["offline_diffusion"]
    assert "offline_diffusion" not in header
    for key in ("ext/offline_diffusion/positions", "ext/offline_diffusion/values"):
        assert tensors[key].tobytes() == fresh_tensors[key].tobytes()
        assert header["tensors"][key] == fresh["tensors"][key]


def test_a_record_in_the_slot_is_checked_as_strictly_as_an_old_one(tmp_path: Path) -> None:
    _, new = _all_three(tmp_path)
    header, tensors = read_parts(new)
    bad = tmp_path / "bad.safetensors"
    short = tensors["ext/offline_diffusion/values"][:, :4].copy()
    tensors["ext/offline_diffusion/values"] = short
    with pytest.raises(ValueError, match="'ext/offline_diffusion/values' must be float32 of shape"):
        InMemoryImageEmbeddingStore.load_from_disk(write_sealed(bad, header, tensors))
    old = write_sealed(tmp_path / "old.safetensors", *old_layout(header, tensors))
    with pytest.raises(ValueError, match="'diffusion_values' must be float32 of shape"):
        InMemoryImageEmbeddingStore.load_from_disk(old)
    # A legacy tensor beside a slot record is not where the record keeps it.
    tensors["diffusion_values"] = tensors.pop("ext/offline_diffusion/values")
    with pytest.raises(ValueError, match="not where"):
        InMemoryImageEmbeddingStore.load_from_disk(write_sealed(bad, header, tensors))
