"""The viewer's labels at a million paths: the common folder, relative paths and class folders
found without a call of ``os.path.relpath`` per path, and the same answers as the slow way."""

from __future__ import annotations

import os

import numpy as np
import pytest

from galleria.viewer import GalleryLabels
from galleria.viewer.browse import browse_gallery
from galleria.viewer.labels import common_folder


def _paths(seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    parts = ["a", "ab", "a b", "b", "é", "a.b", "x"]
    out = []
    for _ in range(int(rng.integers(1, 30))):
        depth = int(rng.integers(1, 5))
        out.append("/" + "/".join(str(rng.choice(parts)) for _ in range(depth)) + f"/{rng.integers(9)}.png")
    return out


@pytest.mark.parametrize("seed", range(60))
def test_common_folder_is_commonpath(seed: int) -> None:
    paths = _paths(seed)
    assert common_folder(paths) == os.path.commonpath(paths)


@pytest.mark.parametrize(
    "paths",
    [
        ["/g/a/../b/1.png", "/g/b/2.png"],  # not in normal form: the slow way answers
        ["/g//a/1.png", "/g/a/2.png"],
        ["/g/a/1.png", "/g/a/2.png"],
        ["/g/a0/1.png", "/g/a/2.png", "/g/a/b/3.png"],
    ],
)
def test_common_folder_and_relative_paths_match_the_slow_way(paths: list[str]) -> None:
    assert common_folder(paths) == os.path.commonpath(paths)
    labels = GalleryLabels(paths)
    for path in paths:
        assert labels.relative(path) == os.path.relpath(path, labels.root)


def test_relative_paths_under_a_given_root() -> None:
    labels = GalleryLabels(["/g/a/1.png", "/g/ab/2.png", "/h/3.png"], root="/g")
    assert [labels.relative(p) for p in labels.paths] == ["a/1.png", "ab/2.png", "../h/3.png"]
    assert GalleryLabels(["/x/1.png", "/y/2.png"]).relative("/y/2.png") == "y/2.png"


def test_folder_filter_is_indexed_once_per_path_list() -> None:
    paths = [f"/g/{'cat' if i % 3 else 'dog'}/{i}.png" for i in range(30)]
    labels = GalleryLabels(paths)
    page = browse_gallery(labels, {"folder": "dog"}, per_page=4)
    assert page.total == 10 and page.paths == ["/g/dog/0.png", "/g/dog/3.png", "/g/dog/6.png", "/g/dog/9.png"]
    assert labels.folders() == {"cat": 20, "dog": 10}
    assert browse_gallery(labels, {"folder": "dog", "name": "2"}).paths == [
        "/g/dog/12.png",
        "/g/dog/21.png",
        "/g/dog/24.png",
        "/g/dog/27.png",
    ]
    labels.paths = paths[:7]  # a narrowed list (the map's rectangle filter): counted again
    assert labels.folders() == {"cat": 4, "dog": 3} and labels.paths_in("dog") == [
        "/g/dog/0.png",
        "/g/dog/3.png",
        "/g/dog/6.png",
    ]
    assert browse_gallery(labels, {"name": "6"}).paths == ["/g/dog/6.png"]
