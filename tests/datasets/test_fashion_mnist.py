"""Tests of the Fashion-MNIST reader: synthetic idx files (plain and gzipped, damaged ones too), and the
real files when Debian's ``dataset-fashion-mnist`` is installed (``.ci/run`` installs it)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from _support.fashion_files import fake as _fake
from galleria.datasets.fashion_mnist import (
    DEBIAN_ROOT,
    FASHION_MNIST_CLASSES,
    benchmark_split,
    fashion_mnist,
    fashion_mnist_folder,
)


@pytest.mark.parametrize("gz", [True, False])
def test_reads_plain_and_gzipped_files(tmp_path: Path, gz: bool) -> None:
    _fake(tmp_path, gz=gz)
    data = fashion_mnist(tmp_path, part="test")
    assert data.images.shape == (30, 28, 28) and data.images.dtype == np.uint8
    assert data.labels.tolist() == [i % 10 for i in range(30)] and len(data) == 30
    assert data.rgb([0, 1]).shape == (2, 28, 28, 3)
    assert len(fashion_mnist(tmp_path).labels) == 60


def test_damaged_files_are_refused_before_allocating(tmp_path: Path) -> None:
    _fake(tmp_path, gz=False)
    images = tmp_path / "t10k-images-idx3-ubyte"
    good = images.read_bytes()
    images.write_bytes(struct.pack(">IIII", 0x803, 10**9, 28, 28))  # a huge count: refused by the header
    with pytest.raises(ValueError, match="at most 10000"):
        fashion_mnist(tmp_path, part="test")
    images.write_bytes(struct.pack(">IIII", 0x803, 30, 32, 32) + good[16:])
    with pytest.raises(ValueError, match="28×28"):
        fashion_mnist(tmp_path, part="test")
    images.write_bytes(good[:-5])
    with pytest.raises(ValueError, match="truncated"):
        fashion_mnist(tmp_path, part="test")
    images.write_bytes(good + b"x")
    with pytest.raises(ValueError, match="more data"):
        fashion_mnist(tmp_path, part="test")
    images.write_bytes(struct.pack(">I", 0x801) + good[4:])
    with pytest.raises(ValueError, match="magic"):
        fashion_mnist(tmp_path, part="test")
    images.write_bytes(good)
    labels = tmp_path / "t10k-labels-idx1-ubyte"
    labels.write_bytes(struct.pack(">II", 0x801, 29) + bytes(29))
    with pytest.raises(ValueError, match="disagree"):
        fashion_mnist(tmp_path, part="test")
    labels.write_bytes(struct.pack(">II", 0x801, 30) + bytes([11] * 30))
    with pytest.raises(ValueError, match="outside"):
        fashion_mnist(tmp_path, part="test")
    (tmp_path / "bad.gz").write_bytes(b"not gzip")
    os.remove(labels)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="cannot be read"):
        fashion_mnist(tmp_path, part="test")


def test_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
        fashion_mnist(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        fashion_mnist(tmp_path / "missing")
    with pytest.raises(ValueError, match="part must be one of"):
        fashion_mnist(tmp_path, part="validation")
    with pytest.raises(TypeError, match="root"):
        fashion_mnist(3)  # type: ignore[arg-type]


def test_benchmark_split_and_folder(tmp_path: Path) -> None:
    root = tmp_path / "idx"
    root.mkdir()
    _fake(root)
    queries, gallery = benchmark_split(root, n_queries=10, n_gallery=20, seed=1)
    assert (
        np.bincount(queries.labels).tolist() == [1] * 10 and np.bincount(gallery.labels).tolist() == [2] * 10
    )
    again = benchmark_split(root, n_queries=10, n_gallery=20, seed=1)[0]
    np.testing.assert_array_equal(again.images, queries.images)
    with pytest.raises(ValueError, match="exceed"):
        benchmark_split(root, n_queries=31, n_gallery=20)
    split = fashion_mnist_folder(tmp_path / "cache", root, n_queries=10, n_gallery=20, seed=1)
    assert len(split.query_paths) == 10 and len(split.gallery_paths) == 20
    assert sorted(set(split.gallery_labels))[0] == "0-t-shirt-top"
    assert fashion_mnist_folder(tmp_path / "cache", root, n_queries=10, n_gallery=20, seed=1) == split


@pytest.mark.skipif(not os.path.isdir(DEBIAN_ROOT), reason="Debian's dataset-fashion-mnist is not installed")
def test_the_real_files() -> None:
    test = fashion_mnist(part="test")
    assert test.images.shape == (10000, 28, 28)
    assert np.bincount(test.labels).tolist() == [1000] * 10
    assert FASHION_MNIST_CLASSES[int(test.labels[0])] == "Ankle boot"
