"""Embedding shards: Parquet files of (row, path, vector) plus a JSON manifest, and a store built from them.

Layout of a shard folder::

    manifest.json          {"format": "galleria-shards", "format_version": 1, "dim": 512, "rows": n,
                            "embedder": {...} | null, "skipped": [...],
                            "shards": [{"file": "part-00000.parquet", "rows": 4096, "sha256": "..."}, ...]}
    part-00000.parquet     columns row (int64), path (string), vector (fixed-size list of float32)

Rows are numbered ``0 .. n - 1`` across the shards in order. The manifest is untrusted input when
read back: shard names must be plain ``part-NNNNN.parquet`` files of the same folder (no other
file is ever opened), and every shard's digest, row count, row numbers and vector shape are
checked before its vectors are used. pyarrow is needed (``pip install -e '.[ray]'``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from galleria._files import atomic_path

__all__ = ["MANIFEST_NAME", "ShardWriter", "read_shards", "store_from_shards", "write_shards"]

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "galleria-shards"
FORMAT_VERSION = 1
_SHARD_NAME = re.compile(r"part-\d{5}\.parquet")


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("embedding shards need pyarrow: pip install -e '.[ray]'") from error
    return pa, pq


def _sha256(name: str) -> str:
    digest = hashlib.sha256()
    with open(name, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class ShardWriter:
    """Write (path, vector) rows to numbered Parquet shards in ``folder``; :meth:`close` writes the manifest.

    Parameters
    ----------
    folder : str or os.PathLike
        Output folder (created if missing). Existing shards and manifest there are replaced.
    rows_per_shard : int
        Rows per Parquet file.
    """

    def __init__(self, folder: str | os.PathLike[str], rows_per_shard: int = 65_536) -> None:
        self.folder = os.fspath(folder)
        os.makedirs(self.folder, exist_ok=True)
        for name in os.listdir(self.folder):
            if _SHARD_NAME.fullmatch(name) or name == MANIFEST_NAME:
                os.remove(os.path.join(self.folder, name))
        self.rows_per_shard = rows_per_shard
        self.dim: int | None = None
        self.rows = 0
        self._shards: list[dict[str, Any]] = []
        self._paths: list[str] = []
        self._vectors: list[np.ndarray] = []
        self._buffered = 0

    def write(self, paths: Sequence[str], vectors: np.ndarray) -> None:
        """Append rows (numbered after those already written); full shards are flushed to disk."""
        if vectors.ndim != 2 or vectors.shape[0] != len(paths):
            raise ValueError(f"vectors must have shape ({len(paths)}, dim), got {vectors.shape}")
        if self.dim is None:
            self.dim = int(vectors.shape[1])
        elif vectors.shape[1] != self.dim:
            raise ValueError(f"vectors have dimension {vectors.shape[1]}, earlier rows {self.dim}")
        self._paths.extend(paths)
        self._vectors.append(np.ascontiguousarray(vectors, dtype=np.float32))
        self._buffered += len(paths)
        while self._buffered >= self.rows_per_shard:
            self._flush(self.rows_per_shard)

    def _flush(self, count: int) -> None:
        pa, pq = _pyarrow()
        vectors = np.concatenate(self._vectors) if len(self._vectors) > 1 else self._vectors[0]
        head, rest = vectors[:count], vectors[count:]
        paths, self._paths = self._paths[:count], self._paths[count:]
        self._vectors = [rest] if rest.shape[0] else []
        self._buffered -= count
        assert self.dim is not None
        table = pa.table(
            {
                "row": pa.array(np.arange(self.rows, self.rows + count, dtype=np.int64)),
                "path": pa.array(paths, type=pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(head.reshape(-1)), self.dim),
            }
        )
        name = f"part-{len(self._shards):05d}.parquet"
        target = os.path.join(self.folder, name)
        with atomic_path(target) as temporary:
            pq.write_table(table, temporary)
        self._shards.append({"file": name, "rows": count, "sha256": _sha256(target)})
        self.rows += count

    def close(self, *, skipped: Sequence[str] = (), embedder: dict[str, Any] | None = None) -> str:
        """Flush the last shard and write the manifest; return the manifest's path."""
        if self._buffered:
            self._flush(self._buffered)
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "dim": self.dim,
            "rows": self.rows,
            "embedder": embedder,
            "skipped": list(skipped),
            "shards": self._shards,
        }
        target = os.path.join(self.folder, MANIFEST_NAME)
        with atomic_path(target) as temporary, open(temporary, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, ensure_ascii=False, indent=1)
        return target


#: Largest manifest read (a manifest lists shards and the skipped paths: a few kB to a few MB).
MAX_MANIFEST_BYTES = 64 << 20
#: Most rows a manifest may declare.
MAX_ROWS = 1 << 40
#: Most bytes of vectors one shard may decode to, per byte of the shard file: float32 embeddings do
#: not compress (about 1:1), so a shard that claims far more is refused before it is decoded.
MAX_EXPANSION = 64
_SHA256 = re.compile(r"[0-9a-f]{64}")


