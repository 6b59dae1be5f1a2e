"""``galleria import clip-retrieval`` as a hostile folder meets it (issue 34, docs/security.md): bombs and
oversized fields in the metadata, parts that are links out of the folder, an existing or linked
``--out``, another writer, a failing save, an imported faiss index searched with too few probes,
inner-product scores, and a captions file with list-typed paths on export."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path

import faiss
import numpy as np
import pytest

from _support.extras import need

pa = need("pyarrow")
pq = need("pyarrow.parquet")

from galleria import InMemoryImageEmbeddingStore  # noqa: E402
from galleria._files import writer_lock  # noqa: E402
from galleria.cli import main  # noqa: E402
from galleria.index import ExternalSearchIndex  # noqa: E402
from galleria.store.clip_retrieval import import_clip_retrieval, read_clip_retrieval  # noqa: E402

DIM = 16


def _folder(root: Path, rows: int = 6, *, caption: str | None = None, path: str | None = None) -> Path:
    """A one-part clip-retrieval folder; row 2's caption / path replaced when given (zstd-compressed)."""
    (root / "img_emb").mkdir(parents=True)
    (root / "metadata").mkdir()
    vectors = np.random.default_rng(1).normal(size=(rows, DIM)).astype(np.float32)
    np.save(root / "img_emb" / "img_emb_0.npy", vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    paths = [f"/data/{row}.jpg" for row in range(rows)]
    captions = [f"photo {row}" for row in range(rows)]
    if caption is not None:
        captions[2] = caption
    if path is not None:
        paths[2] = path
    table = pa.table({"image_path": paths, "caption": captions})
    pq.write_table(table, root / "metadata" / "metadata_0.parquet", compression="zstd")
    return root


def test_a_decompression_bomb_is_refused_before_it_is_decompressed(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "cr", caption="a" * (40 << 20))
    size = (folder / "metadata" / "metadata_0.parquet").stat().st_size
    assert size < 64 << 10  # 40 MB of caption in a few KB
    with pytest.raises(
        ValueError, match=r"metadata_0.parquet': row group 0 would decompress to \d+ bytes"
    ) as caught:
        read_clip_retrieval(folder)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 600


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("path", "p" * 5000, "the path is 5000 characters long, more than the 4096 allowed"),
        ("path", "/" + "x" * (64 << 20), "would decompress"),  # 64 MB: the cap sees it first
        ("caption", "".join(chr(0x4E00 + n % 2000) for n in range(30_000)), "the caption is longer than"),
    ],
)
def test_oversized_fields_are_refused_in_one_short_line(
    tmp_path: Path, field: str, value: str, problem: str
) -> None:
    folder = _folder(tmp_path / "cr", **{field: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=problem) as caught:
        import_clip_retrieval(folder, tmp_path / "s.safetensors", say=lambda _: None)
    message = str(caught.value)
    assert "metadata_0.parquet" in message and "\n" not in message and len(message) < 600
    assert not (tmp_path / "s.safetensors").exists()


@pytest.mark.parametrize("part", ["img_emb", "npy", "parquet"])
def test_parts_linked_out_of_the_folder_are_refused_unless_followed(tmp_path: Path, part: str) -> None:
    mine = _folder(tmp_path / "mine")  # the user's own vectors, elsewhere on the disk
    folder = _folder(tmp_path / "cr")
    if part == "img_emb":
        os.rename(folder / "img_emb", tmp_path / "moved")
        (folder / "img_emb").symlink_to(mine / "img_emb")
    elif part == "npy":
        (folder / "img_emb" / "img_emb_0.npy").unlink()
        (folder / "img_emb" / "img_emb_0.npy").symlink_to(mine / "img_emb" / "img_emb_0.npy")
    else:
        (folder / "metadata" / "metadata_0.parquet").unlink()
        (folder / "metadata" / "metadata_0.parquet").symlink_to(mine / "metadata" / "metadata_0.parquet")
    with pytest.raises(ValueError, match=r"outside the folder .*--follow-links"):
        read_clip_retrieval(folder)
    followed = read_clip_retrieval(folder, follow_links=True)
    assert len(followed.paths) == 6 and any("following the link" in m for m in followed.messages)
    inner = tmp_path / "cr" / "inner.npy"  # a link that stays inside the folder is fine
    if part == "npy":
        (folder / "img_emb" / "img_emb_0.npy").unlink()
        os.replace(mine / "img_emb" / "img_emb_0.npy", inner)
        (folder / "img_emb" / "img_emb_0.npy").symlink_to(inner)
        assert read_clip_retrieval(folder).messages == []


def _import(folder: Path, out: Path, *extra: str) -> int:
    return main(["import", "clip-retrieval", str(folder), "--out", str(out), *extra])


def test_out_an_existing_store_needs_overwrite_and_then_replaces_its_side_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.safetensors"
    assert _import(_folder(tmp_path / "a", rows=6), out) == 0
    old = out.read_bytes()
    for suffix in (".graph", ".map", ".files.json"):
        Path(f"{out}{suffix}").write_bytes(b"of the old store")
    capsys.readouterr()
    assert _import(_folder(tmp_path / "b", rows=9), out) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert out.read_bytes() == old
    assert _import(tmp_path / "b", out, "--overwrite") == 0
    assert len(InMemoryImageEmbeddingStore.load_from_disk(out)) == 9
    assert not any(os.path.lexists(f"{out}{suffix}") for suffix in (".graph", ".map", ".files.json"))
    captions = pq.read_table(f"{out}.captions.parquet").num_rows
    assert captions == 9


def test_out_a_symbolic_link_is_refused_and_its_target_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "elsewhere.bin"
    target.write_bytes(b"keep me")
    out = tmp_path / "s.safetensors"
    out.symlink_to(target)
    assert _import(_folder(tmp_path / "cr"), out, "--overwrite") == 2
    assert "symbolic link" in capsys.readouterr().err
    assert target.read_bytes() == b"keep me" and out.is_symlink()


def test_import_takes_the_stores_writer_lock_and_waits_with_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, out = _folder(tmp_path / "cr"), tmp_path / "s.safetensors"
    with writer_lock(out):
        assert _import(folder, out) == 2
        assert "being changed by another galleria process" in capsys.readouterr().err
        assert not out.exists()
    released = threading.Event()

    def hold() -> None:
        with writer_lock(out):
            released.wait(10)
            time.sleep(0.3)

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.1)
    released.set()
    try:
        assert _import(folder, out, "--wait", "20") == 0
    finally:
        holder.join()
    assert len(InMemoryImageEmbeddingStore.load_from_disk(out)) == 6


