"""clip-retrieval / autofaiss folders as stores: a folder laid out as clip-retrieval's inference writes
it (img_emb/img_emb_N.npy, metadata/metadata_N.parquet with image_path, caption and metadata columns,
autofaiss's image.index), imported, searched, exported and imported again; untrusted input refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import faiss
import numpy as np
import pytest

from _support.extras import need

pa = need("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from galleria import InMemoryImageEmbeddingStore  # noqa: E402
from galleria.cli import main  # noqa: E402
from galleria.cli.sync import plan_sync  # noqa: E402
from galleria.store.clip_retrieval import (  # noqa: E402
    export_clip_retrieval,
    import_clip_retrieval,
    read_clip_retrieval,
)

DIM = 16
PARTS = (7, 5, 6)


def unit(rows: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(rows, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def write_folder(
    root: Path,
    *,
    dtype: str = "float16",
    urls_only: bool = False,
    index: str | None = "IVF2,Flat",
    index_rows: int | None = None,
) -> tuple[np.ndarray, list[str], list[str]]:
    """clip-retrieval's layout: zero-padded part numbers, a parquet per part, captions, metadata columns
    from the webdataset json (url, width, height, key), and autofaiss's index in index/image.index."""
    (root / "img_emb").mkdir(parents=True)
    (root / "text_emb").mkdir()
    (root / "metadata").mkdir()
    vectors, paths, captions = [], [], []
    start = 0
    for number, rows in enumerate(PARTS):
        tag = str(number).zfill(len(str(len(PARTS))))
        part = unit(rows, number).astype(dtype)
        np.save(root / "img_emb" / f"img_emb_{tag}.npy", part)
        np.save(root / "text_emb" / f"text_emb_{tag}.npy", unit(rows, 50 + number).astype(dtype))
        names = [f"/data/images/{start + row:09d}.jpg" for row in range(rows)]
        urls = [f"https://example.org/img/{start + row}.jpg" for row in range(rows)]
        texts = [f"a photo number {start + row}" for row in range(rows)]
        columns = {
            "image_path": [f"{start + row:09d}" for row in range(rows)] if urls_only else names,
            "caption": texts,
            "url": urls,
            "key": [f"{start + row:09d}" for row in range(rows)],
            "width": list(range(rows)),
            "height": list(range(rows)),
        }
        if urls_only:
            del columns["image_path"]
        pq.write_table(pa.table(columns), root / "metadata" / f"metadata_{tag}.parquet")
        vectors.append(part.astype(np.float32))
        paths += urls if urls_only else names
        captions += texts
        start += rows
    everything = np.concatenate(vectors)
    if index is not None:
        built = faiss.index_factory(DIM, index, faiss.METRIC_INNER_PRODUCT)
        built.train(everything)
        built.add(everything[: index_rows or len(everything)])
        (root / "index").mkdir()
        faiss.write_index(built, str(root / "index" / "image.index"))
    return everything, paths, captions


def test_round_trip_import_search_export_import(tmp_path: Path) -> None:
    vectors, paths, captions = write_folder(tmp_path / "cr")
    messages: list[str] = []
    store = import_clip_retrieval(tmp_path / "cr", tmp_path / "s.safetensors", say=messages.append)
    assert store.paths == paths and store.search_index.name == "external"
    assert messages == [
        "the folder's index (IndexIVFFlat) is reused as it is (18 vectors, every one reached)"
    ]
    np.testing.assert_allclose(store.embeddings, vectors, atol=1e-6)
    hit = store.retrieve_by_vector(vectors[9], k=1)[0][0]
    assert hit.path == paths[9]
    loaded = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "s.safetensors")
    assert loaded.retrieve_by_vector(vectors[12], k=1)[0][0].path == paths[12]
    files = export_clip_retrieval(
        loaded, tmp_path / "out", part_rows=8, captions_file=tmp_path / "s.safetensors.captions.parquet"
    )
    assert sorted(os.path.basename(f) for f in files if f.endswith(".npy")) == [
        "img_emb_0.npy",
        "img_emb_1.npy",
        "img_emb_2.npy",
    ]
    again = read_clip_retrieval(tmp_path / "out")
    assert again.paths == paths and again.captions == captions and again.index is not None
    np.testing.assert_allclose(again.vectors, vectors, atol=1e-6)
    with pytest.raises(ValueError, match="already holds img_emb"):
        export_clip_retrieval(loaded, tmp_path / "out")


