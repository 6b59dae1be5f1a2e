"""The picture check: a copy is the same picture, a look-alike, a mirror or a greyscale copy is not."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageEnhance, ImageOps

from galleria.curation.dedup import star_groups
from galleria.curation.verify import (
    SAME_PICTURE,
    PictureCheck,
    fingerprint,
    fingerprint_pairs,
    similarity,
    thumbnail,
)


def _picture(seed: int, size: int = 96) -> Image.Image:
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, size=(5, 5, 3)).astype(np.uint8)
    coarse[0, 0], coarse[-1, -1] = (255, 0, 0), (0, 0, 255)
    return Image.fromarray(coarse).resize((size, size), Image.BICUBIC)


def _thumb(tmp_path: Path, name: str, image: Image.Image, **save: object) -> np.ndarray:
    path = tmp_path / name
    image.save(path, **save)
    thumb = thumbnail(str(path))
    assert thumb is not None
    return thumb


@pytest.mark.parametrize(
    ("name", "make", "same"),
    [
        ("half.png", lambda p: p.resize((48, 48), Image.BICUBIC), True),
        ("double.png", lambda p: p.resize((192, 192), Image.BICUBIC), True),
        ("q30.jpg", lambda p: p, True),
        ("bright.png", lambda p: ImageEnhance.Brightness(p).enhance(1.2), True),
        ("dark.png", lambda p: ImageEnhance.Brightness(p).enhance(0.8), True),
        ("crop5.png", lambda p: p.crop((5, 5, 91, 91)), True),
        ("crop10.png", lambda p: p.crop((10, 10, 86, 86)), True),
        ("mirror.png", ImageOps.mirror, False),
        ("grey.png", lambda p: ImageOps.grayscale(p).convert("RGB"), False),
        ("other.png", lambda p: _picture(99), False),
    ],
)
def test_copies_are_the_same_picture_and_others_are_not(tmp_path: Path, name: str, make, same: bool) -> None:  # type: ignore[no-untyped-def]
    original = _thumb(tmp_path, "original.png", _picture(0))
    extra = {"quality": 30} if name.endswith(".jpg") else {}
    copy = _thumb(tmp_path, name, make(_picture(0)), **extra)
    value = similarity(original, copy)
    assert (value >= SAME_PICTURE) == same, value
    assert similarity(copy, original) == pytest.approx(value)  # symmetric


def test_unreadable_files_are_never_checked(tmp_path: Path) -> None:
    (tmp_path / "not-an-image.png").write_bytes(b"hello")
    os.mkfifo(tmp_path / "fifo.png")  # never opened: it would block
    _picture(1).save(tmp_path / "ok.png")
    paths = [str(tmp_path / name) for name in ("not-an-image.png", "fifo.png", "ok.png", "missing.png")]
    assert [thumbnail(path) is None for path in paths] == [True, True, False, True]
    check = PictureCheck([*paths, "https://example.org/a.png"], lambda row: row != 4)
    assert check.check(0, 2) is None and check.check(2, 4) is None and check.checked == 0
    assert check.check(2, 2) == pytest.approx(1.0) and check.checked == 1


@settings(max_examples=80, deadline=None)
@given(st.integers(3, 20), st.integers(0, 2**31 - 1), st.integers(2, 5))
def test_with_a_check_every_member_is_accepted_by_its_representative(n: int, seed: int, modulus: int) -> None:
    rng = np.random.default_rng(seed)
    gaps = np.round(rng.uniform(0, 0.3, size=(n, n)), 4)
    gaps = np.minimum(gaps, gaps.T)
    np.fill_diagonal(gaps, 0.0)

    def accept(first: int, second: int, distance: float) -> bool:
        return (first + second) % modulus != 0 and distance == gaps[first, second]

    order = rng.permutation(n)
    masked = gaps + np.diag(np.full(n, np.inf))
    ids = np.array([np.lexsort((np.arange(n), masked[i]))[: n - 1] for i in range(n)])
    found = star_groups(order, ids, np.take_along_axis(masked, ids, axis=1), 0.2, accept=accept)
    taken: set[int] = set()
    expected = []
    for position, row in enumerate(order.tolist()):  # the definition, with the check
        if row in taken:
            continue
        taken.add(row)
        members = [
            j for j in range(n) if j not in taken and gaps[row, j] <= 0.2 and accept(row, j, gaps[row, j])
        ]
        taken.update(members)
        if members:
            expected.append((position, row, sorted(members)))
    expected.sort(key=lambda group: (-len(group[2]), group[0]))
    assert [(rep, members.tolist()) for rep, members, _ in found] == [(row, m) for _, row, m in expected]


def test_a_fingerprint_ignores_brightness_and_finds_a_copy_among_look_alikes(tmp_path: Path) -> None:
    pictures = [_thumb(tmp_path, f"p{seed}.png", _picture(seed)) for seed in range(12)]
    bright = _thumb(tmp_path, "bright.png", ImageEnhance.Brightness(_picture(3)).enhance(1.2))
    crop = _thumb(tmp_path, "crop.png", _picture(5).crop((5, 5, 91, 91)))
    half = _thumb(tmp_path, "half.png", _picture(7).resize((48, 48), Image.BICUBIC))
    assert float(fingerprint(pictures[3]) @ fingerprint(bright)) > 0.99
    prints = np.stack([fingerprint(p) for p in [*pictures, bright, crop, half]])
    near = fingerprint_pairs(prints, 1)
    assert near[12, 0] == 3 and near[13, 0] == 5 and near[14, 0] == 7  # each copy's nearest: its original


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.integers(1, 6), st.integers(0, 2**31 - 1), st.integers(1, 7))
def test_fingerprint_pairs_are_the_exact_nearest_whatever_the_block(
    n: int, k: int, seed: int, block: int
) -> None:
    rng = np.random.default_rng(seed)
    prints = rng.normal(size=(n, 4)).astype(np.float32)
    prints[rng.random(n) < 0.2] = 0  # flat pictures: no neighbours, never a neighbour
    norms = np.linalg.norm(prints, axis=1, keepdims=True)
    prints = np.where(norms > 0, prints / np.maximum(norms, 1e-9), 0).astype(np.float32)
    found = fingerprint_pairs(prints, k, block=block)
    assert found.shape == (n, k)
    flat = ~np.any(prints != 0, axis=1)
    scores = prints @ prints.T
    for row in range(n):
        others = [j for j in range(n) if j != row and not flat[j]]
        expected = [] if flat[row] else sorted(others, key=lambda j: (-scores[row, j], j))[:k]
        assert found[row][found[row] >= 0].tolist() == expected


def test_a_drawing_on_transparency_brightened_is_the_same_picture(tmp_path: Path) -> None:
    drawing = Image.new("RGBA", (48, 48), (0, 0, 0, 0))
    drawing.paste(_picture(4, 30).convert("RGBA"), (9, 9))
    drawing.save(tmp_path / "icon.png")
    alpha = drawing.getchannel("A")
    for factor in (0.8, 1.2):  # only the drawing changes; the white it is shown on does not
        copy = ImageEnhance.Brightness(drawing.convert("RGB")).enhance(factor)
        copy.putalpha(alpha)
        copy.save(tmp_path / f"icon{factor}.png")
        first, second = thumbnail(str(tmp_path / "icon.png")), thumbnail(str(tmp_path / f"icon{factor}.png"))
        assert first is not None and second is not None
        assert similarity(first, second) >= SAME_PICTURE
