"""``galleria build``: embed a folder of images and save the searchable store to one file.

The build runs in chunks. Every ``--checkpoint-every`` seconds, and when it is interrupted (Ctrl-C,
an unreadable image, any error), the embeddings done so far are saved beside the output as
``STORE.partial``; ``--resume`` continues from that file, and a finished build removes it. A build
killed outright keeps the last periodic checkpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from galleria.cli._common import CliError, add_command, print_json
from galleria.cli._edits import add_wait_option, file_stat, save_with_manifest, store_writer
from galleria.cli._embedder_options import embedder_settings, make_embedder, parse_embedder_spec
from galleria.cli._parse import check_existing_folder, parse_float, parse_int
from galleria.cli._rerank_options import PRECOMPUTE_RERANK_CHOICES
from galleria.cli._store_options import add_store_options, index_params

__all__ = ["CHECKPOINT_SUFFIX", "add_parser", "checkpoint_path", "run"]

#: Suffix of the checkpoint file an interrupted build leaves beside its output.
CHECKPOINT_SUFFIX = ".partial"
#: Default seconds between two checkpoints of a running build.
DEFAULT_CHECKPOINT_EVERY = 60.0
#: Images per chunk, in embedder batches.
_BATCHES_PER_CHUNK = 4

_EXAMPLES = """\
  galleria build photos/ --out photos.safetensors
  galleria build photos/ --out photos.safetensors --index hnsw --workers 8 --skip-errors
  galleria build photos/ --out photos.safetensors --resume          # after an interrupted build
  galleria build photos/ --out photos-clip.safetensors --embedder clip:ViT-B-32:openai --device cuda
  galleria build photos/ --out tiny.safetensors --embedder pixel:16:gray
  galleria build photos/ --out photos.safetensors --engine ray --shards photos-shards/ --index ivfpq
  galleria build photos/ --out photos.safetensors --precompute-rerank decoupled-diffusion
