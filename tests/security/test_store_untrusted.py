"""A store file is untrusted input: crafted, damaged and hostile files end in ValueError, never worse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from _support.extras import need
from _support.store_files import read_parts, write_sealed
from _support.store_support import as_old_format, make_images, pixel_embedder
from galleria import InMemoryImageEmbeddingStore
from galleria.index import _serial
from galleria.index._faiss_check import check_faiss_bytes
from galleria.store._header import FORMAT_VERSION


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return make_images(tmp_path_factory.mktemp("untrusted"), 6)


@pytest.fixture(params=["exact", "hnsw"])
def saved(gallery: list[str], tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    store = InMemoryImageEmbeddingStore(gallery, pixel_embedder(), request.param)
    store.build_store(progress=False)
    file = tmp_path / "good.safetensors"
    store.save_to_disk(file)
    return file


def observable(store: InMemoryImageEmbeddingStore) -> tuple[Any, ...]:
    query = np.linspace(-1.0, 1.0, store.dim or 1, dtype=np.float32)
    ranked = [(c.path, c.score) for c in store.retrieve_by_vector(query, k=len(store))[0]]
    config = store.embedder.config() if store.embedder is not None else None
    return (
        store.paths,
        store.skipped,
        store.space,
        store.search_index.name,
        store.search_index.params(),
        config,
        store.embeddings.tobytes(),
        ranked,
    )


# ---------------------------------------------------------------- fuzzing: every change is caught or harmless


def test_fuzz_truncation_flips_and_header_tampering(saved: Path, tmp_path: Path) -> None:
    original = saved.read_bytes()
    expected = observable(InMemoryImageEmbeddingStore.load_from_disk(saved))
    rng = np.random.default_rng(2026)
    cases: list[bytes] = [original[:cut] for cut in np.linspace(0, len(original) - 1, 60).astype(int)]
    for position in rng.integers(0, len(original), 400):
        flipped = bytearray(original)
        flipped[position] ^= int(rng.integers(1, 256))
        cases.append(bytes(flipped))
    # Every byte of the JSON header region gets flipped once more, where the old checksum-free header hid.
    start = original.index(b'{"format"') if b'{"format"' in original else original.index(b"galleria")
    for position in range(start, min(start + 300, len(original)), 3):
        flipped = bytearray(original)
        flipped[position] ^= 0x01
        cases.append(bytes(flipped))
    candidate = tmp_path / "case.safetensors"
    outcomes = {"refused": 0, "identical": 0}
    for data in cases:
        candidate.write_bytes(data)
        try:
            loaded = InMemoryImageEmbeddingStore.load_from_disk(candidate)
        except ValueError:
            outcomes["refused"] += 1
            continue
        assert observable(loaded) == expected
        outcomes["identical"] += 1
    assert outcomes["refused"] > 400  # nearly every change is refused; the rest are harmless


@pytest.mark.parametrize(
    "header",
    [[], None, "store", 3, {"format": "galleria-store"}],
    ids=["list", "null", "string", "number", "bare"],
)
def test_header_of_the_wrong_shape(saved: Path, tmp_path: Path, header: Any) -> None:
    _, tensors = read_parts(saved)
    bad = write_sealed(tmp_path / "shape.safetensors", header, tensors)
    with pytest.raises(ValueError, match=r"shape\.safetensors"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)


@pytest.mark.parametrize("key", ["dim", "embedder", "skipped", "rows", "space", "index", "tensors"])
def test_missing_header_key_is_named(saved: Path, tmp_path: Path, key: str) -> None:
    header, tensors = read_parts(saved)
    del header[key]
    bad = write_sealed(tmp_path / "missing.safetensors", header, tensors)
    with pytest.raises(ValueError, match=rf"missing\.safetensors.*{key}"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)


def test_deeply_nested_header(saved: Path, tmp_path: Path) -> None:
    _, tensors = read_parts(saved)
    nested = "[" * 100_000 + "]" * 100_000
    bad = tmp_path / "deep.safetensors"
    save_file(tensors, str(bad), metadata={"galleria": nested, "galleria_sha256": "0" * 64})
    with pytest.raises(ValueError, match=r"deep\.safetensors"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)


def test_header_edit_without_resealing_is_refused(saved: Path, tmp_path: Path) -> None:
    header, tensors = read_parts(saved)
    with safe_open(str(saved), framework="numpy") as reader:
        old_digest = reader.metadata()["galleria_sha256"]
    header["rows"] += 1
    bad = tmp_path / "renamed.safetensors"
    save_file(tensors, str(bad), metadata={"galleria": json.dumps(header), "galleria_sha256": old_digest})
    with pytest.raises(ValueError, match="header does not match its checksum"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)


def test_version_2_file_without_digest_is_refused(saved: Path, tmp_path: Path) -> None:
    header, tensors = read_parts(saved)
    assert header["format_version"] == FORMAT_VERSION == 4
    for version in (2, 3):
        if version == 2:
            header, tensors = as_old_format(header, tensors)
        bad = tmp_path / "nodigest.safetensors"
        save_file(tensors, str(bad), metadata={"galleria": json.dumps(header)})
        with pytest.raises(ValueError, match="digest"):
            InMemoryImageEmbeddingStore.load_from_disk(bad)


def test_version_1_file_still_loads(saved: Path, tmp_path: Path) -> None:
    header, tensors = as_old_format(*read_parts(saved), version=1)
    old = tmp_path / "v1.safetensors"
    save_file(tensors, str(old), metadata={"galleria": json.dumps(header)})
    assert observable(InMemoryImageEmbeddingStore.load_from_disk(old)) == observable(
        InMemoryImageEmbeddingStore.load_from_disk(saved)
    )


# ---------------------------------------------------------------- FAISS bytes: allow-list first


def _external_store(tmp_path: Path, faiss_bytes: np.ndarray, rows: int, dim: int, space: str) -> Path:
    payload = _serial.pack(
        "external",
        {"label": "faiss", "space": space, "dim": dim, "total": rows},
        {"live": np.arange(rows, dtype=np.int64), "faiss": np.asarray(faiss_bytes, dtype=np.uint8)},
    )
    tensors = {"index": np.frombuffer(payload, dtype=np.uint8)}
    header = {
        "format": "galleria-store",
        "format_version": 2,  # the paths in the header
        "paths": [f"/gallery/{i}.png" for i in range(rows)],
        "space": space,
        "dim": dim,
        "index": {"name": "external", "params": {}},
        "embedder": None,
        "skipped": [],
        "tensors": {},
    }
    return write_sealed(tmp_path / "crafted.safetensors", header, tensors)


def test_on_disk_inverted_lists_never_touch_the_named_file(tmp_path: Path) -> None:
    """The reproduced attack: IVF bytes whose inverted lists live in another file the process can write."""
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(64, 8)).astype(np.float32)
    quantizer = faiss.IndexFlatL2(8)
    ivf = faiss.IndexIVFFlat(quantizer, 8, 4)
    ivf.train(vectors)
    victim = tmp_path / "victim.bin"
    on_disk = faiss.OnDiskInvertedLists(4, ivf.code_size, str(victim))
    ivf.replace_invlists(on_disk, True)
    on_disk.this.disown()  # the IVF index owns its lists now
    ivf.add(vectors)
    crafted_bytes = faiss.serialize_index(ivf)
    victim.write_bytes(b"precious data " * 100)
    before = victim.read_bytes(), victim.stat().st_mtime_ns
    file = _external_store(tmp_path, crafted_bytes, 64, 8, "l2")
    with pytest.raises(ValueError, match=r"crafted\.safetensors.*'ilod'"):
        InMemoryImageEmbeddingStore.load_from_disk(file)
    assert (victim.read_bytes(), victim.stat().st_mtime_ns) == before


def test_refused_types_are_named(tmp_path: Path) -> None:
    vectors = np.random.default_rng(1).normal(size=(40, 8)).astype(np.float32)
    quantizer = faiss.IndexScalarQuantizer(8, faiss.ScalarQuantizer.QT_8bit)
    quantizer.train(vectors)
    quantizer.add(vectors)
    file = _external_store(tmp_path, faiss.serialize_index(quantizer), 40, 8, "l2")
    with pytest.raises(ValueError, match=r"crafted\.safetensors.*faiss index type 'IxSQ'"):
        InMemoryImageEmbeddingStore.load_from_disk(file)


def test_allow_list_accepts_every_type_galleria_writes() -> None:
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(512, 16)).astype(np.float32)
    made = {
        "IndexFlatL2": faiss.IndexFlatL2(16),
        "IndexFlatIP": faiss.IndexFlatIP(16),
        "IndexHNSWFlat": faiss.IndexHNSWFlat(16, 8),
        "IndexIVFFlat": faiss.IndexIVFFlat(faiss.IndexFlatL2(16), 16, 8),
        "IndexIVFPQ": faiss.IndexIVFPQ(faiss.IndexFlatL2(16), 16, 8, 4, 4),
        "IndexPQ": faiss.IndexPQ(16, 4, 4),
        "IndexIDMap2": faiss.IndexIDMap2(faiss.IndexFlatL2(16)),
        "IndexPreTransform": faiss.index_factory(16, "OPQ4,IVF8,PQ4x4"),
    }
    for expected, index in made.items():
        if not index.is_trained:
            index.train(vectors)
        if isinstance(index, faiss.IndexIDMap2):
            index.add_with_ids(vectors, np.arange(512, dtype=np.int64)[::-1].copy())  # every label a row
        else:
            index.add(vectors)
        data = faiss.serialize_index(index)
        assert check_faiss_bytes(data, "test") == expected
        with pytest.raises(ValueError, match=r"runs past the end|declares|does not match"):
            check_faiss_bytes(data[: len(data) - 7], "test")


def test_counts_larger_than_the_data_are_refused_before_allocating() -> None:
    """A vector-length field of 2^29 (or 2^61) in a small buffer: refused, nothing allocated."""
    flat = faiss.IndexFlatL2(4)
    flat.add(np.eye(4, dtype=np.float32))
    data = bytearray(faiss.serialize_index(flat).tobytes())
    length_at = 4 + 4 + 8 + 16 + 1 + 4  # fourcc, d, ntotal, two unused, is_trained, metric
    for huge in (1 << 29, 1 << 61):
        data[length_at : length_at + 8] = huge.to_bytes(8, "little")
        with pytest.raises(ValueError, match=r"declares|runs past|holds"):
            check_faiss_bytes(bytes(data), "test")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_hnsw_graph_with_non_finite_vectors_is_refused(tmp_path: Path, bad: float) -> None:
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"/g/{i}" for i in range(20)], np.random.default_rng(3).normal(size=(20, 4)), search_index="hnsw"
    )
    file = tmp_path / "hnsw.safetensors"
    store.save_to_disk(file)
    header, tensors = read_parts(file)
    meta, arrays = _serial.unpack(tensors["index"], "hnsw")
    graph = faiss.deserialize_index(arrays["graph"])
    storage = faiss.downcast_index(graph.storage)
    poisoned = faiss.rev_swig_ptr(storage.get_xb(), 20 * 4)
    poisoned[5] = bad
    arrays["graph"] = np.asarray(faiss.serialize_index(graph), dtype=np.uint8)
    tensors["index"] = np.frombuffer(_serial.pack("hnsw", meta, arrays), dtype=np.uint8)
    bad_file = write_sealed(tmp_path / "nan.safetensors", header, tensors)
    with pytest.raises(ValueError, match=r"nan\.safetensors.*NaN or infinite"):
        InMemoryImageEmbeddingStore.load_from_disk(bad_file)


def test_non_finite_saved_vectors_are_refused(tmp_path: Path) -> None:
    flat = faiss.IndexFlatL2(3)
    from galleria import ExternalSearchIndex

    store = InMemoryImageEmbeddingStore.from_embeddings(
        ["a", "b"], np.eye(2, 3), search_index=ExternalSearchIndex.from_faiss_index(flat)
    )
    file = tmp_path / "v.safetensors"
    store.save_to_disk(file, vectors=np.eye(2, 3))
    header, tensors = read_parts(file)
    tensors["vectors"] = tensors["vectors"].copy()
    tensors["vectors"][1, 1] = np.inf
    bad = write_sealed(tmp_path / "inf.safetensors", header, tensors)
    with pytest.raises(ValueError, match="NaN or infinite"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)


# ---------------------------------------------------------------- sizes, threads, other files


def test_threads_are_capped_at_the_cpu_count(tmp_path: Path) -> None:
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"/g/{i}" for i in range(30)],
        np.random.default_rng(4).normal(size=(30, 4)),
        search_index="hnsw",
        index_params={"num_threads": 4096},
    )
    file = tmp_path / "threads.safetensors"
    store.save_to_disk(file)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    seen: list[int] = []
    original = faiss.omp_set_num_threads

    def spy(count: int) -> None:
        seen.append(count)
        original(count)

    faiss.omp_set_num_threads = spy
    try:
        loaded.retrieve_by_vector(np.ones(4), k=3)
    finally:
        faiss.omp_set_num_threads = original
    assert seen and max(seen) <= len(os.sched_getaffinity(0))


def test_declared_sizes_that_disagree_with_the_data_are_refused(saved: Path, tmp_path: Path) -> None:
    header, tensors = as_old_format(*read_parts(saved))
    header["dim"] = 1 << 16
    header["paths"] = [f"/p/{i}" for i in range(5000)]
    bad = write_sealed(tmp_path / "big.safetensors", header, tensors)
    with pytest.raises(ValueError, match=r"big\.safetensors.*does not match the header"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)
    header["dim"] = (1 << 16) + 1
    bad = write_sealed(tmp_path / "huge.safetensors", header, tensors)
    with pytest.raises(ValueError, match=r"huge\.safetensors.*'dim' must be an integer in \[1, 65536\]"):
        InMemoryImageEmbeddingStore.load_from_disk(bad)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="FIFO, not a regular file"):
        InMemoryImageEmbeddingStore.load_from_disk(fifo)


def test_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a regular file"):
        InMemoryImageEmbeddingStore.load_from_disk("/dev/zero")


def test_stale_temporary_files_of_killed_saves_are_removed(saved: Path, tmp_path: Path) -> None:
    store = InMemoryImageEmbeddingStore.load_from_disk(saved)
    target = tmp_path / "out.safetensors"
    # A writer killed with SIGKILL mid-save: a real process, so its pid is certainly gone.
    script = (
        "import os, signal, sys\n"
        "sys.path[:0] = [p for p in sys.argv[2:]]\n"
        "from galleria._files import atomic_path\n"
        "with atomic_path(sys.argv[1]) as temporary:\n"
        "    open(temporary, 'wb').write(b'x' * 100000)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run([sys.executable, "-c", script, str(target), *sys.path], check=False)
    assert killed.returncode == -9
    leftovers = [name for name in os.listdir(tmp_path) if name.startswith(".out.safetensors.")]
    assert len(leftovers) == 1
    alive = tmp_path / f".out.safetensors.{os.getpid()}.inflight.tmp"  # another save of ours, still running
    alive.write_bytes(b"in progress")
    other_target = tmp_path / f".other.safetensors.{killed.returncode + 10**6}.x.tmp"
    other_target.write_bytes(b"not ours")
    store.save_to_disk(target)
    remaining = sorted(name for name in os.listdir(tmp_path) if name.endswith(".tmp"))
    assert remaining == sorted([alive.name, other_target.name])
    assert observable(InMemoryImageEmbeddingStore.load_from_disk(target)) == observable(store)


# ---------------------------------------------------------------- checkpoints are never chosen by the file


def test_store_built_from_a_local_checkpoint_needs_it_passed(tmp_path: Path) -> None:
    torch = need("torch")
    from galleria import ClipEmbedder

    tiny = "ViT-S-32-alt"
    random_weights = ClipEmbedder(tiny, pretrained=None, device="cpu")
    weights = tmp_path / "weights.pt"
    torch.save({name: value * 1.01 for name, value in random_weights._model.state_dict().items()}, weights)
    embedder = ClipEmbedder(tiny, pretrained=weights, device="cpu")
    paths = make_images(tmp_path / "g", 3)
    store = InMemoryImageEmbeddingStore(paths, embedder)
    store.build_store(progress=False)
    file = tmp_path / "clip.safetensors"
    store.save_to_disk(file)
    header, _ = read_parts(file)
    assert str(tmp_path) not in json.dumps(header["embedder"])  # name and digest only, never the path
    with pytest.raises(ValueError, match=r"weights\.pt.*--checkpoint"):
        InMemoryImageEmbeddingStore.load_from_disk(file)
    impostor = tmp_path / "weights-other.pt"
    torch.save(random_weights._model.state_dict(), impostor)
    with pytest.raises(ValueError, match="sha256"):
        InMemoryImageEmbeddingStore.load_from_disk(file, checkpoint=impostor)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file, checkpoint=weights)
    assert [c.path for c in loaded.retrieve_top_k_similar(paths[1], k=1)[0]] == [paths[1]]
