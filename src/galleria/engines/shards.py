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

__all__ = ["MANIFEST_NAME", "ShardWriter", "read_shards", "store_from_shards"]

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


def _read_manifest(folder: str) -> dict[str, Any]:
    name = os.path.join(folder, MANIFEST_NAME)
    try:
        with open(name, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except json.JSONDecodeError as error:
        raise ValueError(f"{name!r} is not a valid JSON manifest: {error}") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise ValueError(f"{name!r} is not a galleria shard manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{name!r} has shard format version {manifest.get('format_version')!r}")
    dim, rows, shards = manifest.get("dim"), manifest.get("rows"), manifest.get("shards")
    if not isinstance(rows, int) or rows < 0 or not isinstance(shards, list):
        raise ValueError(f"{name!r} has an invalid 'rows' or 'shards' entry")
    if rows and (not isinstance(dim, int) or dim < 1):
        raise ValueError(f"{name!r} has an invalid dim {dim!r}")
    for entry in shards:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("file"), str)
            or not _SHARD_NAME.fullmatch(entry["file"])
            or not isinstance(entry.get("rows"), int)
            or not isinstance(entry.get("sha256"), str)
        ):
            raise ValueError(f"{name!r} lists an invalid shard {entry!r} (names must be part-NNNNN.parquet)")
    if sum(entry["rows"] for entry in shards) != rows:
        raise ValueError(f"{name!r}: the shards' row counts do not add up to {rows}")
    skipped = manifest.get("skipped", [])
    if not isinstance(skipped, list) or not all(isinstance(p, str) for p in skipped):
        raise ValueError(f"{name!r} has an invalid 'skipped' list")
    return manifest


def read_shards(folder: str | os.PathLike[str]) -> tuple[list[str], np.ndarray, dict[str, Any]]:
    """Read a shard folder: ``(paths, (n, dim) float32 vectors, manifest)``, rows in order.

    Raises ValueError for a damaged manifest or shard (digest, rows, names, shapes).
    """
    _, pq = _pyarrow()
    root = os.fspath(folder)
    manifest = _read_manifest(root)
    dim = manifest["dim"] or 0
    vectors = np.empty((manifest["rows"], dim), dtype=np.float32)
    paths: list[str] = []
    start = 0
    for entry in manifest["shards"]:
        name = os.path.join(root, entry["file"])
        if _sha256(name) != entry["sha256"]:
            raise ValueError(
                f"shard {name!r} does not match its digest in the manifest (damaged or tampered)"
            )
        table = pq.read_table(name)
        if table.column_names != ["row", "path", "vector"] or table.num_rows != entry["rows"]:
            raise ValueError(f"shard {name!r} has columns {table.column_names} and {table.num_rows} rows")
        rows = table.column("row").to_numpy()
        if not np.array_equal(rows, np.arange(start, start + entry["rows"])):
            raise ValueError(f"shard {name!r} does not hold rows {start} .. {start + entry['rows'] - 1}")
        flat = table.column("vector").combine_chunks()
        if flat.type.list_size != dim:
            raise ValueError(f"shard {name!r} holds vectors of dimension {flat.type.list_size}, not {dim}")
        block = flat.flatten().to_numpy().reshape(entry["rows"], dim)
        if not np.isfinite(block).all():
            raise ValueError(f"shard {name!r} holds non-finite vectors")
        vectors[start : start + entry["rows"]] = block
        paths.extend(table.column("path").to_pylist())
        start += entry["rows"]
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
        embedder = embedder_from_config(manifest["embedder"])
    store = InMemoryImageEmbeddingStore.from_embeddings(
        paths, vectors, embedder, search_index, space=space, index_params=index_params
    )
    store._skipped = list(manifest.get("skipped", []))
    return store
