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
from galleria.engines.shards import write_shards
from galleria.images.reading import ImageReadError, decode_rgb, draft_size_for, read_rgb

__all__ = ["LOCAL_RAY_OPTIONS", "build_with_ray", "init_local_ray", "list_image_uris", "read_image_any"]

#: The options of a local Ray that galleria starts itself (never of a cluster it joins). Ray's
#: start-up is its processes starting (GCS, raylet, dashboard and agents, workers: each a Python
#: interpreter importing Ray); ``benchmarks/bench_ray.py --startup`` measured the other options
#: (``log_to_driver``, metrics collection, object store size, worker prestart) and none changed it.
LOCAL_RAY_OPTIONS: dict[str, Any] = {"include_dashboard": False}


def _ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("the Ray engine needs Ray Data: pip install -e '.[ray]'") from error
    return ray


def init_local_ray(num_cpus: int | None = None, num_gpus: int | None = 0) -> None:
    """Start a local Ray with :data:`LOCAL_RAY_OPTIONS` (what ``build_with_ray`` does when Ray is not
    running and no ``address`` is given); starting it once ahead keeps its start-up out of the builds.

    ``num_cpus`` None uses every CPU; ``num_gpus`` 0 skips probing for GPUs (None: detect them).
    """
    if num_cpus is not None:
        num_cpus = check_positive_int("num_cpus", num_cpus)
    if num_gpus is not None and (not isinstance(num_gpus, int) or isinstance(num_gpus, bool) or num_gpus < 0):
        raise ValueError(f"num_gpus must be None or an integer >= 0, got {num_gpus!r}")
    ray = _ray()
    if ray.is_initialized():
        raise RuntimeError("Ray is already running in this process")
    ray.init(num_cpus=num_cpus, num_gpus=num_gpus, **LOCAL_RAY_OPTIONS)


def _is_uri(path: str) -> bool:
    return "://" in path


def read_image_any(path: str, min_size: tuple[int, int] | None = None) -> np.ndarray:
    """Decode a local path, or a URI through pyarrow's filesystems (``s3://``, ``gs://``, ``file://``).

    ``min_size`` is the store's draft size (:func:`~galleria.images.reading.draft_size_for`), so a
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


# ------------------------------------------------------------------ packed chunks
# Ray Data carries one row per *chunk* of images, never one per image: a chunk row holds its first
# row number, its paths (an Arrow list), and then either its decoded pixels packed in one buffer or
# its vectors packed in one buffer. The actors read those buffers through zero-copy numpy views.


def _decode_chunks(table: Any, min_size: tuple[int, int] | None = None) -> Any:
    """Ray task: decode each chunk's paths into one packed uint8 buffer (+ shapes, + error messages)."""
    import pyarrow as pa

    packed: list[bytes] = []
    shapes: list[np.ndarray] = []
    errors: list[list[str]] = []
    for names in table.column("paths").to_pylist():
        images: list[np.ndarray] = []
        messages: list[str] = []
        for name in names:
            try:
                images.append(np.ascontiguousarray(read_image_any(name, min_size)))
                messages.append("")
            except ImageReadError as error:
                images.append(np.zeros((0, 0, 3), dtype=np.uint8))
                messages.append(str(error) or "unreadable")
        shapes.append(np.asarray([image.shape for image in images], dtype=np.int32).reshape(-1))
        packed.append(b"".join(image.tobytes() for image in images))
        errors.append(messages)
    return pa.table(
        {
            "start": table.column("start"),
            "shapes": pa.array(shapes, type=pa.list_(pa.int32())),
            "pixels": pa.array(packed, type=pa.large_binary()),
            "errors": pa.array(errors, type=pa.list_(pa.string())),
        }
    )


def _unpack_pixels(buffer: Any, shapes: np.ndarray) -> list[np.ndarray]:
    """Zero-copy (read-only) views of the images packed in ``buffer`` with ``(k, 3)`` ``shapes``."""
    flat = np.frombuffer(buffer, dtype=np.uint8)
    sizes = np.prod(shapes, axis=1)
    ends = np.cumsum(sizes)
    return [
        flat[end - size : end].reshape(shape) for shape, size, end in zip(shapes, sizes, ends, strict=True)
    ]


