"""Side files are as untrusted as the store: STORE.files.json, settings files, shards and their manifest,
and the DBA record in a store's header. Each problem is a ValueError naming the file (and the key),
never a hang, a MemoryError or another exception type."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _support.extras import need
from _support.store_files import read_parts, write_sealed
from galleria import InMemoryImageEmbeddingStore
from galleria._files import load_json, read_regular_file
from galleria.cli._edits import manifest_path, parse_manifest, read_manifest
from galleria.evaluation import RetrievalConfig
from galleria.expansion import MAX_EXPANSION_ALPHA, alpha_query_expansion
from galleria.tune.settings import read_settings
from galleria.viewer.settings import SearchSettings

DEEP = "[" * 100_000 + "]" * 100_000


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def to_zero(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


# ---------------------------------------------------------------------------------------------- reading


def test_only_regular_files_are_read_and_sizes_are_bounded(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"side file .*pipe.* is a FIFO, not a regular file"):
        read_regular_file(fifo(tmp_path / "pipe"), "side file", 100)  # returns at once, no writer needed
    with pytest.raises(ValueError, match=r"is a device, not a regular file"):
        read_regular_file(to_zero(tmp_path / "zero"), "side file", 100)
    with pytest.raises(ValueError, match=r"is a folder"):
        read_regular_file(tmp_path, "side file", 100)
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(ValueError, match=r"is larger than the 100 bytes allowed \(101 bytes\)"):
        read_regular_file(tmp_path / "big", "side file", 100)
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "missing", "side file", 100)


@pytest.mark.parametrize("text", [DEEP, "{", "\xff", '{"a": ' + "9" * 5000 + "}"])
def test_untrusted_json_fails_as_one_value_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"^'f' is not valid JSON"):
        load_json(text.encode("utf-8", "surrogateescape") if text != "\xff" else b"\xff", "'f'")


# ------------------------------------------------------------------------------ STORE.files.json


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    file = tmp_path / "s.safetensors"
    InMemoryImageEmbeddingStore.from_embeddings(["/g/a.png", "/g/b.png"], np.eye(2)).save_to_disk(file)
    return file


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[]", "manifest key 'format'"),
        ('{"format": "galleria-files", "files": 3}', "manifest key 'files'"),
        ('{"format": "galleria-files", "files": {"a": [1]}}', "entry 'a' must be \\[size, mtime_ns\\]"),
        ('{"format": "galleria-files", "files": {"a": [true, 1]}}', "entry 'a'"),
        ('{"format": "galleria-files", "files": {"a": [1, 18446744073709551616]}}', "entry 'a'"),
        ('{"format": "galleria-files", "files": {"a": "x"}}', "entry 'a'"),
        (DEEP, "nested too deeply"),
    ],
)
def test_file_manifest_problems_name_the_file_and_key(store_file: Path, content: str, problem: str) -> None:
    Path(manifest_path(str(store_file))).write_text(content)
    with pytest.raises(ValueError, match=rf"s\.safetensors\.files\.json.*{problem}"):
        parse_manifest(str(store_file))


def test_file_manifest_fifo_or_device_is_ignored_at_once(
    store_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = Path(manifest_path(str(store_file)))
    fifo(target)
    assert read_manifest(str(store_file)) == {}
    assert "is a FIFO, not a regular file" in capsys.readouterr().err
    target.unlink()
    to_zero(target)
    assert read_manifest(str(store_file)) == {}
    assert "is a device" in capsys.readouterr().err
    target.unlink()
    assert read_manifest(str(store_file)) == {}  # missing: nothing to say


def test_sync_with_a_fifo_manifest_does_not_hang(tmp_path: Path) -> None:
    import subprocess
    import sys

    from _support.store_support import make_images

    images = make_images(tmp_path / "g", 4)
    file = tmp_path / "s.safetensors"
    env = {**os.environ, "TQDM_DISABLE": "1"}
    run = [sys.executable, "-m", "galleria"]
    subprocess.run(
        [*run, "build", str(tmp_path / "g"), "--out", str(file), "--embedder", "pixel:4"],
        env=env,
        check=True,
        capture_output=True,
    )
    Path(manifest_path(str(file))).unlink()
    fifo(Path(manifest_path(str(file))))
    done = subprocess.run(
        [*run, "sync", str(file), str(tmp_path / "g")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert len(images) == 4


# ---------------------------------------------------------------------------------------------- settings


def settings_file(tmp_path: Path, settings: Any) -> Path:
    file = tmp_path / "tuned.json"
    file.write_text(json.dumps({"format": "galleria-settings", "format_version": 1, "settings": settings}))
    return file


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"rerank_method": ["dba"]}, r"rerank_method must be one of .* got \['dba'\]"),
        ({"rerank_method": {"a": 1}}, r"rerank_method must be one of"),
        ({"rerank": "yes"}, r"rerank must be true or false"),
        ({"query_expansion": True, "expansion_alpha": 1e308}, r"expansion_alpha must lie in \[0, 1000\]"),
        ({"pool": 2**64}, r"pool must be at most 2\*\*63 - 1"),
        ({"k1": 9223372036854775808}, r"k1 must lie in \[1, 10000\]"),
    ],
)
def test_settings_file_values_are_one_value_error(tmp_path: Path, settings: Any, problem: str) -> None:
    file = settings_file(tmp_path, settings)
    with pytest.raises(ValueError, match=rf"settings file .*tuned\.json.*{problem}"):
        read_settings(file)


def test_settings_file_that_is_not_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"settings file .* is a FIFO"):
        read_settings(fifo(tmp_path / "pipe.json"))
    with pytest.raises(ValueError, match=r"settings file .* is a device"):
        read_settings(to_zero(tmp_path / "zero.json"))
    (tmp_path / "deep.json").write_text(DEEP)
    with pytest.raises(ValueError, match=r"deep\.json.* nested too deeply"):
        read_settings(tmp_path / "deep.json")


def test_a_settings_pool_is_validated_once_the_same_way_everywhere(tmp_path: Path) -> None:
    """A tuned pool of 5000 was used for the first page, then refused on every later request."""
    tuned = read_settings(settings_file(tmp_path, {"rerank": True, "pool": 5000}))
    assert tuned.pool == 5000  # fine for evaluation, which has no per-request bound
    message = "pool must be between 1 and 1000, got 5000"
    with pytest.raises(ValueError, match=message):
        SearchSettings(config=tuned)  # the first page
    with pytest.raises(ValueError, match=message):
        SearchSettings.from_mapping({}, tuned)  # a request that keeps the tuned pool
    with pytest.raises(ValueError, match=message):
        SearchSettings.from_mapping({"pool": "5000"})
    with pytest.raises(ValueError, match="pool must be at least k"):
        SearchSettings(k=50, config=RetrievalConfig("s", rerank=True, pool=20))
    fine = SearchSettings(config=RetrievalConfig("s", rerank=True, pool=1000))
    assert SearchSettings.from_mapping(fine.to_dict() | {"rerank": True}, fine.config).config.pool == 1000


# ---------------------------------------------------------------------------------------------- αQE bound


@pytest.mark.parametrize("alpha", [1e308, 1e39, MAX_EXPANSION_ALPHA * 1.0001, float("inf")])
def test_alpha_past_the_bound_is_refused_everywhere(alpha: float) -> None:
    store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c"], np.eye(3) + 0.1)
    calls = [
        lambda: alpha_query_expansion(np.eye(1, 3), np.eye(1, 3)[None], alpha=alpha),
        lambda: RetrievalConfig("x", query_expansion=True, expansion_alpha=alpha),
        lambda: SearchSettings.from_mapping({"expand": True, "alpha": alpha}),
        lambda: store.retrieve_by_vector(np.eye(1, 3), k=2, query_expansion=True, expansion_alpha=alpha),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"alpha must (lie in \[0, 1000\]|be a finite)"):
            call()


def test_alpha_at_the_bound_keeps_scores_meaningful() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 8))
    store = InMemoryImageEmbeddingStore.from_embeddings([f"p{i}" for i in range(50)], vectors)
    found = store.retrieve_by_vector(
        vectors[:3], k=10, query_expansion=True, expansion_alpha=MAX_EXPANSION_ALPHA
    )
    for row, query in zip(found, range(3), strict=True):
        scores = [c.score for c in row]
        assert row[0].path == f"p{query}" and scores == sorted(scores) and len(set(scores)) > 1
        assert all(np.isfinite(scores))


# ---------------------------------------------------------------------------------------------- DBA record


def _with_dba_record(header: dict[str, Any], record: dict[str, Any], old: bool) -> str:
    """Put a DBA record where a file keeps it (its slot; ``old``: the top of the header, as files
    written before the slot); the key errors name."""
    if old:
        header["augmentation"] = record
        return "augmentation"
    header.setdefault("extensions", {})["augmentation"] = record
    return "extensions.augmentation"


@pytest.mark.parametrize("old", [False, True], ids=["slot", "old-layout"])
@pytest.mark.parametrize("space", ["l2", "ip"])
def test_dba_record_on_a_store_augment_store_refuses_is_refused(
    tmp_path: Path, space: str, old: bool
) -> None:
    good = tmp_path / "good.safetensors"
    InMemoryImageEmbeddingStore.from_embeddings(["/a", "/b", "/c"], np.eye(3), space=space).save_to_disk(good)
    header, tensors = read_parts(good)
    key = _with_dba_record(header, {"method": "dba", "neighbors": 2, "alpha": 3.0}, old)
    file = write_sealed(tmp_path / "crafted.safetensors", header, tensors)
    with pytest.raises(ValueError, match=rf"crafted\.safetensors.*'{key}' records database-side"):
        InMemoryImageEmbeddingStore.load_from_disk(file)


@pytest.mark.parametrize("old", [False, True], ids=["slot", "old-layout"])
def test_dba_record_alpha_is_bounded(tmp_path: Path, old: bool) -> None:
    good = tmp_path / "good.safetensors"
    InMemoryImageEmbeddingStore.from_embeddings(["/a", "/b", "/c"], np.eye(3)).save_to_disk(good)
    header, tensors = read_parts(good)
    key = _with_dba_record(header, {"method": "dba", "neighbors": 2, "alpha": 1e300}, old)
    file = write_sealed(tmp_path / "crafted.safetensors", header, tensors)
    with pytest.raises(ValueError, match=rf"crafted\.safetensors.*header key '{key}'"):
        InMemoryImageEmbeddingStore.load_from_disk(file)
    record = {"method": "dba", "neighbors": 2, "alpha": 3.0}
    _with_dba_record(header, record, old)
    write_sealed(file, header, tensors)
    assert InMemoryImageEmbeddingStore.load_from_disk(file).augmentation == record


# ---------------------------------------------------------------------------------------------- shards


@pytest.fixture
def shards(tmp_path: Path) -> Path:
    need("pyarrow")
    from galleria.engines.shards import ShardWriter

    writer = ShardWriter(tmp_path / "shards", rows_per_shard=4)
    rng = np.random.default_rng(0)
    writer.write([f"/g/{i}.png" for i in range(10)], rng.normal(size=(10, 6)).astype(np.float32))
    writer.close(embedder=None)
    return tmp_path / "shards"


def edit_manifest(folder: Path, **changes: Any) -> None:
    name = folder / "manifest.json"
    manifest = json.loads(name.read_text())
    manifest.update(changes)
    name.write_text(json.dumps(manifest))


def test_valid_shards_load(shards: Path) -> None:
    from galleria.engines.shards import store_from_shards

    assert len(store_from_shards(shards)) == 10


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"rows": 2**40}, r"manifest key 'rows' is 1099511627776"),
        ({"rows": 2**41}, r"manifest key 'rows' must be an integer"),
        ({"rows": True}, r"manifest key 'rows' must be an integer"),
        ({"dim": True}, r"manifest key 'dim' must be an integer"),
        ({"dim": "6"}, r"manifest key 'dim'"),
        ({"dim": 10**6}, r"manifest key 'dim'"),
        ({"shards": "x"}, r"manifest key 'shards' must be a list"),
        ({"shards": [{"file": "../../etc/passwd", "rows": 10, "sha256": "0" * 64}]}, r"'shards\[0\].file'"),
        (
            {"shards": [{"file": "part-00000.parquet", "rows": "10", "sha256": "0" * 64}]},
            r"'shards\[0\].rows'",
        ),
        ({"shards": [{"file": "part-00000.parquet", "rows": 10, "sha256": 5}]}, r"'shards\[0\].sha256'"),
        ({"shards": [[]]}, r"'shards\[0\]' must be an object"),
        ({"skipped": [1]}, r"manifest key 'skipped'"),
        ({"embedder": []}, r"manifest key 'embedder'"),
        ({"extra": 1}, r"unknown manifest key"),
        ({"format_version": 99}, r"manifest key 'format_version'"),
    ],
)
def test_manifest_problems_name_the_file_and_key(shards: Path, changes: dict[str, Any], problem: str) -> None:
    from galleria.engines.shards import read_shards

    edit_manifest(shards, **changes)
    with pytest.raises(ValueError, match=rf"manifest\.json.*{problem}"):
        read_shards(shards)


def test_duplicate_shard_and_huge_row_claims(shards: Path) -> None:
    from galleria.engines.shards import read_shards

    manifest = json.loads((shards / "manifest.json").read_text())
    first = manifest["shards"][0]
    edit_manifest(shards, shards=[first, first, manifest["shards"][2]], rows=2 * first["rows"] + 2)
    with pytest.raises(ValueError, match=r"names 'part-00000.parquet' twice"):
        read_shards(shards)
    edit_manifest(shards, shards=[{**first, "rows": 2**39}], rows=2**39)
    with pytest.raises(ValueError, match=r"part-00000\.parquet.*claims 549755813888 rows"):
        read_shards(shards)


def test_fifo_or_device_shards_and_manifest_do_not_hang(shards: Path) -> None:
    from galleria.engines.shards import read_shards

    original = (shards / "manifest.json").read_bytes()
    (shards / "manifest.json").unlink()
    fifo(shards / "manifest.json")
    with pytest.raises(ValueError, match=r"manifest .* is a FIFO"):
        read_shards(shards)
    (shards / "manifest.json").unlink()
    to_zero(shards / "manifest.json")
    with pytest.raises(ValueError, match=r"manifest .* is a device"):
        read_shards(shards)
    (shards / "manifest.json").unlink()
    (shards / "manifest.json").write_bytes(original)
    (shards / "part-00001.parquet").unlink()
    fifo(shards / "part-00001.parquet")
    with pytest.raises(ValueError, match=r"shard .*part-00001\.parquet.* is a FIFO"):
        read_shards(shards)
    (shards / "part-00001.parquet").unlink()
    to_zero(shards / "part-00001.parquet")
    with pytest.raises(ValueError, match=r"shard .*part-00001\.parquet.* is a device"):
        read_shards(shards)


def test_deep_manifest_is_a_value_error(shards: Path) -> None:
    from galleria.engines.shards import read_shards

    (shards / "manifest.json").write_text(DEEP)
    with pytest.raises(ValueError, match=r"manifest\.json.* nested too deeply"):
        read_shards(shards)


def test_shard_with_wrong_column_types(shards: Path) -> None:
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from galleria.engines.shards import read_shards

    target = shards / "part-00000.parquet"
    for table in (
        pa.table(
            {
                "row": pa.array(["0", "1", "2", "3"]),
                "path": pa.array(["a"] * 4),
                "vector": pa.array([1.0] * 4),
            }
        ),
        pa.table(
            {"row": pa.array(np.arange(4)), "path": pa.array([1, 2, 3, 4]), "vector": pa.array([1.0] * 4)}
        ),
        pa.table(
            {"row": pa.array(np.arange(4)), "path": pa.array(["a"] * 4), "vector": pa.array([[1.0]] * 4)}
        ),
    ):
        pq.write_table(table, target)
        manifest = json.loads((shards / "manifest.json").read_text())
        manifest["shards"][0]["sha256"] = hashlib.sha256(target.read_bytes()).hexdigest()
        (shards / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(ValueError, match=r"part-00000\.parquet.* has columns"):
            read_shards(shards)


def test_manifest_embedder_is_checked(shards: Path) -> None:
    from galleria.engines.shards import store_from_shards

    edit_manifest(shards, embedder={"type": "pixel", "size": 4})
    with pytest.raises(ValueError, match=r"manifest key 'embedder' outputs dimension 48, but 'dim' is 6"):
        store_from_shards(shards)
    edit_manifest(shards, embedder={"type": "pixel", "size": 4096})
    with pytest.raises(ValueError, match=r"manifest key 'embedder'"):
        store_from_shards(shards)