@pytest.mark.parametrize("failure", ["full disk", "killed"])
def test_a_failing_save_leaves_the_old_store_and_captions_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    out = tmp_path / "s.safetensors"
    import_clip_retrieval(_folder(tmp_path / "a"), out, say=lambda _: None)
    old, old_captions = out.read_bytes(), Path(f"{out}.captions.parquet").read_bytes()
    real = InMemoryImageEmbeddingStore.save_to_disk

    def failing(self: InMemoryImageEmbeddingStore, path: object) -> None:
        real(self, str(path) + ".elsewhere")  # the work was done, then the disk filled
        if failure == "full disk":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise KeyboardInterrupt

    monkeypatch.setattr(InMemoryImageEmbeddingStore, "save_to_disk", failing)
    with pytest.raises(OSError if failure == "full disk" else KeyboardInterrupt):
        import_clip_retrieval(_folder(tmp_path / "b", rows=9), out, say=lambda _: None, overwrite=True)
    assert out.read_bytes() == old and Path(f"{out}.captions.parquet").read_bytes() == old_captions
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def _clustered_folder(root: Path, factory: str, setup: dict[str, int]) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(40, DIM))
    vectors = (centres[rng.integers(0, 40, 3000)] + rng.normal(0, 1.0, (3000, DIM))).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    (root / "img_emb").mkdir(parents=True)
    (root / "metadata").mkdir()
    np.save(root / "img_emb" / "img_emb_0.npy", vectors)
    pq.write_table(
        pa.table({"image_path": [f"/d/{n}.jpg" for n in range(3000)]}),
        root / "metadata" / "metadata_0.parquet",
    )
    index = faiss.index_factory(DIM, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    for key, value in setup.items():
        if key == "nprobe":
            faiss.extract_index_ivf(index).nprobe = value
        else:
            faiss.downcast_index(index).hnsw.efSearch = value
    faiss.write_index(index, str(root / "image.index"))
    return root, vectors


def _recall(store: InMemoryImageEmbeddingStore, vectors: np.ndarray) -> float:
    queries = vectors[::30]
    truth = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    found = store.retrieve_by_vector(queries, k=10)
    hits = sum(
        len({int(c.path[3:-4]) for c in row} & set(t.tolist())) for row, t in zip(found, truth, strict=True)
    )
    return hits / truth.size


@pytest.mark.parametrize(
    ("factory", "setup", "knob"),
    [("IVF64,Flat", {"nprobe": 1}, "nprobe 1 -> "), ("HNSW4", {"efSearch": 1}, "efSearch 1 -> ")],
)
def test_a_reused_index_is_tuned_to_the_recall_target_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], factory: str, setup: dict[str, int], knob: str
) -> None:
    folder, vectors = _clustered_folder(tmp_path / "cr", factory, setup)
    untuned = read_clip_retrieval(folder).index
    assert untuned is not None
    plain = InMemoryImageEmbeddingStore.from_embeddings(
        [f"/d/{n}.jpg" for n in range(3000)],
        vectors,
        None,
        ExternalSearchIndex.from_faiss_index(untuned),
    )
    before = _recall(plain, vectors)
    out = tmp_path / "s.safetensors"
    assert _import(folder, out) == 0
    err = capsys.readouterr().err
    assert "is reused: recall@10 0.9" in err and knob in err, err
    store = InMemoryImageEmbeddingStore.load_from_disk(out)
    after = _recall(store, vectors)
    assert before < 0.8 and after >= 0.88, (before, after)
    assert main(["info", str(out)]) == 0
    assert "recall@10 0.9" in capsys.readouterr().out