class _EmbedActor:
    """Ray actor: holds the embedder once (rebuilt from its config, or the object sent) and embeds chunks.

    Each chunk is embedded ``batch_size`` rows at a time, the batches of the threaded builder
    (chunks start at multiples of ``batch_size``), unreadable rows left out of their batch.
    """

    def __init__(self, config: dict[str, Any] | None, embedder: Any) -> None:
        if embedder is None:
            if config is None:
                raise ValueError("an embedding actor needs the embedder or its config")
            embedder = embedder_from_config(config)
        self.embedder = embedder
        self.batch_size = batch_size_of(self.embedder)

    def __call__(self, table: Any) -> Any:
        import pyarrow as pa

        vectors_out: list[bytes] = []
        dims: list[int] = []
        for row in range(table.num_rows):
            shapes = np.asarray(table.column("shapes")[row].values, dtype=np.int64).reshape(-1, 3)
            images = _unpack_pixels(table.column("pixels")[row].as_buffer(), shapes)
            keep = np.asarray([not error for error in table.column("errors")[row].as_py()], dtype=bool)
            parts: list[np.ndarray] = []
            for start in range(0, len(images), self.batch_size):
                batch = [
                    images[i] for i in range(start, min(start + self.batch_size, len(images))) if keep[i]
                ]
                if batch:
                    output = np.asarray(self.embedder.embed(batch), dtype=np.float32)
                    if output.ndim != 2 or output.shape[0] != len(batch) or not np.isfinite(output).all():
                        raise ValueError(
                            "the embedder returned the wrong number of rows or non-finite values"
                        )
                    parts.append(output)
            block = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
            vectors_out.append(np.ascontiguousarray(block).tobytes())
            dims.append(int(block.shape[1]))
        return pa.table(
            {
                "start": table.column("start"),
                "errors": table.column("errors"),
                "dim": pa.array(dims, type=pa.int64()),
                "vectors": pa.array(vectors_out, type=pa.large_binary()),
            }
        )


def _collect(embedded: Any, count: int, chunk: int) -> tuple[np.ndarray, dict[int, str]]:
    """Gather the actors' chunks in row order: the kept rows' (k, d) vectors and {row: error message}.

    Every chunk must arrive exactly once (a retried task must not duplicate or lose rows).
    """
    blocks: dict[int, np.ndarray] = {}
    errors: dict[int, str] = {}
    dim = 0
    for table in embedded.iter_batches(batch_size=None, batch_format="pyarrow"):
        for row in range(table.num_rows):
            start = int(table.column("start")[row].as_py())
            if start in blocks or start % chunk or not 0 <= start < count:
                raise RuntimeError(f"Ray returned the chunk at row {start} twice or out of range")
            width = int(table.column("dim")[row].as_py())
            messages = table.column("errors")[row].as_py()
            for offset, message in enumerate(messages):
                if message:
                    errors[start + offset] = message
            flat = np.frombuffer(table.column("vectors")[row].as_buffer(), dtype=np.float32)
            kept = len(messages) - sum(1 for message in messages if message)
            if (kept and width and flat.size != kept * width) or len(messages) != min(chunk, count - start):
                raise RuntimeError(f"Ray returned a damaged chunk at row {start}")
            if kept and dim and width != dim:
                raise ValueError(f"the embedder returned {width} dimensions, earlier batches {dim}")
            dim = dim or width
            blocks[start] = flat.reshape(kept, width) if kept else flat.reshape(0, width)
    if len(blocks) != -(-count // chunk):
        raise RuntimeError(f"Ray returned {len(blocks)} chunks for {count} images (rows lost)")
    parts = [blocks[start] for start in sorted(blocks) if blocks[start].shape[0]]
    vectors = np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)
    return vectors, errors


