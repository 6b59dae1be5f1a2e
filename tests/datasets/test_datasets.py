"""Tests of galleria.datasets: image-folder listing and loading, the stratified split, the digits cache."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from _support.extras import needs
from galleria.datasets import (
    DIGITS_COUNT,
    IMAGE_EXTENSIONS,
    default_cache_dir,
    digits_folder,
    list_images,
    load_image_folder,
    stratified_split,
)
from galleria.datasets.digits import MARKER_NAME


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")


# ---------------------------------------------------------------------------------------------------------
# list_images


def test_list_images_sorted_recursive_and_filtered(tmp_path: Path) -> None:
    for name in (
        "b.png",
        "a.JPG",
        "sub/c.webp",
        "sub/deeper/d.jpeg",
        "notes.txt",
        ".hidden.png",
        ".cache/e.png",
    ):
        _touch(tmp_path / name)
    found = [os.path.relpath(p, tmp_path) for p in list_images(tmp_path)]
    assert found == sorted(found)
    assert set(found) == {
        "a.JPG",
        "b.png",
        os.path.join("sub", "c.webp"),
        os.path.join("sub", "deeper", "d.jpeg"),
    }
    shallow = [os.path.relpath(p, tmp_path) for p in list_images(tmp_path, recursive=False)]
    assert shallow == ["a.JPG", "b.png"]
    assert all(isinstance(p, str) for p in list_images(str(tmp_path)))


def test_list_images_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list_images(tmp_path / "missing")
    _touch(tmp_path / "file.png")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        list_images(tmp_path / "file.png")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is empty"):
        list_images(tmp_path / "empty")
    _touch(tmp_path / "text" / "a.txt")
    with pytest.raises(ValueError, match="holds no images"):
        list_images(tmp_path / "text")
    with pytest.raises(TypeError, match="root"):
        list_images(42)  # type: ignore[arg-type]


def test_extensions_are_lowercase_with_dot() -> None:
    assert all(ext.startswith(".") and ext == ext.lower() for ext in IMAGE_EXTENSIONS)
    assert ".png" in IMAGE_EXTENSIONS and ".jpg" in IMAGE_EXTENSIONS


# ---------------------------------------------------------------------------------------------------------
# load_image_folder


def test_load_image_folder_labels_from_subfolders(tmp_path: Path) -> None:
    for name in (
        "dog/2.png",
        "dog/1.png",
        "cat/1.jpg",
        "cat/x.txt",
        "cat/deep/3.png",
        "top.png",
        ".git/1.png",
    ):
        _touch(tmp_path / name)
    with pytest.warns(RuntimeWarning, match=r"1 image\(s\) directly in .* no label folder"):
        folder = load_image_folder(tmp_path)
    assert folder.root == str(tmp_path)
    assert [os.path.relpath(p, tmp_path) for p in folder.paths] == [
        os.path.join("cat", "1.jpg"),
        os.path.join("cat", "deep", "3.png"),
        os.path.join("dog", "1.png"),
        os.path.join("dog", "2.png"),
    ]
    assert folder.labels == ["cat", "cat", "dog", "dog"]
    assert folder.classes == ["cat", "dog"]
    assert len(folder) == 4
    # The same images as build's listing sees, less the unlabelled one in root.
    listed = [p for p in list_images(tmp_path) if os.path.dirname(p) != str(tmp_path)]
    assert listed == folder.paths


def test_symlinked_folders_followed_once_and_loops_reported(tmp_path: Path) -> None:
    _touch(tmp_path / "real" / "cat" / "1.png")
    _touch(tmp_path / "real" / "cat" / "sub" / "2.png")
    (tmp_path / "real" / "dog").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    _touch(tmp_path / "elsewhere" / "3.png")
    (tmp_path / "real" / "cat" / "sub" / "loop").symlink_to(tmp_path / "real" / "cat")
    root = tmp_path / "real"
    with pytest.warns(RuntimeWarning, match="loop.*already listed"):
        listed = list_images(root)
    assert [os.path.relpath(p, root) for p in listed] == [
        os.path.join("cat", "1.png"),
        os.path.join("cat", "sub", "2.png"),
        os.path.join("dog", "3.png"),
    ]
    with pytest.warns(RuntimeWarning, match="loop.*already listed"):
        folder = load_image_folder(root)
    assert folder.paths == listed
    assert folder.labels == ["cat", "cat", "dog"]


def test_load_image_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing"):
        load_image_folder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is empty"):
        load_image_folder(tmp_path / "empty")
    _touch(tmp_path / "flat" / "a.png")
    with pytest.raises(ValueError, match="no label sub-folders"):
        load_image_folder(tmp_path / "flat")
    _touch(tmp_path / "noimg" / "cat" / "a.txt")
    with pytest.raises(ValueError, match="holds no images"):
        load_image_folder(tmp_path / "noimg")
    with pytest.raises(TypeError, match="root"):
        load_image_folder(None)  # type: ignore[arg-type]


def test_image_folder_split_keeps_paths_and_labels_aligned(tmp_path: Path) -> None:
    for label in ("a", "b", "c"):
        for i in range(5):
            _touch(tmp_path / label / f"{i}.png")
    folder = load_image_folder(tmp_path)
    split = folder.split(n_queries=6, seed=3)
    assert len(split.query_paths) == 6 and len(split.gallery_paths) == 9
    assert set(split.query_paths).isdisjoint(split.gallery_paths)
    assert set(split.query_paths) | set(split.gallery_paths) == set(folder.paths)
    for path, label in zip(
        split.query_paths + split.gallery_paths, split.query_labels + split.gallery_labels, strict=True
    ):
        assert Path(path).parent.name == label
    assert Counter(split.query_labels) == {"a": 2, "b": 2, "c": 2}
    assert split.gallery_label_of == dict(zip(split.gallery_paths, split.gallery_labels, strict=True))
    again = folder.split(n_queries=6, seed=3)
    assert again == split
    by_fraction = folder.split(query_fraction=0.2, seed=0)
    assert len(by_fraction.query_paths) == 3


# ---------------------------------------------------------------------------------------------------------
# stratified_split


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=6),
    data=st.data(),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_split_properties(sizes: list[int], data: st.DataObject, seed: int) -> None:
    labels = [f"c{cls}" for cls, size in enumerate(sizes) for _ in range(size)]
    rng = np.random.default_rng(seed % 1000)
    labels = list(rng.permutation(labels))
    available = sum(size - 1 for size in sizes)
    if available == 0:
        with pytest.raises(ValueError, match="too many"):
            stratified_split(labels, n_queries=1)
        return
    n_queries = data.draw(st.integers(min_value=1, max_value=available))
    query_rows, gallery_rows = stratified_split(labels, n_queries=n_queries, seed=seed)
    # A partition of the rows, both parts sorted.
    assert query_rows.dtype == np.int64 and gallery_rows.dtype == np.int64
    assert list(query_rows) == sorted(query_rows) and list(gallery_rows) == sorted(gallery_rows)
    assert sorted([*query_rows, *gallery_rows]) == list(range(len(labels)))
    assert len(query_rows) == n_queries
    # Every label keeps a gallery image; per label the count is the proportional share rounded
    # down or up whenever no label hits its cap.
    counts = Counter(labels[i] for i in query_rows)
    size_of = Counter(labels)
    assert all(counts[label] <= size_of[label] - 1 for label in size_of)
    exact = {label: n_queries * size / len(labels) for label, size in size_of.items()}
    if all(np.ceil(exact[label]) <= size_of[label] - 1 for label in size_of):
        for label in size_of:
            assert np.floor(exact[label]) <= counts[label] <= np.ceil(exact[label])
    # Seeded: the same seed gives the same split.
    again, _ = stratified_split(labels, n_queries=n_queries, seed=seed)
    assert np.array_equal(again, query_rows)


def test_split_seed_changes_the_draw() -> None:
    labels = ["a"] * 50 + ["b"] * 50
    draws = {tuple(stratified_split(labels, n_queries=10, seed=seed)[0]) for seed in range(5)}
    assert len(draws) > 1


def test_split_fraction_rounds_to_nearest_count_at_least_one() -> None:
    labels = ["a"] * 10 + ["b"] * 10
    assert len(stratified_split(labels, query_fraction=0.25)[0]) == 5
    assert len(stratified_split(labels, query_fraction=0.01)[0]) == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, ValueError, "exactly one"),
        ({"n_queries": 2, "query_fraction": 0.5}, ValueError, "exactly one"),
        ({"n_queries": 0}, ValueError, "n_queries"),
        ({"n_queries": 2.0}, TypeError, "n_queries"),
        ({"n_queries": True}, TypeError, "n_queries"),
        ({"n_queries": 5}, ValueError, "too many"),
        ({"query_fraction": 0.0}, ValueError, "query_fraction"),
        ({"query_fraction": 1.0}, ValueError, "query_fraction"),
        ({"query_fraction": float("nan")}, ValueError, "query_fraction"),
        ({"query_fraction": "0.5"}, TypeError, "query_fraction"),
        ({"n_queries": 1, "seed": -1}, ValueError, "seed"),
        ({"n_queries": 1, "seed": 1.5}, TypeError, "seed"),
    ],
)
def test_split_errors(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    labels = ["a", "a", "a", "b", "b", "b"]  # at most 4 queries
    with pytest.raises(error, match=match):
        stratified_split(labels, **kwargs)  # type: ignore[arg-type]


def test_split_empty_labels() -> None:
    with pytest.raises(ValueError, match="labels"):
        stratified_split([], n_queries=1)


# ---------------------------------------------------------------------------------------------------------
# digits


@pytest.fixture(scope="module")
def digits_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@needs("sklearn")
def test_digits_folder_layout_and_content(digits_cache: Path) -> None:
    from sklearn.datasets import load_digits

    folder = digits_folder(digits_cache)
    assert folder == digits_cache / "digits"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [str(d) for d in range(10)]
    dataset = load_image_folder(folder)
    assert len(dataset) == DIGITS_COUNT
    data = load_digits()
    assert Counter(dataset.labels) == Counter(str(t) for t in data.target)
    # No staging folders left behind; the marker records the count.
    assert [p.name for p in digits_cache.iterdir()] == ["digits"]
    assert json.loads((folder / MARKER_NAME).read_text())["count"] == DIGITS_COUNT
    # The folder gets the usual permissions, not the private ones of its temporary staging folder.
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~mask
    # Image 0017: 32×32 RGB, three equal channels, 4×4 blocks of the scaled 8×8 scan.
    path = folder / str(data.target[17]) / "0017.png"
    with Image.open(path) as image:
        assert image.mode == "RGB" and image.size == (32, 32)
        pixels = np.asarray(image)
    assert np.array_equal(pixels[..., 0], pixels[..., 1]) and np.array_equal(pixels[..., 0], pixels[..., 2])
    expected = np.rint(data.images[17] * 255.0 / 16.0)
    assert np.array_equal(pixels[::4, ::4, 0], expected)
    assert np.array_equal(pixels[3::4, 3::4, 0], expected)


@needs("sklearn")
def test_digits_folder_is_idempotent(digits_cache: Path) -> None:
    folder = digits_folder(digits_cache)
    marker = folder / MARKER_NAME
    stamp = marker.stat().st_mtime_ns
    first_image = next((folder / "0").iterdir())
    image_stamp = first_image.stat().st_mtime_ns
    assert digits_folder(str(digits_cache)) == folder
    assert marker.stat().st_mtime_ns == stamp and first_image.stat().st_mtime_ns == image_stamp


def test_digits_folder_refuses_a_foreign_folder(tmp_path: Path) -> None:
    _touch(tmp_path / "digits" / "mine.txt")
    with pytest.raises(FileExistsError, match="not a complete galleria digits folder"):
        digits_folder(tmp_path)
    assert [p.name for p in (tmp_path / "digits").iterdir()] == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits"]


@needs("sklearn")
def test_digits_folder_fills_an_empty_folder_and_uses_the_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "digits").mkdir()
    monkeypatch.setenv("GALLERIA_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path
    folder = digits_folder()
    assert folder == tmp_path / "digits"
    assert (folder / MARKER_NAME).is_file()


def test_digits_folder_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="cache_dir"):
        digits_folder(3)  # type: ignore[arg-type]
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        digits_folder(blocker)


@pytest.mark.parametrize(
    ("platform", "env", "expected"),
    [
        ("linux", {"XDG_CACHE_HOME": "/xdg"}, Path("/xdg/galleria")),
        ("linux", {}, Path.home() / ".cache" / "galleria"),
        ("darwin", {}, Path.home() / "Library" / "Caches" / "galleria"),
        ("win32", {"LOCALAPPDATA": "/local"}, Path("/local/galleria")),
    ],
)
def test_default_cache_dir_per_platform(
    platform: str, env: dict[str, str], expected: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GALLERIA_CACHE_DIR", "XDG_CACHE_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "platform", platform)
    assert default_cache_dir() == expected