class _Manifest:
    """Typed access to a parsed manifest: every problem is a ValueError naming the file and the key."""

    def __init__(self, name: str, document: Any) -> None:
        self.name = name
        if not isinstance(document, dict):
            raise ValueError(f"{name!r} is not a galleria shard manifest (not a JSON object)")
        self.document: dict[str, Any] = document

    def fail(self, key: str, problem: str) -> ValueError:
        return ValueError(f"{self.name!r}: manifest key {key!r} {problem}")

    def integer(self, key: str, value: Any, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            shown = (
                repr(value)[:60] if not isinstance(value, int) or abs(value) < 1 << 64 else "a huge integer"
            )
            raise self.fail(key, f"must be an integer in [{low}, {high}], got {shown}")
        return value


def _read_manifest(folder: str) -> dict[str, Any]:
    """Read and check ``manifest.json`` of ``folder`` (see the module docstring); return it."""
    from galleria._files import load_json, read_regular_file
    from galleria._validation import MAX_VECTOR_DIM

    name = os.path.join(folder, MANIFEST_NAME)
    checked = _Manifest(
        name, load_json(read_regular_file(name, "shard manifest", MAX_MANIFEST_BYTES), repr(name))
    )
    manifest = checked.document
    if manifest.get("format") != FORMAT_NAME:
        raise ValueError(f"{name!r} is not a galleria shard manifest (manifest key 'format')")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise checked.fail(
            "format_version", f"must be {FORMAT_VERSION}, got {manifest.get('format_version')!r}"
        )
    unknown = sorted(
        map(str, set(manifest) - {"format", "format_version", "dim", "rows", "embedder", "skipped", "shards"})
    )
    if unknown:
        raise ValueError(f"{name!r}: unknown manifest key(s) {unknown}")
    rows = checked.integer("rows", manifest.get("rows"), 0, MAX_ROWS)
    dim = manifest.get("dim")
    if rows or dim is not None:
        checked.integer("dim", dim, 1, MAX_VECTOR_DIM)
    shards = manifest.get("shards")
    if not isinstance(shards, list):
        raise checked.fail("shards", "must be a list")
    seen: set[str] = set()
    for position, entry in enumerate(shards):
        key = f"shards[{position}]"
        if not isinstance(entry, dict) or set(entry) != {"file", "rows", "sha256"}:
            raise checked.fail(key, "must be an object with exactly 'file', 'rows' and 'sha256'")
        if not isinstance(entry["file"], str) or not _SHARD_NAME.fullmatch(entry["file"]):
            raise checked.fail(
                f"{key}.file", f"must name a part-NNNNN.parquet file, got {entry['file']!r:.80}"
            )
        if entry["file"] in seen:
            raise checked.fail(f"{key}.file", f"names {entry['file']!r} twice")
        seen.add(entry["file"])
        checked.integer(f"{key}.rows", entry["rows"], 0, MAX_ROWS)
        if not isinstance(entry["sha256"], str) or not _SHA256.fullmatch(entry["sha256"]):
            raise checked.fail(f"{key}.sha256", "must be a SHA-256 hex digest")
    if sum(entry["rows"] for entry in shards) != rows:
        raise checked.fail("rows", f"is {rows}, but the shards' row counts add up to another number")
    skipped = manifest.get("skipped", [])
    if not isinstance(skipped, list) or not all(isinstance(p, str) and p for p in skipped):
        raise checked.fail("skipped", "must be a list of path strings")
    embedder = manifest.get("embedder")
    if embedder is not None and not isinstance(embedder, dict):
        raise checked.fail("embedder", "must be null or an embedder config object")
    return manifest


def _read_shard(
    pq: Any, handle: Any, name: str, entry: dict[str, Any], start: int, dim: int
) -> tuple[list[str], np.ndarray]:
    """Check one open shard (digest, size, schema, rows) and return its paths and vectors."""
    size = os.fstat(handle.fileno()).st_size
    if entry["rows"] * max(dim, 1) * 4 > MAX_EXPANSION * size + (1 << 20):
        raise ValueError(
            f"shard {name!r} of {size} bytes claims {entry['rows']} rows of dimension {dim} (more than "
            f"{MAX_EXPANSION} times its size once decoded)"
        )
    digest = hashlib.sha256()
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        digest.update(chunk)
    if digest.hexdigest() != entry["sha256"]:
        raise ValueError(f"shard {name!r} does not match its digest in the manifest (damaged or tampered)")
    handle.seek(0)
    try:
        parquet = pq.ParquetFile(handle)
        schema = parquet.schema_arrow
    except Exception as error:  # pyarrow raises its own error types for damaged files
        raise ValueError(f"shard {name!r} is not a readable Parquet file: {error}") from None
    types = {field.name: field.type for field in schema}
    pa, _ = _pyarrow()
    expected = {"row": pa.int64(), "path": pa.string(), "vector": pa.list_(pa.float32(), dim)}
    if list(types) != ["row", "path", "vector"] or any(types[key] != kind for key, kind in expected.items()):
        raise ValueError(
            f"shard {name!r} has columns {[f'{k}: {v}' for k, v in types.items()]}, expected row: int64, "
            f"path: string, vector: fixed_size_list<float>[{dim}]"
        )
    if parquet.metadata.num_rows != entry["rows"]:
        raise ValueError(
            f"shard {name!r} holds {parquet.metadata.num_rows} rows, its manifest entry {entry['rows']}"
        )
    try:
        table = parquet.read()
    except Exception as error:
        raise ValueError(f"shard {name!r} is not a readable Parquet file: {error}") from None
    rows = table.column("row").to_numpy()
    if not np.array_equal(rows, np.arange(start, start + entry["rows"])):
        raise ValueError(f"shard {name!r} does not hold rows {start} .. {start + entry['rows'] - 1}")
    block = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    block = np.asarray(block, dtype=np.float32).reshape(entry["rows"], dim)
    if not np.isfinite(block).all():
        raise ValueError(f"shard {name!r} holds non-finite vectors")
    paths = table.column("path").to_pylist()
    if any(path is None or not path for path in paths):
        raise ValueError(f"shard {name!r} holds an empty or missing path")
    return paths, block


def read_shards(folder: str | os.PathLike[str]) -> tuple[list[str], np.ndarray, dict[str, Any]]:
    """Read a shard folder: ``(paths, (n, dim) float32 vectors, manifest)``, rows in order.

    Only regular files are read (a FIFO or device is refused before a byte is read), the manifest
    up to :data:`MAX_MANIFEST_BYTES`; a shard's digest, schema, row count and row numbers are
    checked before its vectors are used, and a shard must not decode to more than
    :data:`MAX_EXPANSION` times its size. Raises ValueError naming the file (and the manifest key).
    """
    from galleria._files import open_regular_file

    _, pq = _pyarrow()
    root = os.fspath(folder)
    manifest = _read_manifest(root)
    dim = manifest["dim"] or 0
    paths: list[str] = []
    blocks: list[np.ndarray] = []
    start = 0
    for entry in manifest["shards"]:
        name = os.path.join(root, entry["file"])
        with open_regular_file(name, "shard") as handle:
            shard_paths, block = _read_shard(pq, handle, name, entry, start, dim)
        paths.extend(shard_paths)
        blocks.append(block)
        start += entry["rows"]
    vectors = np.concatenate(blocks) if blocks else np.zeros((0, dim), dtype=np.float32)
    return paths, vectors, manifest


def store_from_shards(
    folder: str | os.PathLike[str],
    search_index: Any = None,
    *,
    embedder: Any = None,
    space: str | None = None,
    index_params: dict[str, Any] | None = None,
) -> Any:
    """Build a store (any index: exact, HNSW, IVF-PQ, a :class:`~galleria.index.MilvusIndex`...) from shards.

    ``embedder=None`` rebuilds the manifest's embedder when it recorded one.
    """
    from galleria.embedders import embedder_from_config
    from galleria.store import InMemoryImageEmbeddingStore

    paths, vectors, manifest = read_shards(folder)
    if embedder is None and manifest.get("embedder") is not None:
        name = os.path.join(os.fspath(folder), MANIFEST_NAME)
        try:
            embedder = embedder_from_config(manifest["embedder"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{name!r}: manifest key 'embedder': {error}") from None
        declared = getattr(embedder, "dim", None)
        if manifest["rows"] and isinstance(declared, int) and declared != manifest["dim"]:
            raise ValueError(
                f"{name!r}: manifest key 'embedder' outputs dimension {declared}, "
                f"but 'dim' is {manifest['dim']}"
            )
    return InMemoryImageEmbeddingStore.from_embeddings(
        paths,
        vectors,
        embedder,
        search_index,
        space=space,
        index_params=index_params,
        skipped=manifest.get("skipped", []),
    )


def write_shards(
    paths: list[str],
    vectors: np.ndarray,
    errors: dict[int, str],
    out_dir: str | os.PathLike[str],
    rows_per_shard: int,
    config: dict[str, Any] | None,
) -> tuple[np.ndarray, list[str]]:
    """Write the rows of ``paths`` not in ``errors`` (their ``vectors`` in row order) as Parquet shards +
    manifest under ``out_dir``; (their row numbers, the skipped paths)."""
    kept_rows = np.setdiff1d(np.arange(len(paths)), np.fromiter(errors, dtype=np.int64, count=len(errors)))
    writer = ShardWriter(out_dir, rows_per_shard)
    for start in range(0, kept_rows.size, rows_per_shard):
        rows = kept_rows[start : start + rows_per_shard]
        writer.write([paths[row] for row in rows], vectors[start : start + rows.size])
    skipped = [paths[row] for row in sorted(errors)]
    writer.close(skipped=skipped, embedder=config)
    return kept_rows, skipped