def _gallery_paths(images: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The gallery's paths or URIs: a folder listed like ``galleria build``, a URI listed through
    pyarrow, or a sequence of non-empty paths; TypeError/ValueError naming ``images`` otherwise."""
    from galleria.datasets import list_images

    if isinstance(images, (str, os.PathLike)):
        source = os.fspath(images)
        paths = list_image_uris(source) if _is_uri(source) else list_images(source)
    else:
        paths = [os.fspath(path) for path in images]
        if not all(isinstance(path, str) and path for path in paths):
            raise TypeError("images must be a folder, a URI or a sequence of non-empty paths")
    if len(set(paths)) != len(paths):
        raise ValueError("images lists a path twice")
    return paths


def _embed_on_ray(
    ray: Any,
    paths: list[str],
    embedder: Any,
    actor_args: tuple[Any, Any],
    sizes: tuple[int, int, float],
) -> tuple[np.ndarray, dict[int, str]]:
    """Decode in Ray Data tasks and embed in an actor pool (built from ``actor_args``: the embedder's
    config, or the embedder itself); the kept rows' vectors in row order and {row: error message}.
    ``sizes``: images per chunk, actors, GPUs per actor."""
    decode_batch_size, num_actors, gpus_per_actor = sizes
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    batch_size = batch_size_of(embedder)

    # Chunks start at multiples of the embedder's batch size, so that the actors' batches are the
    # threaded builder's batches (bit-identical vectors, whatever the model).
    chunk = batch_size * max(1, -(-decode_batch_size // batch_size))
    # One item per chunk, built on the driver (no remote task just to describe the input blocks).
    dataset = ray.data.from_items(
        [{"start": start, "paths": paths[start : start + chunk]} for start in range(0, len(paths), chunk)],
        override_num_blocks=max(1, -(-len(paths) // chunk)),
    )
    dataset = dataset.map_batches(
        _decode_chunks,
        fn_kwargs={"min_size": draft_size_for(embedder)},
        batch_size=1,
        batch_format="pyarrow",
        zero_copy_batch=True,
    )  # (Ray Data retries a failed task without limit, and restarts a dead actor: its defaults)
    embedded = dataset.map_batches(
        _EmbedActor,
        fn_constructor_args=actor_args,
        batch_size=1,
        batch_format="pyarrow",
        zero_copy_batch=True,
        # Grow to num_actors as CPUs allow: actors that took every CPU would starve the decode tasks.
        compute=ray.data.ActorPoolStrategy(min_size=1, max_size=num_actors),
        num_gpus=gpus_per_actor or None,
    )
    return _collect(embedded, len(paths), chunk)


def _actor_args(embedder: Any, gpus_per_actor: Any) -> tuple[dict[str, Any] | None, tuple[Any, Any]]:
    """Check the embedder and ``gpus_per_actor``; (the embedder's config, what each actor is built from)."""
    if not isinstance(gpus_per_actor, (int, float)) or isinstance(gpus_per_actor, bool) or gpus_per_actor < 0:
        raise ValueError(f"gpus_per_actor must be a number >= 0, got {gpus_per_actor!r}")
    if not callable(getattr(embedder, "embed", None)):
        raise TypeError(f"embedder must have an embed(images) method, got {type(embedder).__name__}")
    config = embedder_config(embedder)
    # A config that records a local checkpoint names a file only this machine is known to have
    # (and rebuilding from it needs the file): such an embedder travels to the actors as itself.
    portable = config is not None and "checkpoint_sha256" not in config
    return config, (config, None if portable else embedder)


def _connect(address: str | None, num_cpus: int | None, gpus_per_actor: float) -> Any:
    """``ray``, joined to ``address`` or a local Ray started with galleria's options, unless running."""
    ray = _ray()
    if not ray.is_initialized():
        if address is None:
            init_local_ray(num_cpus, None if gpus_per_actor else 0)
        else:  # a cluster's own settings apply: nothing of galleria's is imposed on it
            ray.init(address=address)
    return ray


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
    decode_batch_size: int = 256,
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
        Rebuilt in each actor from its ``config()`` when it has one that names no local checkpoint
        file, otherwise sent as it is (pickled by Ray).
    out_dir : str or os.PathLike
        Folder for ``part-NNNNN.parquet`` shards and ``manifest.json``.
    skip_errors : bool
        Leave unreadable images out (listed in ``store.skipped`` and the manifest, with a warning)
        instead of raising :class:`~galleria.images.reading.ImageReadError`.
    address : str, optional
        Ray cluster address, joined with the cluster's own settings; None reuses the Ray this
        process runs, or starts a local one with :data:`LOCAL_RAY_OPTIONS` (:func:`init_local_ray`).
    decode_batch_size : int
        Images per Ray Data row (a chunk decoded by one task and embedded by one actor call),
        rounded up to a multiple of the embedder's batch size; hundreds keep Ray's per-row
        overhead small.
    num_cpus : int, optional
        CPUs of a local Ray started here (None: all).

    Returns
    -------
    InMemoryImageEmbeddingStore
        Built, with the embedder attached.
    """
    from galleria.store import InMemoryImageEmbeddingStore, resolve_index

    skip_errors = check_bool("skip_errors", skip_errors)
    num_actors = check_positive_int("num_actors", num_actors)
    decode_batch_size = check_positive_int("decode_batch_size", decode_batch_size)
    rows_per_shard = check_positive_int("rows_per_shard", rows_per_shard)
    config, actor_args = _actor_args(embedder, gpus_per_actor)
    paths = _gallery_paths(images)
    resolve_index(search_index, space, index_params)  # checks the index arguments before any work
    ray = _connect(address, num_cpus, gpus_per_actor)
    sizes = (decode_batch_size, num_actors, gpus_per_actor)
    vectors, errors = _embed_on_ray(ray, paths, embedder, actor_args, sizes)
    if errors and not skip_errors:
        raise ImageReadError(errors[min(errors)])
    for row in sorted(errors):
        warnings.warn(f"skipping unreadable image: {errors[row]}", RuntimeWarning, stacklevel=2)
    kept_rows, skipped = write_shards(paths, vectors, errors, out_dir, rows_per_shard, config)
    # The store is built from the vectors in memory, equal to the shards' (no reading them back).
    return InMemoryImageEmbeddingStore.from_embeddings(
        [paths[row] for row in kept_rows],
        vectors,
        embedder,
        search_index,
        space=space,
        index_params=index_params,
        skipped=skipped,
    )