def test_an_index_that_cannot_reach_the_target_is_rebuilt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, vectors = _clustered_folder(tmp_path / "cr", "IVF16,PQ2x4", {"nprobe": 1})
    out = tmp_path / "s.safetensors"
    assert _import(folder, out, "--json") == 0
    captured = capsys.readouterr()
    assert "below 0.9: it is rebuilt from the vectors" in captured.err
    assert json.loads(captured.out)["index"] == "exact"
    assert _recall(InMemoryImageEmbeddingStore.load_from_disk(out), vectors) == 1.0


def test_scores_of_an_imported_inner_product_store_are_distances(tmp_path: Path) -> None:
    folder, vectors = _clustered_folder(tmp_path / "cr", "Flat", {})
    for index in (None, "exact"):  # the folder's index reused, or galleria's own
        store = import_clip_retrieval(folder, index=index, say=lambda _: None)
        scores = [candidate.score for candidate in store.retrieve_by_vector(vectors[7], k=5)[0]]
        assert scores == sorted(scores) and abs(scores[0]) < 1e-5, (index, scores)


def test_export_with_list_typed_image_paths_in_the_captions_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.safetensors"
    assert _import(_folder(tmp_path / "cr"), out) == 0
    pq.write_table(
        pa.table({"image_path": [["/data/0.jpg"], ["/data/1.jpg"]], "caption": ["a", "b"]}),
        f"{out}.captions.parquet",
    )
    capsys.readouterr()
    assert main(["export", "clip-retrieval", str(out), str(tmp_path / "back")]) == 2
    err = capsys.readouterr().err
    assert "captions.parquet': row 0: image_path must be a string, got list" in err
    assert "unhashable" not in err
