"""Duplicate groups: the core against a literal transcription, the store API, the command line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import galleria
from galleria import InMemoryImageEmbeddingStore
from galleria.cli import main
from galleria.curation.dedup import check_threshold, default_threshold, duplicate_groups, group_rows, keep_of


def _literal_groups(vectors: np.ndarray, k: int, threshold: float) -> list[list[int]]:
    """Groups by the definition, one pair at a time: j is linked to i when j is among i's k nearest
    others (cosine distance, ties to the lower row) at a distance ≤ threshold; groups are the
    connected components of those links with two or more members."""
    n = len(vectors)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    links: dict[int, set[int]] = {i: set() for i in range(n)}
    for i in range(n):
        others = sorted((1.0 - float(unit[i] @ unit[j]), j) for j in range(n) if j != i)
        for distance, j in others[:k]:
            if distance <= threshold:
                links[i].add(j)
                links[j].add(i)
    seen: set[int] = set()
    groups = []
    for start in range(n):
        if start in seen or not links[start]:
            continue
        stack, members = [start], set()
        while stack:
            node = stack.pop()
            if node not in members:
                members.add(node)
                stack.extend(links[node])
        seen |= members
        groups.append(sorted(members))
    return sorted(groups, key=lambda rows: (-len(rows), rows[0]))


@given(
    st.integers(2, 24),
    st.integers(1, 5),
    st.sampled_from([0.0, 0.01, 0.05, 0.2, 0.6]),
    st.integers(0, 2**31 - 1),
)
def test_groups_equal_the_literal_definition(n: int, k: int, threshold: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(1, n // 3), 4))
    vectors = centres[rng.integers(0, len(centres), n)] + rng.normal(scale=0.15, size=(n, 4))
    vectors = np.round(vectors, 1) + 1e-3  # repeated vectors: exact ties on purpose
    store = InMemoryImageEmbeddingStore.from_embeddings([f"/g/{i:03d}.png" for i in range(n)], vectors)
    found = [
        sorted(int(path[3:6]) for path in group.paths)
        for group in duplicate_groups(store, threshold=threshold, k=k)
    ]
    expected = _literal_groups(vectors.astype(np.float32), min(k, n - 1), threshold)
    # Near-ties at the threshold may fall either way in float32: compare away from the threshold.
    if found != expected:
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        gaps = np.abs(1.0 - unit @ unit.T - threshold)
        assume_close = float(gaps.min()) < 1e-5
        assert assume_close, (found, expected)


def test_exact_digests_link_rows_the_vectors_do_not() -> None:
    ids = np.array([[1], [0], [0]])
    distances = np.array([[0.9], [0.9], [0.9]])
    digests = np.zeros((3, 8), dtype=np.uint8)
    digests[0] = digests[2] = 7
    groups = group_rows(3, ids, distances, 0.1, digests)
    assert [(rows.tolist(), exact) for rows, exact in groups] == [([0, 2], True)]
    digests[1] = 0  # unknown digests never link
    assert [(rows.tolist(), exact) for rows, exact in group_rows(3, ids, distances, 0.95, digests)] == [
        ([0, 1, 2], False)
    ]


@pytest.mark.parametrize("bad", [-0.01, 2.5, float("nan"), float("inf")])
def test_a_threshold_outside_0_2_is_refused_naming_it(bad: float) -> None:
    with pytest.raises(ValueError, match="threshold"):
        check_threshold(bad)
    store = InMemoryImageEmbeddingStore.from_embeddings(["/a", "/b"], np.eye(2))
    with pytest.raises(ValueError, match=repr(bad) if bad == bad else "nan"):
        duplicate_groups(store, threshold=bad)


@pytest.mark.parametrize("bad", ["0.1", True, None.__class__])
def test_a_threshold_of_the_wrong_kind_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match="threshold"):
        check_threshold(bad)


def test_defaults_come_from_the_embedder() -> None:
    assert default_threshold({"type": "pixel"}) == galleria.curation.dedup.DEFAULT_THRESHOLDS["pixel"]
    assert default_threshold(None) == galleria.curation.dedup.FALLBACK_THRESHOLD
    assert galleria.duplicates is duplicate_groups and galleria.duplicates.__name__ == "duplicates"


def test_keep_rules(tmp_path: Path) -> None:
    small, big = tmp_path / "b_small.png", tmp_path / "a_big.png"
    small.write_bytes(b"x" * 10)
    big.write_bytes(b"x" * 100)
    os.utime(small, ns=(1, 1_000_000_000))
    os.utime(big, ns=(1, 2_000_000_000))
    paths = [str(small), str(big)]
    assert keep_of(paths, "first") == str(big)
    assert keep_of(paths, "largest") == str(big)
    assert keep_of(paths, "oldest") == str(small)
    assert keep_of([*paths, str(tmp_path / "gone.png")], "oldest") == str(small)


def _folder(root: Path) -> list[Path]:
    rng = np.random.default_rng(3)
    root.mkdir()
    written = []
    for number in range(12):
        coarse = rng.integers(0, 256, size=(4, 4, 3)).astype(np.uint8)  # a smooth picture, like a photo
        path = root / f"img{number:02d}.png"
        Image.fromarray(coarse).resize((48, 48), Image.BICUBIC).save(path)
        written.append(path)
    Image.open(written[0]).save(root / "copy_of_00.bmp")  # the same pixels
    Image.open(written[1]).resize((36, 36), Image.BICUBIC).save(root / "small_01.png")
    return written


def test_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _folder(tmp_path / "photos")
    store = str(tmp_path / "s.safetensors")
    assert main(["build", str(tmp_path / "photos"), "--out", store]) == 0
    capsys.readouterr()
    assert main(["duplicates", store, "--json", "--threshold", "0.05"]) == 0
    payload = json.loads(capsys.readouterr().out)
    names = [[Path(path).name for path in group] for group in payload["groups"]]
    assert sorted(names) == [["copy_of_00.bmp", "img00.png"], ["img01.png", "small_01.png"]]
    assert payload["keep"] == [min(group) for group in payload["groups"]]
    kinds = {sorted(group)[0]: kind for group, kind in zip(names, payload["kinds"], strict=True)}
    assert kinds == {"copy_of_00.bmp": "exact", "img01.png": "near"}
    assert os.path.exists(store + ".graph")  # the graph is kept beside the store
    assert main(["duplicates", store, "--csv", "--threshold", "0.05"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "group,kind,keep,path" and len(rows) == 5
    assert main(["duplicates", store, "--threshold", "0.05"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("2 group(s) of duplicates holding 4 of 14 images")
    assert main(["duplicates", store, "--threshold", "3"]) == 2
    assert "--threshold" in capsys.readouterr().err


def test_pixel_digests_are_recorded_kept_and_checked(tmp_path: Path) -> None:
    from _support.attack_corpus import _read, _seal
    from galleria import PixelEmbedder

    written = _folder(tmp_path / "photos")
    paths = sorted(str(path) for path in (tmp_path / "photos").iterdir())
    store = InMemoryImageEmbeddingStore(paths[:-3], PixelEmbedder(size=8))
    store.build_store()
    store.add_images(paths[-3:])
    digests = store.pixel_digests
    assert digests is not None and digests.shape == (len(paths), 8) and digests.any(axis=1).all()
    row = {path: position for position, path in enumerate(store.paths)}
    copy, original = row[str(tmp_path / "photos" / "copy_of_00.bmp")], row[str(written[0])]
    assert (digests[copy] == digests[original]).all()
    assert len({bytes(digest) for digest in digests}) == len(paths) - 1  # the one exact pair
    store.remove_images([str(written[5])])
    assert store.pixel_digests is not None and len(store.pixel_digests) == len(paths) - 1
    target = tmp_path / "s.safetensors"
    store.save_to_disk(target)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(target, PixelEmbedder(size=8))
    assert loaded.pixel_digests is not None and (loaded.pixel_digests == store.pixel_digests).all()
    groups = duplicate_groups(loaded, threshold=0.0)
    assert [(sorted(Path(p).name for p in group.paths), group.exact) for group in groups] == [
        (["copy_of_00.bmp", "img00.png"], True)
    ]
    header, tensors = _read(target)
    tensors["pixel_digests"] = np.zeros((3, 8), dtype=np.uint8)  # hostile: not one row per image
    _seal(tmp_path / "bad.safetensors", header, tensors)
    with pytest.raises(ValueError, match="pixel_digests"):
        InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "bad.safetensors")
    vectors_only = InMemoryImageEmbeddingStore.from_embeddings(["/a", "/b"], np.eye(2))
    assert vectors_only.pixel_digests is None