def test_float32_parts_and_the_embeddings_subfolder(tmp_path: Path) -> None:
    vectors, paths, _ = write_folder(tmp_path / "x" / "embeddings", dtype="float32", index=None)
    found = read_clip_retrieval(tmp_path / "x")
    np.testing.assert_array_equal(found.vectors, vectors)
    assert found.index is None and found.paths == paths


def test_an_index_the_checks_refuse_is_rebuilt_with_a_message(tmp_path: Path) -> None:
    write_folder(tmp_path / "cr", index="IVF2_HNSW8,Flat")  # an HNSW coarse quantiser
    messages: list[str] = []
    store = import_clip_retrieval(tmp_path / "cr", say=messages.append)
    assert store.search_index.name == "exact" and store.space == "ip"
    assert len(messages) == 1 and "rebuilt from the .npy files" in messages[0] and "IHNf" in messages[0]


def test_an_index_whose_ntotal_disagrees_is_refused(tmp_path: Path) -> None:
    write_folder(tmp_path / "cr", index="Flat", index_rows=10)
    with pytest.raises(ValueError, match=r"image.index' holds 10 vectors .* but the embeddings are 18"):
        read_clip_retrieval(tmp_path / "cr")


def test_url_only_items_are_never_fetched(tmp_path: Path) -> None:
    vectors, urls, _ = write_folder(tmp_path / "cr", urls_only=True, index=None)
    store = import_clip_retrieval(tmp_path / "cr", tmp_path / "s.safetensors")
    assert store.paths == urls and urls[3] in store
    candidate = store.retrieve_by_vector(vectors[3], k=1)[0][0]
    assert candidate.path == urls[3]
    with pytest.raises(ValueError, match=r"URL-only gallery item .* never fetches"):
        candidate.array  # noqa: B018
    moved = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "s.safetensors", root=tmp_path)
    assert moved.paths == urls  # --root re-anchors files only
    assert plan_sync(urls, [str(tmp_path / "a.png")], str(tmp_path), {}, 0)[1] == []  # sync keeps them
    mixed = InMemoryImageEmbeddingStore.from_embeddings(["/old/g/a.png", urls[0]], vectors[:2])
    mixed.save_to_disk(tmp_path / "m.safetensors")
    moved = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "m.safetensors", root=tmp_path / "new")
    assert moved.paths == [str(tmp_path / "new" / "a.png"), urls[0]]


def _rewrite_metadata(root: Path, change) -> Path:  # type: ignore[no-untyped-def]
    target = root / "metadata" / "metadata_1.parquet"
    table = pq.read_table(target)
    pq.write_table(change(table), target)
    return target


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda t: t.slice(0, 3),
            r"metadata_1.parquet' has 3 rows but img_emb_1.npy has 5 embeddings \(row 3",
        ),
        (
            lambda t: t.drop(["image_path", "url"]),
            r"metadata_1.parquet' has no column 'image_path' \(nor 'url'\)",
        ),
        (
            lambda t: t.set_column(0, "image_path", pa.array(["a.jpg", "b\x1b[2J.jpg", "c", "d", "e"])),
            r"metadata_1.parquet': row 1: the path 'b\\x1b\[2J.jpg' holds control characters",
        ),
        (
            lambda t: t.set_column(0, "image_path", pa.array(["a", "a", "c", "d", "e"])),
            r"metadata_1.parquet': row 1 repeats the path 'a'",
        ),
    ],
)
def test_bad_metadata_names_the_file_and_row(tmp_path: Path, change, problem: str) -> None:  # type: ignore[no-untyped-def]
    write_folder(tmp_path / "cr", index=None)
    _rewrite_metadata(tmp_path / "cr", change)
    with pytest.raises(ValueError, match=problem):
        import_clip_retrieval(tmp_path / "cr", tmp_path / "s.safetensors")
    assert not (tmp_path / "s.safetensors").exists()


