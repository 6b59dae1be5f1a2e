"""Embedding gallery files and queries for the store: decode on threads, embed in batches, check outputs."""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._progress import BatchPacer
from galleria._progress import progress as progress_bar
from galleria.distances import zero_rows
from galleria.embedders.base import batch_size_of
from galleria.images.batches import iter_decoded_batches
from galleria.images.reading import reader_for
from galleria.store._checks import check_embedding_output

__all__ = ["DIGEST_BYTES", "check_directions", "embed_files", "embed_queries", "pixel_digest"]

#: Bytes of a pixel digest (:func:`pixel_digest`).
DIGEST_BYTES = 8


def pixel_digest(image: np.ndarray) -> bytes:
    """A 64-bit digest of decoded pixels (BLAKE2b over the shape and the bytes): two images get the
    same digest when, and (but for a 2⁻⁶⁴ chance) only when, they decoded to the same pixels.

    Examples
    --------
    >>> a = np.zeros((2, 2, 3), dtype=np.uint8)
    >>> pixel_digest(a) == pixel_digest(a.copy()), pixel_digest(a) == pixel_digest(a.reshape(4, 1, 3))
    (True, False)
    """
    import hashlib

    digest = hashlib.blake2b(digest_size=DIGEST_BYTES, person=b"galleria-pixels")
    digest.update(repr(tuple(image.shape)).encode())
    digest.update(np.ascontiguousarray(image).data)
    return digest.digest()


def check_directions(vectors: np.ndarray, space: str, what: str) -> None:
    """In cosine space a zero vector has no direction: ValueError naming ``what`` and the row."""
    if space == "cosine":
        zeros = zero_rows(vectors)
        if zeros.size:
            raise ValueError(
                f"{what}: row {int(zeros[0])} is a zero vector, which has no direction in cosine space"
            )


def embed_files(
    paths: list[str],
    embedder: Any,
    dim: int | None,
    space: str,
    *,
    num_workers: int,
    num_prefetch_batches: int,
    skip_errors: bool,
    progress: bool,
    description: str,
    on_images: Any = None,
    pace: list[float] | None = None,
    digests: list[bytes] | None = None,
) -> tuple[list[str], np.ndarray, list[str]]:
    """Decode and embed ``paths``; return the paths kept, their (n, d) vectors and the paths skipped.

    ``digests``, when given, receives the :func:`pixel_digest` of every kept image, in order.

    Progress moves per image: a bar (or, off a terminal, a line every few seconds) when
    ``progress``, or ``on_images(1)`` when given (a caller's own bar spanning several calls). A
    skipped image counts at once; while a batch is embedded, its images count one by one at the pace
    of the batches before (:class:`~galleria._progress.BatchPacer`), and all of them once it is
    done. ``pace`` (a list holding at most one float, seconds per image) carries that pace from one
    call to the next and is updated.
    """
    kept: list[str] = []
    chunks: list[np.ndarray] = []
    skipped: list[str] = []
    batches = iter_decoded_batches(
        paths,
        batch_size_of(embedder),
        num_workers=num_workers,
        num_prefetch_batches=num_prefetch_batches,
        skip_errors=skip_errors,
        reader=reader_for(embedder),
    )
    bar = progress_bar(len(paths), description, "img", enabled=progress and on_images is None)
    pacer = BatchPacer(on_images if on_images is not None else bar.update, pace[0] if pace else None)
    with bar:
        try:
            for batch in batches:
                skipped.extend(batch.skipped)
                for _ in batch.skipped:
                    pacer.advance(1)
                if batch.images:
                    with pacer.batch(len(batch.images)):
                        raw = embedder.embed(batch.images)
                    output = check_embedding_output(raw, len(batch.images), dim, "gallery images")
                    check_directions(output, space, "the embedder's output for gallery images")
                    dim = output.shape[1]
                    chunks.append(output)
                    kept.extend(batch.paths)
                    if digests is not None:
                        digests.extend(pixel_digest(image) for image in batch.images)
        finally:
            batches.close()
    if pace is not None and pacer.seconds_per_item is not None:
        pace[:] = [pacer.seconds_per_item]
    vectors = np.concatenate(chunks) if chunks else np.zeros((0, dim or 0), dtype=np.float32)
    return kept, vectors, skipped


def embed_queries(
    embed: Any, items: list[Any], batch: int, dim: int | None, space: str, what: str
) -> np.ndarray:
    """Embed a non-empty list of queries ``batch`` at a time with ``embed``, checking every output."""
    chunks = []
    for start in range(0, len(items), batch):
        part = items[start : start + batch]
        output = check_embedding_output(embed(part), len(part), dim, what)
        check_directions(output, space, f"the embedder's output for {what}")
        chunks.append(output)
    return np.concatenate(chunks)
