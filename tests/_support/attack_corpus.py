"""A fuzz/attack corpus over store files and side files, shared by a test and a benchmark.

Every case is a hostile file: random byte flips and truncations of a store; header values swapped for
hostile ones with the digests recomputed (so the store's own checksums do not stop them); FAISS
streams (HNSW, IVF-flat with direct maps, IVF-PQ with removed rows, ID maps inside pre-transforms,
PQ) patched field by field with hostile ids, offsets, counts and levels, re-sealed; the index
container's JSON; and the side files: settings files, ``STORE.files.json``, shard manifests and
Parquet shards, plus FIFOs, devices and deep JSON in their places.

A case is **clean** when loading it raises ValueError or OSError naming the file, or when it loads
and then behaves: a search returns only rows the store holds, once each, with finite scores (or the
file's data is returned with the types its reader promises). Anything else is **bad**: another
exception type, a message that does not name the file, a wrong result, a hang (each case runs under
a timer). A crash of the process is bad as well: the benchmark runs each row in its own process.

``run_row(name, folder, scale)`` runs one row; ``ROWS`` lists them.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from galleria import InMemoryImageEmbeddingStore
from galleria.index import _serial

HOSTILE_INTS = [-(2**63), -(2**31), -5, -2, -1, 0, 1, 2, 7, 10**6, 2**31 - 1, 2**32, 2**40, 2**63 - 1]
HOSTILE_JSON: list[Any] = [
    None,
    True,
    False,
    -1,
    0,
    2**64,
    1e308,
    -1e308,
    "x",
    "",
    [],
    {},
    [1],
    ["a", "a"],
    {"a": 1},
    "\x1b]0;PWNED\x07",
    [[[[[[[[]]]]]]]],
]
CASE_SECONDS = 20


class _Timeout(Exception):
    pass


@contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Tally:
    """Tries, clean and bad outcomes of one row, with the first few bad cases described."""

    tries: int = 0
    clean: int = 0
    bad: int = 0
    examples: list[str] = field(default_factory=list)

    def record(self, label: str, problem: str | None) -> None:
        self.tries += 1
        if problem is None:
            self.clean += 1
        else:
            self.bad += 1
            if len(self.examples) < 5:
                self.examples.append(f"{label}: {problem}")


def _judge(label: str, tally: Tally, attempt: Callable[[], str | None], name: str) -> None:
    """Run one case: clean if it names ``name`` in a ValueError/OSError or ``attempt`` says so."""
    try:
        with _deadline(CASE_SECONDS):
            problem = attempt()
    except _Timeout:
        problem = "hung"
    except (ValueError, OSError) as error:
        problem = None if name in str(error) else f"{type(error).__name__} without the file's name: {error}"
    except Exception as error:
        problem = f"{type(error).__name__}: {str(error)[:200]}"
    tally.record(label, problem)


# ---------------------------------------------------------------------------------------------- stores


def _judge_store(label: str, tally: Tally, target: Path) -> None:
    _judge(label, tally, lambda: _use(target), target.name)


def _read(file: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with safe_open(str(file), framework="numpy") as reader:
        return json.loads(reader.metadata()["galleria"]), {k: reader.get_tensor(k) for k in reader.keys()}


def _seal(target: Path, header: Any, tensors: dict[str, np.ndarray]) -> None:
    if isinstance(header, dict):
        header["tensors"] = {
            k: {"sha256": hashlib.sha256(np.ascontiguousarray(v).reshape(-1).view(np.uint8).data).hexdigest()}
            for k, v in tensors.items()
        }
    canonical = json.dumps(header, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    save_file(
        tensors,
        str(target),
        metadata={
            "galleria": json.dumps(header),
            "galleria_sha256": hashlib.sha256(canonical.encode()).hexdigest(),
        },
    )


def _use(file: Path) -> str | None:
    """Load ``file`` and search it; a description of what went wrong, or None."""
    store = InMemoryImageEmbeddingStore.load_from_disk(file)
    held = set(store.paths)
    if len(held) != len(store):
        return "paths not unique"
    if len(store) == 0 or store.dim is None:
        return None
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(3, store.dim)).astype(np.float32)
    for row in store.retrieve_by_vector(queries, k=min(5, len(store))):
        paths = [c.path for c in row]
        if len(set(paths)) != len(paths) or not set(paths) <= held:
            return f"a search returned rows the store does not hold: {paths}"
        if not all(np.isfinite(c.score) for c in row):
            return "non-finite scores"
    if store.search_index.can_reconstruct and not np.isfinite(store.embeddings).all():
        return "non-finite embeddings"
    return None


def _stores(folder: Path) -> dict[str, Path]:
    """Valid stores of every index kind galleria writes, and external faiss ones."""
    rng = np.random.default_rng(7)
    made: dict[str, Path] = {}
    vectors = rng.normal(size=(700, 8)).astype(np.float32)
    paths = [f"/gallery/{i:04d}.png" for i in range(700)]
    for kind, params in (
        ("exact", None),
        ("hnsw", None),
        ("ivfpq", {"lists": 8, "bits": 4, "subquantizers": 2}),
    ):
        store = InMemoryImageEmbeddingStore.from_embeddings(
            paths, vectors, search_index=kind, index_params=params
        )
        if kind == "ivfpq":
            store.remove_images(paths[:40])  # removed rows stay masked: ids above ntotal
        made[kind] = folder / f"{kind}.safetensors"
        store.save_to_disk(made[kind])
    externals: dict[str, Any] = {}
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatL2(8), 8, 4)
    ivf.train(vectors)
    ivf.add(vectors)
    ivf.set_direct_map_type(faiss.DirectMap.Array)
    externals["ivf_direct_map"] = ivf
    rotation = faiss.RandomRotationMatrix(8, 8)
    rotation.init(3)
    mapped = faiss.IndexIDMap2(faiss.IndexFlatL2(8))
    mapped.add_with_ids(vectors, np.arange(700, dtype=np.int64)[::-1].copy())
    externals["pretransform_id_map"] = faiss.IndexPreTransform(rotation, mapped)
    pq = faiss.IndexPQ(8, 2, 4)
    pq.train(vectors)
    pq.add(vectors)
    externals["pq"] = pq
    for name, index in externals.items():
        from galleria.index import ExternalSearchIndex

        store = InMemoryImageEmbeddingStore.from_embeddings(
            paths, None, search_index=ExternalSearchIndex.from_faiss_index(index)
        )
        made[name] = folder / f"{name}.safetensors"
        store.save_to_disk(made[name], vectors=vectors)
    return made


def _faiss_array(
    header: dict[str, Any], tensors: dict[str, np.ndarray]
) -> tuple[dict[str, Any], dict[str, np.ndarray], str]:
    kind = header["index"]["name"]
    meta, arrays = _serial.unpack(tensors["index"].tobytes(), kind)
    key = "graph" if kind == "hnsw" else "faiss"
    return meta, arrays, key


def _patched_store(source: Path, target: Path, patch: Callable[[bytearray], None]) -> None:
    header, tensors = _read(source)
    meta, arrays, key = _faiss_array(header, tensors)
    data = bytearray(arrays[key].tobytes())
    patch(data)
    arrays[key] = np.frombuffer(bytes(data), dtype=np.uint8)
    tensors["index"] = np.frombuffer(_serial.pack(header["index"]["name"], meta, arrays), dtype=np.uint8)
    _seal(target, header, tensors)


def _vector_fields(data: bytes) -> list[tuple[int, int, int]]:
    """(offset of the length field, item size, count) of every plausible length-prefixed vector."""
    found = []
    for at in range(0, len(data) - 8, 1):
        (count,) = struct.unpack_from("<Q", data, at)
        for item in (1, 4, 8):
            if 0 < count and at + 8 + count * item <= len(data) and count * item >= 8:
                found.append((at, item, count))
    return found


def _row_store_bytes(folder: Path, scale: int, tally: Tally, mode: str) -> None:
    rng = np.random.default_rng(11)
    for kind, source in _stores(folder).items():
        original = source.read_bytes()
        target = folder / "case.safetensors"
        for number in range(20 * scale):
            if mode == "flip":
                data = bytearray(original)
                for position in rng.integers(0, len(original), int(rng.integers(1, 4))):
                    data[position] ^= int(rng.integers(1, 256))
            else:
                data = bytearray(original[: int(rng.integers(0, len(original)))])
            target.write_bytes(bytes(data))
            _judge_store(f"{kind} #{number}", tally, target)


#: galleria's own extension records, as ``_row_header`` puts hostile values in the slot under them.
SLOT_RECORDS = ("augmentation", "offline_diffusion", "rerank_statistics")


def _row_header(folder: Path, scale: int, tally: Tally) -> None:
    rng = np.random.default_rng(12)
    for kind, source in _stores(folder).items():
        header, tensors = _read(source)
        # A record at the top of the header (as files before the extension slot kept them) and the slot.
        keys = list(dict.fromkeys([*header, "augmentation", "extensions"]))
        for _ in range(15 * scale):
            changed = json.loads(json.dumps(header))
            key = keys[int(rng.integers(0, len(keys)))]
            value = HOSTILE_JSON[int(rng.integers(0, len(HOSTILE_JSON)))]
            if key == "index" and rng.random() < 0.5:
                changed["index"]["params"] = {"bogus": value}
            elif key == "extensions" and rng.random() < 0.75:  # one of galleria's records in the slot
                record = SLOT_RECORDS[int(rng.integers(0, len(SLOT_RECORDS)))]
                changed["extensions"] = {record: value}
            elif key == "paths" and rng.random() < 0.5 and changed["paths"]:
                changed["paths"][int(rng.integers(0, len(changed["paths"])))] = value
            else:
                changed[key] = value
            target = folder / "case.safetensors"
            _seal(target, changed, dict(tensors))
            _judge_store(f"{kind} {key}={value!r:.30}", tally, target)


#: Bytes that break UTF-8 or paths when written into a path: NUL, a lone continuation byte, lead
#: bytes of overlong / surrogate / out-of-range forms, never-valid bytes; and a harmless "/".
HOSTILE_PATH_BYTES = [0x00, 0x80, 0xBF, 0xC0, 0xC3, 0xE0, 0xED, 0xF4, 0xF8, 0xFF, ord("/")]


def _row_paths(folder: Path, scale: int, tally: Tally) -> None:
    """The path tensors (format 3): hostile offsets and bytes, the row count, every digest resealed."""
    rng = np.random.default_rng(14)
    for kind, source in _stores(folder).items():
        header, tensors = _read(source)
        data, offsets = tensors["path_bytes"], tensors["path_offsets"]
        for number in range(10 * scale):
            changed, new_data, new_offsets = json.loads(json.dumps(header)), data.copy(), offsets.copy()
            choice = rng.random()
            if choice < 0.35:  # an offset set to a hostile value
                new_offsets[int(rng.integers(0, new_offsets.size))] = HOSTILE_INTS[
                    int(rng.integers(0, len(HOSTILE_INTS)))
                ]
            elif choice < 0.6:  # a byte of some path set to a hostile byte
                new_data[int(rng.integers(0, new_data.size))] = HOSTILE_PATH_BYTES[
                    int(rng.integers(0, len(HOSTILE_PATH_BYTES)))
                ]
            elif choice < 0.7:  # one path copied over another of the same length
                first, second = (int(value) for value in rng.integers(0, offsets.size - 1, 2))
                begin, end = int(offsets[second]), int(offsets[second + 1])
                length = min(end - begin, int(offsets[first + 1] - offsets[first]))
                new_data[begin : begin + length] = data[int(offsets[first]) : int(offsets[first]) + length]
            elif choice < 0.8:  # offsets or bytes cut short or grown
                cut = int(rng.integers(1, 4))
                if rng.random() < 0.5:
                    new_offsets = (
                        np.concatenate([offsets, offsets[-cut:]]) if rng.random() < 0.5 else offsets[:-cut]
                    )
                else:
                    new_data = (
                        data[:-cut].copy() if rng.random() < 0.5 else np.concatenate([data, data[:cut]])
                    )
            elif choice < 0.9:  # the header's row count
                changed["rows"] = int(header["rows"]) + int(rng.choice([-2, -1, 1, 2]))
            else:  # a path tensor of another dtype
                if rng.random() < 0.5:
                    new_offsets = offsets.astype(np.int32)
                else:
                    new_data = data.astype(np.int32)
            target = folder / "case.safetensors"
            _seal(target, changed, {**tensors, "path_bytes": new_data, "path_offsets": new_offsets})
            _judge_store(f"{kind} paths #{number}", tally, target)


def _row_faiss(folder: Path, scale: int, tally: Tally, kinds: tuple[str, ...]) -> None:
    rng = np.random.default_rng(13)
    stores = _stores(folder)
    for kind in kinds:
        header, tensors = _read(stores[kind])
        _, arrays, key = _faiss_array(header, tensors)
        raw = arrays[key].tobytes()
        fields = _vector_fields(raw)
        for _ in range(40 * scale):
            choice = rng.random()
            if choice < 0.6 and fields:  # an item of a vector, or its length, set to a hostile value
                at, item, count = fields[int(rng.integers(0, len(fields)))]
                value = HOSTILE_INTS[int(rng.integers(0, len(HOSTILE_INTS)))]
                if rng.random() < 0.2:
                    where, size = at, 8
                else:
                    where, size = at + 8 + item * int(rng.integers(0, count)), max(item, 4)
            else:  # any aligned word of the stream
                size = 4 if rng.random() < 0.5 else 8
                where = int(rng.integers(0, max(1, len(raw) - size)))
                value = HOSTILE_INTS[int(rng.integers(0, len(HOSTILE_INTS)))]
            if where + size > len(raw):
                continue
            fmt = "<i" if size == 4 else "<q"
            bound = 2 ** (8 * size - 1)
            value = max(-bound, min(bound - 1, value))

            def patch(data: bytearray, where: int = where, fmt: str = fmt, value: int = value) -> None:
                struct.pack_into(fmt, data, where, value)

            target = folder / "case.safetensors"
            _patched_store(stores[kind], target, patch)
            _judge_store(f"{kind} @{where}={value}", tally, target)


def _row_container(folder: Path, scale: int, tally: Tally) -> None:
    rng = np.random.default_rng(14)
    for kind, source in _stores(folder).items():
        header, tensors = _read(source)
        blob = tensors["index"].tobytes()
        length = struct.unpack_from("<I", blob, 8)[0]
        container = json.loads(blob[12 : 12 + length])
        for number in range(10 * scale):
            changed = json.loads(json.dumps(container))
            value = HOSTILE_JSON[int(rng.integers(0, len(HOSTILE_JSON)))]
            where = rng.random()
            if where < 0.4 and changed["arrays"]:
                entry = changed["arrays"][int(rng.integers(0, len(changed["arrays"])))]
                entry[["shape", "offset", "nbytes", "dtype", "name"][int(rng.integers(0, 5))]] = (
                    [2**64] if rng.random() < 0.3 else value
                )
            elif where < 0.8 and changed["meta"]:
                keys = list(changed["meta"])
                changed["meta"][keys[int(rng.integers(0, len(keys)))]] = value
            else:
                changed[["format", "kind", "meta", "arrays"][int(rng.integers(0, 4))]] = value
            encoded = json.dumps(changed).encode()
            forged = blob[:8] + struct.pack("<I", len(encoded)) + encoded + blob[12 + length :]
            target = folder / "case.safetensors"
            _seal(
                target,
                json.loads(json.dumps(header)),
                {**tensors, "index": np.frombuffer(forged, dtype=np.uint8)},
            )
            _judge_store(f"{kind} container #{number}", tally, target)


# ---------------------------------------------------------------------------------------------- side files


def _special_files(folder: Path, name: str) -> Iterator[tuple[str, Path]]:
    """The same name as a FIFO, a link to /dev/zero, a folder and deep JSON, one after another."""
    target = folder / name
    for kind in ("fifo", "zero", "folder", "deep", "huge"):
        if target.is_dir() and not target.is_symlink():
            target.rmdir()
        elif target.exists() or target.is_symlink():
            target.unlink()
        if kind == "fifo":
            os.mkfifo(target)
        elif kind == "zero":
            target.symlink_to("/dev/zero")
        elif kind == "folder":
            target.mkdir()
        elif kind == "deep":
            target.write_text("[" * 200_000 + "]" * 200_000)
        else:
            target.write_text('{"a": ' + "9" * 5000 + "}")
        yield kind, target
    if target.is_dir() and not target.is_symlink():
        target.rmdir()
    elif target.exists() or target.is_symlink():
        target.unlink()


def _mutations(document: Any, rng: np.random.Generator, count: int) -> Iterator[Any]:
    """``count`` copies of a JSON document, each with one value somewhere replaced by a hostile one."""
    for _ in range(count):
        changed = json.loads(json.dumps(document))
        node = changed
        while True:
            keys = (
                list(node)
                if isinstance(node, dict)
                else list(range(len(node)))
                if isinstance(node, list)
                else []
            )
            if not keys:
                break
            key = keys[int(rng.integers(0, len(keys)))]
            child = node[key]
            if isinstance(child, (dict, list)) and child and rng.random() < 0.6:
                node = child
                continue
            node[key] = HOSTILE_JSON[int(rng.integers(0, len(HOSTILE_JSON)))]
            break
        yield changed


def _row_settings(folder: Path, scale: int, tally: Tally) -> None:
    from galleria.evaluation import RetrievalConfig
    from galleria.tune.settings import read_settings, write_settings
    from galleria.viewer.settings import SearchSettings

    rng = np.random.default_rng(15)
    file = folder / "tuned.json"
    configs = [
        RetrievalConfig("a", query_expansion=True, expansion_alpha=2.0, rerank=True, pool=150),
        RetrievalConfig("b", rerank=True, rerank_method="dba", rerank_params={"neighbors": 5}),
        RetrievalConfig("c", rerank=True, rerank_method="gnn", rerank_params={"k1": 9}),
    ]

    def attempt() -> str | None:
        config = read_settings(file)
        if not isinstance(config, RetrievalConfig):
            return "not a RetrievalConfig"
        try:
            SearchSettings(config=config)
        except ValueError as error:  # the request bound, named: fine
            return None if "between 1 and" in str(error) or "at least k" in str(error) else str(error)
        return None

    for config in configs:
        write_settings(file, config)
        document = json.loads(file.read_text())
        for changed in _mutations(document, rng, 20 * scale):
            file.write_text(json.dumps(changed))
            _judge("settings", tally, attempt, "tuned.json")
        for _, _special in _special_files(folder, "tuned.json"):
            _judge(f"settings {_}", tally, attempt, "tuned.json")


def _row_file_manifest(folder: Path, scale: int, tally: Tally) -> None:
    from galleria.cli._edits import manifest_path, parse_manifest

    rng = np.random.default_rng(16)
    store = folder / "m.safetensors"
    InMemoryImageEmbeddingStore.from_embeddings(["/g/a.png", "/g/b.png"], np.eye(2)).save_to_disk(store)
    manifest = Path(manifest_path(str(store)))
    document = {"format": "galleria-files", "version": 1, "files": {"/g/a.png": [10, 5], "/g/b.png": [3, 4]}}

    def attempt() -> str | None:
        stats = parse_manifest(str(store))
        ok = all(
            isinstance(k, str) and len(v) == 2 and all(type(x) is int for x in v) for k, v in stats.items()
        )
        return None if ok else f"bad stats {stats!r:.80}"

    for changed in _mutations(document, rng, 40 * scale):
        manifest.write_text(json.dumps(changed))
        _judge("files.json", tally, attempt, "m.safetensors.files.json")
    for kind, _special in _special_files(folder, manifest.name):
        _judge(f"files.json {kind}", tally, attempt, "m.safetensors.files.json")


def _row_shards(folder: Path, scale: int, tally: Tally) -> None:
    from galleria.engines.shards import ShardWriter, read_shards

    rng = np.random.default_rng(17)
    shards = folder / "shards"
    vectors = rng.normal(size=(20, 6)).astype(np.float32)

    def fresh() -> dict[str, Any]:
        writer = ShardWriter(shards, rows_per_shard=8)
        writer.write([f"/g/{i}.png" for i in range(20)], vectors)
        writer.close(embedder={"type": "pixel", "size": 4})
        return json.loads((shards / "manifest.json").read_text())

    def attempt() -> str | None:
        paths, found, manifest = read_shards(shards)
        if found.shape != (len(paths), manifest["dim"] or 0) or not np.isfinite(found).all():
            return f"vectors {found.shape} for {len(paths)} paths"
        return None

    document = fresh()
    for changed in _mutations(document, rng, 30 * scale):
        (shards / "manifest.json").write_text(json.dumps(changed))
        _judge("manifest", tally, attempt, str(shards))
    for kind, _special in _special_files(shards, "manifest.json"):
        _judge(f"manifest {kind}", tally, attempt, "manifest.json")
    document = fresh()
    part = shards / "part-00001.parquet"
    original = part.read_bytes()
    for number in range(20 * scale):  # Parquet bytes changed and the manifest's digest resealed
        data = bytearray(original)
        for position in rng.integers(0, len(data), int(rng.integers(1, 4))):
            data[position] ^= int(rng.integers(1, 256))
        part.write_bytes(bytes(data))
        document["shards"][1]["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
        (shards / "manifest.json").write_text(json.dumps(document))
        _judge(f"parquet #{number}", tally, attempt, "part-00001.parquet")
    document = fresh()
    for kind, _special in _special_files(shards, "part-00001.parquet"):
        _judge(f"shard {kind}", tally, attempt, "part-00001.parquet")


ROWS: dict[str, Callable[[Path, int, Tally], None]] = {
    "store file: random byte flips": lambda f, s, t: _row_store_bytes(f, s, t, "flip"),
    "store file: truncations": lambda f, s, t: _row_store_bytes(f, s, t, "cut"),
    "store header: hostile values, digests resealed": _row_header,
    "store path tensors: hostile offsets/bytes/rows, resealed": _row_paths,
    "HNSW graph stream: hostile ids/offsets/levels, resealed": lambda f, s, t: _row_faiss(f, s, t, ("hnsw",)),
    "IVF-PQ stream (removed rows): hostile fields, resealed": lambda f, s, t: _row_faiss(f, s, t, ("ivfpq",)),
    "IVF-flat + direct map (external): hostile fields, resealed": lambda f, s, t: _row_faiss(
        f, s, t, ("ivf_direct_map",)
    ),
    "ID map in a pre-transform, PQ (external): hostile fields, resealed": lambda f, s, t: _row_faiss(
        f, s, t, ("pretransform_id_map", "pq")
    ),
    "index container JSON: hostile values, resealed": _row_container,
    "settings file: hostile values, FIFO/device/deep": _row_settings,
    "STORE.files.json: hostile values, FIFO/device/deep": _row_file_manifest,
    "shards: manifest values, Parquet bytes, FIFO/device": _row_shards,
}


def run_row(name: str, folder: Path, scale: int = 1) -> Tally:
    """Run the row ``name`` of :data:`ROWS` in ``folder`` (a fresh, empty folder)."""
    tally = Tally()
    ROWS[name](folder, scale, tally)
    return tally
