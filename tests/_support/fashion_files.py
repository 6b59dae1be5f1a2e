"""Fashion-MNIST files in the IDX format, written small for the tests."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

__all__ = ["fake", "write"]


def write(root: Path, part: str, images: np.ndarray, labels: np.ndarray, *, gz: bool = True) -> None:
    prefix = {"train": "train", "test": "t10k"}[part]
    image_bytes = struct.pack(">IIII", 0x803, *images.shape) + images.astype(np.uint8).tobytes()
    label_bytes = struct.pack(">II", 0x801, labels.size) + labels.astype(np.uint8).tobytes()
    for name, data in (
        (f"{prefix}-images-idx3-ubyte", image_bytes),
        (f"{prefix}-labels-idx1-ubyte", label_bytes),
    ):
        if gz:
            (root / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (root / name).write_bytes(data)


def fake(root: Path, n_train: int = 60, n_test: int = 30, gz: bool = True) -> None:
    rng = np.random.default_rng(0)
    for part, count in (("train", n_train), ("test", n_test)):
        write(root, part, rng.integers(0, 256, (count, 28, 28)), np.arange(count) % 10, gz=gz)
