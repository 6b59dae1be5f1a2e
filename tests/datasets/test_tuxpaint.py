"""The Tux Paint stamps loader: classes are second-level folders, small classes and loose stamps left out."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from galleria.datasets.tuxpaint import TUXPAINT_STAMPS, load_tuxpaint_stamps


def _touch(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"")


def test_classes_are_second_level_folders(tmp_path: Path) -> None:
    _touch(
        tmp_path,
        "animals/birds/a.png", "animals/birds/deep/b.PNG", "animals/birds/c.txt", "animals/birds/d.ogg",
        "animals/loose.png", "food/nuts/e.png", "food/nuts/f.png", ".hidden/x/g.png", "food/.x/h.png",
    )  # fmt: skip
    folder = load_tuxpaint_stamps(tmp_path, min_images=2)
    assert Counter(folder.labels) == {"animals/birds": 2, "food/nuts": 2}
    assert all(path.lower().endswith(".png") for path in folder.paths)
    assert not any("loose" in path or ".hidden" in path for path in folder.paths)
    assert load_tuxpaint_stamps(tmp_path, min_images=1).labels.count("food/nuts") == 2
    with pytest.raises(ValueError, match="at least 3"):
        load_tuxpaint_stamps(tmp_path, min_images=3)
    with pytest.raises(ValueError, match="min_images"):
        load_tuxpaint_stamps(tmp_path, min_images=0)
    with pytest.raises(FileNotFoundError):
        load_tuxpaint_stamps(tmp_path / "missing")


@pytest.mark.skipif(not os.path.isdir(TUXPAINT_STAMPS), reason="tuxpaint-stamps-default is not installed")
def test_the_installed_stamps() -> None:
    from galleria.images.reading import read_rgb

    folder = load_tuxpaint_stamps()
    counts = Counter(folder.labels)
    assert min(counts.values()) >= 5 and len(counts) >= 20
    image = read_rgb(folder.paths[0])  # RGBA stamps come out as RGB composited on white
    assert image.ndim == 3 and image.shape[2] == 3 and image[0, 0].tolist() == [255, 255, 255]