"""


def checkpoint_path(out: str) -> str:
    """The checkpoint file of a build writing ``out``."""
    return out + CHECKPOINT_SUFFIX


def add_parser(subparsers: Any) -> None:
    """Register ``galleria build``."""
    parser = add_command(
        subparsers,
        "build",
        help="embed a folder of images into a store file",
        description=(
            "Embed every image under IMAGE_DIR (sub-folders included, hidden ones skipped, symbolic links "
            "followed once) with a progress bar, index the vectors and save the store to one .safetensors "
            "file. An interrupted build keeps a checkpoint, STORE.partial, that --resume continues."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("image_dir", metavar="IMAGE_DIR", help="folder of images to index")
    parser.add_argument("--out", required=True, metavar="STORE", help="store file to write (.safetensors)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace STORE if it exists (without it, an existing store is never replaced)",
    )
    add_store_options(parser)
    add_wait_option(parser)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted build from its STORE.partial checkpoint",
    )
    parser.add_argument(
        "--checkpoint-every",
        default=str(DEFAULT_CHECKPOINT_EVERY),
        metavar="SECONDS",
        help="seconds between two checkpoints of a running build; 0 saves after every chunk "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--precompute-rerank",
        default=None,
        choices=PRECOMPUTE_RERANK_CHOICES,
        metavar="METHOD",
        help="compute METHOD's offline part now and keep it in STORE, so that `search --rerank "
        "--rerank-method METHOD` starts at once: decoupled-diffusion (its parameters read from the "
        "gallery, as --rerank reads them)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    engine = parser.add_argument_group("engine (the ray extra: pip install -e '.[ray]')")
    engine.add_argument(
        "--engine", default="threads", choices=("threads", "ray"), help="who embeds (default: %(default)s)"
    )
    engine.add_argument("--ray-address", default=None, metavar="ADDR", help="Ray cluster (default: local)")
    engine.add_argument("--actors", default="2", metavar="N", help="embedding actors (default: %(default)s)")
    engine.add_argument("--gpus-per-actor", default="0", metavar="X", help="GPUs per actor (default: 0)")
    engine.add_argument(
        "--shards", default=None, metavar="DIR", help="Parquet shard folder (default: STORE + '.shards')"
    )
    parser.set_defaults(run=run)


def _check_out(out: str, overwrite: bool) -> None:
    """CliError if ``out`` is not a regular file (:func:`galleria._files.check_output_path`), or
    exists and ``--overwrite`` is not given."""
    from galleria._files import check_output_path

    try:
        check_output_path(out, "--out")
    except ValueError as error:
        raise CliError(str(error)) from None
    if os.path.exists(out) and not overwrite:
        raise CliError(f"--out {out!r} already exists; pass --overwrite to replace it")


def _comparable(config: Any) -> Any:
    if isinstance(config, dict):
        return {key: value for key, value in config.items() if key != "batch_size"}
    return config


def _check_checkpoint(path: str, embedder: Any, index: str, space: str) -> None:
    """CliError unless the checkpoint at ``path`` was made with the same embedder, index and space."""
    from galleria.embedders import embedder_config
    from galleria.store.persistence import read_store_header

    header = read_store_header(path)
    embedder_entry = header.get("embedder")
    index_entry = header.get("index")
    saved = {
        "embedder": _comparable(embedder_entry.get("config") if isinstance(embedder_entry, dict) else None),
        "index": index_entry.get("name") if isinstance(index_entry, dict) else None,
        "space": header.get("space"),
    }
    wanted = {"embedder": _comparable(embedder_config(embedder)), "index": index, "space": space}
    for key, value in wanted.items():
        if saved[key] != value:
            raise CliError(
                f"the checkpoint {path!r} was made with {key} {saved[key]!r}, not {value!r}; "
                "give the options of the interrupted build, or delete the checkpoint to start over"
            )


def run(args: argparse.Namespace) -> int:
    """Build and save the store; print how many images were indexed and skipped."""
    image_dir = check_existing_folder("IMAGE_DIR", args.image_dir)
    parse_embedder_spec(args.embedder)
    workers = parse_int("--workers", args.workers)
    every = parse_float("--checkpoint-every", args.checkpoint_every)
    args.index_params = index_params(args)
    settings = embedder_settings(args)
    out = args.out
    if os.path.isdir(out):
        raise CliError(f"--out {out!r} is a directory; give a file name such as gallery.safetensors")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise CliError(f"--out {out!r}: folder {parent!r} does not exist")
    _check_out(out, args.overwrite)
    with store_writer(args, out):  # one writer per store (its checkpoint included)
        _check_out(out, args.overwrite)  # another build may have finished while this one waited
        return _build(args, image_dir, workers, every, settings)


def _build(args: argparse.Namespace, image_dir: str, workers: int, every: float, settings: Any) -> int:
    """Everything ``run`` does once the arguments are checked and the writer lock is held."""
    from galleria.datasets import list_images
    from galleria.datasets.labels import labels_root_of

    out = args.out
    partial = checkpoint_path(out)
    if os.path.exists(partial) and not args.resume:
        raise CliError(
            f"an interrupted build left the checkpoint {partial!r}: pass --resume to continue it, "
            "or delete it to start over"
        )
    paths = list_images(os.path.abspath(image_dir))
    stats = {path: stat for path in paths if (stat := file_stat(path)) is not None}
    embedder = make_embedder(args.embedder, **settings)

    if getattr(args, "engine", "threads") == "ray":
        if args.resume:
            raise CliError("--resume applies to --engine threads; Ray retries failed tasks by itself")
        store, resumed = _build_on_ray(args, paths, embedder, out), 0
    else:
        store, resumed = _build_with_threads(args, paths, embedder, partial, workers, every)
    if len(store) == 0:
        raise CliError(f"no image under {image_dir!r} could be read; nothing to save")
    store.labels_root = labels_root_of(os.path.abspath(image_dir), store.paths)
    precomputed = None
    if args.precompute_rerank is not None:
        from galleria.rerank.registry import precompute_rerank

        try:
            precomputed = precompute_rerank(store, args.precompute_rerank)
        except (TypeError, ValueError) as error:
            raise CliError(f"--precompute-rerank {args.precompute_rerank}: {error}") from None
    save_with_manifest(store, out, stats)
    if os.path.exists(partial):
        os.remove(partial)
    skipped = [str(item) for item in store.skipped]
    if args.json:
        summary: dict[str, Any] = {
            "store": out,
            "indexed": len(store),
            "resumed": resumed,
            "skipped": skipped,
            "embedder": args.embedder,
            "index": args.index,
            "space": args.space,
        }
        if precomputed is not None:
            summary["precomputed"] = {"method": args.precompute_rerank, "params": precomputed}
        print_json(summary)
    else:
        print(f"indexed {len(store)} image(s), skipped {len(skipped)} → {out}")
        if precomputed is not None:
            settings_text = ", ".join(f"{key}={value}" for key, value in precomputed.items())
            print(f"kept {args.precompute_rerank}'s offline part in the store ({settings_text})")
    return 0


def _build_with_threads(
    args: argparse.Namespace, paths: list[str], embedder: Any, partial: str, workers: int, every: float
) -> tuple[Any, int]:
    """``--engine threads``: embed in chunks, keeping a checkpoint at ``partial``; (store, images resumed)."""
    from galleria._progress import progress
    from galleria.embedders.base import batch_size_of
    from galleria.store import ImageReadError, InMemoryImageEmbeddingStore

    store: Any = None
    resumed = 0
    if args.resume and os.path.exists(partial):
        _check_checkpoint(partial, embedder, args.index, args.space)
        store = InMemoryImageEmbeddingStore.load_from_disk(partial, embedder=embedder)
        listed = set(paths)
        vanished = [path for path in store.paths if path not in listed]
        if vanished:
            store.remove_images(vanished)
        done = set(store.paths) | set(store.skipped)
        resumed = len(store)
        paths_left = [path for path in paths if path not in done]
        print(f"resuming from {partial}: {resumed} image(s) already embedded", file=sys.stderr)
    else:
        paths_left = paths

    chunk = max(1, _BATCHES_PER_CHUNK * batch_size_of(embedder))
    last_save = time.monotonic()
    position = 0
    try:
        with progress(
            len(paths), "building gallery", "img", enabled=not args.json, initial=len(paths) - len(paths_left)
        ) as bar:
            while position < len(paths_left) or store is None:
                part = paths_left[position : position + chunk]
                if store is None:
                    store = InMemoryImageEmbeddingStore(
                        part,
                        embedder,
                        args.index,
                        space=args.space,
                        index_params=args.index_params,
                        skip_errors=args.skip_errors,
                        num_workers=workers,
                    )
                    store.build_store(progress=False, on_progress=bar.update)  # moves per image
                elif part:
                    store.add_images(part, on_progress=bar.update)
                position += len(part)
                if position < len(paths_left) and time.monotonic() - last_save >= every:
                    store.save_to_disk(partial)
                    last_save = time.monotonic()
    except BaseException as error:
        note = ""
        if store is not None and store.is_built and (len(store) or store.skipped):
            store.save_to_disk(partial)
            note = (
                f"{len(store)} embedded image(s) are kept in {partial}: run the same command with --resume "
                "to continue"
            )
        if isinstance(error, ImageReadError):
            hint = "pass --skip-errors to skip unreadable images"
            raise CliError(f"{error} ({hint}); {note}" if note else f"{error} ({hint})") from None
        if note and isinstance(error, Exception):
            raise CliError(f"{error}; {note}") from None
        if note:
            print(f"galleria build: {note}", file=sys.stderr)
        raise
    return store, resumed


def _build_on_ray(args: argparse.Namespace, paths: list[str], embedder: Any, out: str) -> Any:
    """``--engine ray``: embed on Ray Data, write Parquet shards beside the store, build the index."""
    from galleria.engines import build_with_ray

    actors = parse_int("--actors", args.actors)
    try:
        gpus = float(args.gpus_per_actor)
    except ValueError:
        raise CliError(f"--gpus-per-actor must be a number, got {args.gpus_per_actor!r}") from None
    shards = args.shards if args.shards is not None else out + ".shards"
    try:
        return build_with_ray(
            paths,
            embedder,
            shards,
            args.index,
            space=args.space,
            index_params=getattr(args, "index_params", None),
            skip_errors=args.skip_errors,
            address=args.ray_address,
            num_actors=actors,
            gpus_per_actor=gpus,
        )
    except ImportError as error:
        raise CliError(str(error)) from error