def test_pickled_and_malformed_npy_parts_are_refused(tmp_path: Path) -> None:
    write_folder(tmp_path / "cr", index=None)
    part = tmp_path / "cr" / "img_emb" / "img_emb_1.npy"
    np.save(part, np.array([{"x": 1}] * 5, dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"img_emb_1.npy' holds Python objects \(pickle\); refused"):
        read_clip_retrieval(tmp_path / "cr")
    np.save(part, np.zeros((5, DIM), dtype=np.int64))
    with pytest.raises(ValueError, match=r"holds int64, not one of \['float16', 'float32'\]"):
        read_clip_retrieval(tmp_path / "cr")
    np.save(part, np.zeros((5, DIM, 1), dtype=np.float16))
    with pytest.raises(ValueError, match="must hold a 2-D float16/float32 array"):
        read_clip_retrieval(tmp_path / "cr")
    np.save(part, np.zeros((5, DIM + 1), dtype=np.float16))
    with pytest.raises(ValueError, match="has dimension 17, the first part 16"):
        read_clip_retrieval(tmp_path / "cr")
    np.save(part, np.zeros((5, DIM), dtype=np.float16))
    part.write_bytes(part.read_bytes()[:-2])
    with pytest.raises(ValueError, match="not what its header"):
        read_clip_retrieval(tmp_path / "cr")
    part.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(ValueError, match=r"not a valid \.npy file"):
        read_clip_retrieval(tmp_path / "cr")


def test_cli_import_and_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, paths, _ = write_folder(tmp_path / "cr", index="IVF2_HNSW8,Flat")
    store = tmp_path / "s.safetensors"
    assert main(["import", "clip-retrieval", str(tmp_path / "cr"), "--out", str(store), "--json"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["items"] == 18 and summary["index"] == "exact" and "rebuilt from the .npy files" in err
    assert main(["export", "clip-retrieval", str(store), str(tmp_path / "back"), "--part-rows", "10"]) == 0
    assert "wrote 5 files" in capsys.readouterr().out
    again = read_clip_retrieval(tmp_path / "back")
    assert again.paths == paths and again.captions[0] == "a photo number 0"
    assert (
        main(["import", "clip-retrieval", str(tmp_path / "nothing"), "--out", str(store), "--overwrite"]) == 2
    )
    assert "holds no img_emb/" in capsys.readouterr().err


def test_cli_sync_and_remove_leave_and_name_url_items(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a store mixing files and URL-only items, ``sync`` plans over the files alone (URLs never
    vanish or change) and ``remove`` takes a URL as stored (no absolute path made of it)."""
    from PIL import Image

    from galleria import PixelEmbedder

    gallery = tmp_path / "g"
    gallery.mkdir()
    for number, colour in enumerate(("red", "blue", "green")):
        Image.new("RGB", (12, 12), colour).save(gallery / f"{number}.png")
    embedder = PixelEmbedder(size=4)
    files = [str(gallery / "0.png"), str(gallery / "1.png")]
    urls = ["https://example.org/a.jpg", "https://example.org/b.jpg"]
    vectors = np.vstack(
        [
            embedder.embed([Image.open(file).convert("RGB") for file in files]),
            np.random.default_rng(0).random((2, 48)),
        ]
    )
    mixed = InMemoryImageEmbeddingStore.from_embeddings(files + urls, vectors, embedder)
    store = tmp_path / "mixed.safetensors"
    mixed.save_to_disk(store)
    assert main(["sync", str(store), str(gallery)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    synced = InMemoryImageEmbeddingStore.load_from_disk(store)
    assert sorted(synced.paths) == sorted([*files, str(gallery / "2.png"), *urls])
    assert main(["remove", str(store), urls[0]]) == 0, capsys.readouterr().err
    assert urls[0] not in InMemoryImageEmbeddingStore.load_from_disk(store) and urls[1] in synced
