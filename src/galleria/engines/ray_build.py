"""Distributed gallery embedding on Ray Data: read, decode in tasks, embed in an actor pool, write shards.

Ray is an optional dependency: ``pip install -e '.[ray]'``. With no ``address`` a local Ray
is started (``num_cpus`` of this machine); ``address="auto"`` or ``"ray://host:10001"`` joins an
existing cluster, and the same call then runs on every node.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from galleria._validation import check_bool, check_positive_int
from galleria.datasets.folder import IMAGE_EXTENSIONS
from galleria.embedders import batch_size_of, embedder_config, embedder_from_config
from galleria.engines.shards import ShardWriter, store_from_shards
from galleria.store.reading import ImageReadError, decode_rgb, draft_size_for, read_rgb

__all__ = ["build_with_ray", "list_image_uris", "read_image_any"]


def _ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("the Ray engine needs Ray Data: pip install -e '.[ray]'") from error
    return ray


def _is_uri(path: str) -> bool:
    return "://" in path


def read_image_any(path: str, min_size: tuple[int, int] | None = None) -> np.ndarray:
    """Decode a local path, or a URI through pyarrow's filesystems (``s3://``, ``gs://``, ``file://``).

    ``min_size`` is the store's draft size (:func:`~galleria.store.reading.draft_size_for`), so a
    large JPEG decodes exactly as an in-process build decodes it.
    """
    if not _is_uri(path):
        return read_rgb(path, min_size)
    from pyarrow import fs

    try:
        filesystem, inner = fs.FileSystem.from_uri(path)
        with filesystem.open_input_stream(inner) as stream:
            data = stream.read()
    except (OSError, ValueError) as error:
        raise ImageReadError(f"cannot read image {path!r}: {error}", path=path, reason=str(error)) from error
    return decode_rgb(data, min_size, max_pixels=None, name=path)  # the decoding rules of local files


def list_image_uris(uri: str) -> list[str]:
    """List the image files under a filesystem URI (recursively, sorted, hidden names skipped)."""
    from pyarrow import fs

    filesystem, root = fs.FileSystem.from_uri(uri)
    scheme = uri.split("://", 1)[0]
    infos = filesystem.get_file_info(fs.FileSelector(root, recursive=True))
    found = [
        info.path
        for info in infos
        if info.type == fs.FileType.File
        and os.path.splitext(info.path)[1].lower() in IMAGE_EXTENSIONS
        and not any(part.startswith(".") for part in info.path[len(root) :].split("/"))
    ]
    prefix = f"{scheme}://" if scheme != "file" else "file://"
    return sorted(prefix + path for path in found)


def _decode_batch(batch: dict[str, np.ndarray], min_size: tuple[int, int] | None = None) -> dict[str, Any]:
    """Ray task: decode a batch of paths; unreadable ones get an error message and no pixels."""
    images: list[np.ndarray] = []
    errors: list[str] = []
    for path in batch["path"]:
        try:
            images.append(read_image_any(str(path), min_size))
            errors.append("")
        except ImageReadError as error:
            images.append(np.zeros((1, 1, 3), dtype=np.uint8))
            errors.append(str(error) or "unreadable")
    pixels = np.empty(len(images), dtype=object)
    pixels[:] = images
    return {
        "row": batch["row"],
        "path": batch["path"],
        "error": np.asarray(errors, dtype=object),
        "pixels": pixels,
    }


class _EmbedActor:
    """Ray actor: holds the embedder once (rebuilt from its config, or the object sent) and embeds batches."""

    def __init__(self, config: dict[str, Any] | None, embedder: Any) -> None:
        self.embedder = embedder_from_config(config) if config is not None else embedder

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        keep = np.asarray([not error for error in batch["error"]], dtype=bool)
        images = [batch["pixels"][i] for i in np.flatnonzero(keep)]
        vectors = np.asarray(self.embedder.embed(images), dtype=np.float32) if images else None
        dim = 0 if vectors is None else vectors.shape[1]
        out = np.zeros((len(keep), dim), dtype=np.float32)
        if vectors is not None:
            if vectors.shape[0] != len(images) or not np.isfinite(vectors).all():
                raise ValueError("the embedder returned the wrong number of rows or non-finite values")
            out[keep] = vectors
        column = np.empty(len(keep), dtype=object)
        column[:] = list(out)
        return {"row": batch["row"], "path": batch["path"], "error": batch["error"], "vector": column}


def build_with_ray(
    images: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    embedder: Any,
    out_dir: str | os.PathLike[str],
    search_index: Any = None,
    *,
    space: str | None = None,
    index_params: dict[str, Any] | None = None,
    skip_errors: bool = False,
    address: str | None = None,
    num_actors: int = 2,
    gpus_per_actor: float = 0.0,
    decode_batch_size: int = 64,
    rows_per_shard: int = 65_536,
    num_cpus: int | None = None,
) -> Any:
    """Embed a gallery on Ray, write Parquet shards + manifest to ``out_dir``, and build a store from them.

    Ray Data reads the image list, decodes it in parallel tasks, embeds it in a pool of
    ``num_actors`` actors (each holds the model once; ``gpus_per_actor`` GPUs each when there are
    GPUs) and streams the vectors back to be written as shards in row order. Then any index is
    built from the shards (``search_index`` as for the store: ``"exact"``, ``"hnsw"``, ``"ivfpq"``
    or an index object such as :class:`~galleria.index.MilvusIndex`). A worker that dies is
    restarted by Ray and its batch retried; rows are checked to arrive exactly once.

    Parameters
    ----------
    images : folder, filesystem URI (``s3://bucket/photos``) or sequence of paths/URIs
        The gallery. A folder is listed like ``galleria build`` does; URIs go through pyarrow.
    embedder : Embedder
        Rebuilt in each actor from its ``config()`` when it has one, otherwise sent as it is.
    out_dir : str or os.PathLike
        Folder for ``part-NNNNN.parquet`` shards and ``manifest.json``.
    skip_errors : bool
        Leave unreadable images out (listed in ``store.skipped`` and the manifest, with a warning)
        instead of raising :class:`~galleria.store.reading.ImageReadError`.
    address : str, optional
        Ray cluster address; None starts (or reuses) a local Ray.
    num_cpus : int, optional
        CPUs of a local Ray started here (None: all).

    Returns
    -------
    InMemoryImageEmbeddingStore
        Built, with the embedder attached.
    """
    from galleria.datasets import list_images
    from galleria.store._checks import resolve_index

    skip_errors = check_bool("skip_errors", skip_errors)
    num_actors = check_positive_int("num_actors", num_actors)
    decode_batch_size = check_positive_int("decode_batch_size", decode_batch_size)
    rows_per_shard = check_positive_int("rows_per_shard", rows_per_shard)
    if not isinstance(gpus_per_actor, (int, float)) or isinstance(gpus_per_actor, bool) or gpus_per_actor < 0:
        raise ValueError(f"gpus_per_actor must be a number >= 0, got {gpus_per_actor!r}")
    if not callable(getattr(embedder, "embed", None)):
        raise TypeError(f"embedder must have an embed(images) method, got {type(embedder).__name__}")
    if isinstance(images, (str, os.PathLike)):
        source = os.fspath(images)
        paths = list_image_uris(source) if _is_uri(source) else list_images(source)
    else:
        paths = [os.fspath(path) for path in images]
        if not all(isinstance(path, str) and path for path in paths):
            raise TypeError("images must be a folder, a URI or a sequence of non-empty paths")
    if len(set(paths)) != len(paths):
        raise ValueError("images lists a path twice")
    resolve_index(search_index, space, index_params)  # checks the index arguments before any work
    config = embedder_config(embedder)
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, num_cpus=num_cpus if address is None else None, include_dashboard=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    batch_size = batch_size_of(embedder)

    dataset = ray.data.from_items([{"row": row, "path": path} for row, path in enumerate(paths)])
    decoded = dataset.map_batches(
        _decode_batch,
        fn_kwargs={"min_size": draft_size_for(embedder)},
        batch_size=decode_batch_size,
        max_retries=-1,
    )
    embedded = decoded.map_batches(
        _EmbedActor,
        fn_constructor_args=(config, None if config is not None else embedder),
        batch_size=batch_size,
        # Grow to num_actors as CPUs allow: actors that took every CPU would starve the decode tasks.
        compute=ray.data.ActorPoolStrategy(min_size=1, max_size=num_actors),
        num_gpus=gpus_per_actor or None,
        max_restarts=-1,
        max_task_retries=-1,
    )
    rows: list[np.ndarray] = []
    kept_paths: list[str] = []
    vectors: list[np.ndarray] = []
    errors: dict[int, str] = {}
    for batch in embedded.iter_batches(batch_size=None, batch_format="numpy"):
        order = np.asarray(batch["row"], dtype=np.int64)
        rows.append(order)
        for row, path, error, vector in zip(
            order, batch["path"], batch["error"], batch["vector"], strict=True
        ):
            if error:
                errors[int(row)] = str(error)
            else:
                kept_paths.append(str(path))
                vectors.append(np.asarray(vector, dtype=np.float32))
    seen = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    if seen.size != len(paths) or not np.array_equal(np.sort(seen), np.arange(len(paths))):
        raise RuntimeError(f"Ray returned {seen.size} rows for {len(paths)} images (rows lost or duplicated)")
    if errors and not skip_errors:
        first = min(errors)
        raise ImageReadError(errors[first])
    for row in sorted(errors):
        warnings.warn(f"skipping unreadable image: {errors[row]}", RuntimeWarning, stacklevel=2)
    # Back to input order: rows came in whatever order the actors finished.
    kept_rows = np.asarray(sorted(set(range(len(paths))) - set(errors)), dtype=np.int64)
    position = {path: index for index, path in enumerate(kept_paths)}
    writer = ShardWriter(out_dir, rows_per_shard)
    for start in range(0, kept_rows.size, rows_per_shard):
        chunk = [paths[row] for row in kept_rows[start : start + rows_per_shard]]
        writer.write(chunk, np.stack([vectors[position[path]] for path in chunk]))
    writer.close(skipped=[paths[row] for row in sorted(errors)], embedder=config)
    return store_from_shards(out_dir, search_index, embedder=embedder, space=space, index_params=index_params)
