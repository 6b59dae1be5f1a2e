"""Decoding gallery images on worker threads, a bounded number of batches ahead of the embedder.

Pillow releases the GIL while it decodes, so a few threads keep the embedder fed even on a small
machine. Batches come out in the order of the paths; at most ``num_prefetch_batches`` batches
are being decoded (or waiting) while the consumer works on the current one, which bounds memory.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from galleria._warnings import SkippedImageWarning
from galleria.images.reading import ImageReadError, read_rgb

__all__ = ["DecodedBatch", "iter_decoded_batches"]


@dataclass
class DecodedBatch:
    """One batch of decoded gallery images.

    Attributes
    ----------
    paths : list of str
        The paths that decoded, in input order.
    images : list of numpy.ndarray
        Their (H, W, 3) uint8 RGB arrays, aligned with ``paths``.
    skipped : list of str
        Paths of this batch that could not be read (only with ``skip_errors=True``).
    """

    paths: list[str] = field(default_factory=list)
    images: list[np.ndarray] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def iter_decoded_batches(
    paths: Sequence[str],
    batch_size: int,
    *,
    num_workers: int,
    num_prefetch_batches: int,
    skip_errors: bool,
    reader: Callable[[str], np.ndarray] = read_rgb,
) -> Generator[DecodedBatch, None, None]:
    """Yield the images of ``paths`` decoded on ``num_workers`` threads, batch by batch, in order.

    Parameters
    ----------
    paths : sequence of str
        Image files to decode.
    batch_size : int
        Paths per batch (the last batch may be shorter).
    num_workers : int
        Decoding threads.
    num_prefetch_batches : int
        At most this many batches are submitted beyond the one the consumer is working on.
    skip_errors : bool
        If False, the first unreadable image raises :class:`ImageReadError` (naming the path) and
        the remaining work is cancelled. If True, it is left out of its batch, listed in
        ``DecodedBatch.skipped`` and reported with a :class:`~galleria.SkippedImageWarning`.
    reader : callable, optional
        Decodes one path (defaults to :func:`read_rgb`); it should raise ``ImageReadError``.

    Yields
    ------
    DecodedBatch
        One per ``batch_size`` paths, in order.
    """
    starts = range(0, len(paths), batch_size)
    executor = ThreadPoolExecutor(max_workers=num_workers, thread_name_prefix="galleria-decode")
    pending: deque[tuple[list[str], list[Future[np.ndarray]]]] = deque()
    next_batch = 0

    def submit_next() -> None:
        nonlocal next_batch
        start = starts[next_batch]
        batch_paths = list(paths[start : start + batch_size])
        pending.append((batch_paths, [executor.submit(reader, path) for path in batch_paths]))
        next_batch += 1

    try:
        while True:
            # The batch about to be handed out plus at most num_prefetch_batches beyond it.
            while next_batch < len(starts) and len(pending) < num_prefetch_batches + 1:
                submit_next()
            if not pending:
                break
            batch_paths, futures = pending.popleft()
            batch = DecodedBatch()
            for path, future in zip(batch_paths, futures, strict=True):
                try:
                    image = future.result()
                except ImageReadError as error:
                    if not skip_errors:
                        raise
                    reason = error.reason if isinstance(error.reason, str) else str(error)
                    warnings.warn(SkippedImageWarning(path, reason), stacklevel=3)
                    batch.skipped.append(path)
                    continue
                batch.paths.append(path)
                batch.images.append(image)
            yield batch
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
