"""Duplicate groups: star groups against a literal transcription, the calibrated threshold, the image
kept, what counts as a copy (files written here), and the bad inputs of issue 33 §2."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageEnhance, ImageOps

import galleria
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.curation.dedup import (
    CALIBRATION_FRACTION,
    THRESHOLD_BOUNDS,
    FileFacts,
    calibrated_threshold,
    check_threshold,
    duplicate_groups,
    duplicate_report,
    file_facts,
    kept_because,
    star_groups,
    store_threshold,
    threshold_bounds,
)

# The core against its definition -----------------------------------------------------------------


def _distances(vectors: np.ndarray) -> np.ndarray:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.asarray(1.0 - unit @ unit.T, dtype=np.float64)


def _literal_stars(
    gaps: np.ndarray, order: list[int], threshold: float, digests: np.ndarray | None
) -> list[tuple[int, list[int]]]:
    """The definition, one row at a time: in ``order``, a row not yet taken represents a group and
    takes every row not yet taken within ``threshold`` of it (its own pixels at any distance); a
    group of one is none. Largest first, then in ``order``."""
    n = len(gaps)
    same = np.zeros((n, n), dtype=bool)
    if digests is not None:
        known = np.any(digests != 0, axis=1)
        same = (digests[:, None, :] == digests[None, :, :]).all(axis=2) & known[:, None] & known[None, :]
    taken: set[int] = set()
    groups = []
    for position, row in enumerate(order):
        if row in taken:
            continue
        taken.add(row)
        members = [j for j in range(n) if j not in taken and (gaps[row, j] <= threshold or same[row, j])]
        taken.update(members)
        if members:
            groups.append((position, row, sorted(members)))
    groups.sort(key=lambda group: (-len(group[2]), group[0]))
    return [(row, members) for _, row, members in groups]


def _graph(gaps: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact k-nearest-neighbour graph of a distance matrix (ties to the lower row)."""
    n = len(gaps)
    masked = gaps + np.diag(np.full(n, np.inf))
    ids = np.array([np.lexsort((np.arange(n), masked[i]))[:k] for i in range(n)])
    return ids, np.take_along_axis(masked, ids, axis=1)


def _within(gaps: np.ndarray, threshold: float):  # type: ignore[no-untyped-def]
    def search(row: int) -> tuple[np.ndarray, np.ndarray]:
        hits = np.flatnonzero(gaps[row] <= threshold)
        hits = hits[hits != row]
        return hits, gaps[row, hits]

    return search


@settings(max_examples=150, deadline=None)
@given(
    st.integers(2, 28),
    st.integers(1, 6),
    st.sampled_from([0.0, 0.01, 0.05, 0.2, 0.6]),
    st.integers(0, 2**31 - 1),
    st.booleans(),
)
def test_star_groups_equal_the_literal_definition(
    n: int, k: int, threshold: float, seed: int, with_digests: bool
) -> None:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(1, n // 4), 4))
    vectors = centres[rng.integers(0, len(centres), n)] + rng.normal(scale=0.15, size=(n, 4))
    digests = None
    if with_digests:
        digests = np.zeros((n, 8), dtype=np.uint8)
        digests[:, 0] = rng.integers(0, 3, n)  # 0: unknown; 1, 2: two digests shared at random
        for value in (1, 2):  # the same pixels embed the same: twins share one vector
            twins = np.flatnonzero(digests[:, 0] == value)
            vectors[twins] = vectors[twins[:1]]
    gaps = np.round(_distances(vectors), 6)  # rounded: no float noise at the threshold
    np.fill_diagonal(gaps, 0.0)
    order = rng.permutation(n).tolist()
    ids, distances = _graph(gaps, min(k, n - 1))
    found = star_groups(np.array(order), ids, distances, threshold, digests, _within(gaps, threshold))
    assert [(rep, members.tolist()) for rep, members, _ in found] == _literal_stars(
        gaps, order, threshold, digests
    )
    for rep, members, member_gaps in found:  # every member a copy of the representative
        assert np.all(member_gaps <= threshold) and np.allclose(member_gaps, gaps[rep, members])
        assert rep not in members.tolist()
    everyone = [row for rep, members, _ in found for row in [rep, *members.tolist()]]
    assert len(everyone) == len(set(everyone))  # a row in one group at most


@settings(max_examples=60, deadline=None)
@given(st.permutations([0, 1, 2]), st.floats(0.3, 0.49))
def test_a_chain_is_never_one_group_of_three(order: list[int], step: float) -> None:
    # a – b – c on a line: a–b and b–c within the threshold, a–c not.
    gaps = np.array([[0.0, step, 2 * step], [step, 0.0, step], [2 * step, step, 0.0]])
    ids, distances = _graph(gaps, 2)
    found = star_groups(np.array(order), ids, distances, 0.5, None, _within(gaps, 0.5))
    sizes = [1 + members.size for _, members, _ in found]
    assert sizes in ([2], [3]) and (sizes == [3]) == (order[0] == 1)  # three only around b
    for rep, members, member_gaps in found:
        assert np.all(gaps[rep, members] <= 0.5) and np.allclose(member_gaps, gaps[rep, members])


def test_a_representative_with_every_neighbour_a_copy_takes_them_all() -> None:
    # 30 copies of one picture: the graph (k=4) lists 4 each; the representative is searched whole.
    rng = np.random.default_rng(0)
    base = rng.normal(size=16)
    vectors = base + rng.normal(scale=1e-3, size=(30, 16))
    store = InMemoryImageEmbeddingStore.from_embeddings([f"/g/{i:02d}.png" for i in range(30)], vectors)
    report = duplicate_report(store, k=4, threshold=0.01, keep="first")
    assert [len(group.paths) for group in report.groups] == [30]
    assert report.groups[0].keep == "/g/00.png" and "every image is a copy of one picture" in report.notes


def test_groups_do_not_depend_on_the_order_of_the_rows() -> None:
    rng = np.random.default_rng(4)
    n = 60
    vectors = np.repeat(rng.normal(size=(20, 8)), 3, axis=0) + rng.normal(scale=0.08, size=(n, 8))
    paths = [f"/g/{i:03d}.png" for i in range(n)]  # not on disk: every rule ends on the path
    seen = []
    for seed in range(4):
        shuffle = np.random.default_rng(seed).permutation(n)
        store = InMemoryImageEmbeddingStore.from_embeddings([paths[i] for i in shuffle], vectors[shuffle])
        report = duplicate_report(store)
        seen.append((report.threshold, [(group.keep, group.paths) for group in report.groups]))
    assert seen[0][1] and all(run == seen[0] for run in seen[1:])


def test_exact_digests_group_at_any_threshold_and_unknown_ones_never() -> None:
    ids = np.array([[1], [0], [0]])
    distances = np.array([[0.9], [0.9], [0.9]])
    digests = np.zeros((3, 8), dtype=np.uint8)
    digests[0] = digests[2] = 7
    found = star_groups(np.array([0, 1, 2]), ids, distances, 0.0, digests)
    assert [(rep, members.tolist(), gaps.tolist()) for rep, members, gaps in found] == [(0, [2], [0.0])]
    digests[2] = 0
    assert star_groups(np.array([0, 1, 2]), ids, distances, 0.0, digests) == []


# The threshold ------------------------------------------------------------------------------------


def test_the_threshold_is_a_fraction_of_a_low_quantile_held_in_bounds() -> None:
    spread = np.linspace(0.0, 1.0, 1001).reshape(-1, 1)
    value, basis = calibrated_threshold(spread * 0.2, (0.001, 0.5))
    assert basis["rule"] == "fraction" and value == pytest.approx(CALIBRATION_FRACTION * 0.2 * 0.05)
    assert calibrated_threshold(spread * 100, (0.001, 0.05))[1]["rule"] == "cap"
    assert calibrated_threshold(spread * 100, (0.001, 0.05))[0] == 0.05
    assert calibrated_threshold(spread * 1e-4, (0.001, 0.05)) == (
        0.001,
        pytest.approx(
            basis | {"neighbour_quantile": 1e-4 * 0.05, "rule": "floor", "floor": 0.001, "cap": 0.05}
        ),
    )
    assert calibrated_threshold(np.empty((0, 0)), (0.002, 0.05))[0] == 0.002
    assert threshold_bounds({"type": "pixel"}) == THRESHOLD_BOUNDS["pixel"]
    assert threshold_bounds({"type": "nobody"}) == threshold_bounds(None)


def test_the_threshold_is_fixed_by_the_store_and_reported() -> None:
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(300, 12))
    store = InMemoryImageEmbeddingStore.from_embeddings([f"/g/{i}.png" for i in range(300)], vectors)
    first, basis = store_threshold(store)
    again = InMemoryImageEmbeddingStore.from_embeddings([f"/g/{i}.png" for i in range(300)], vectors)
    assert store_threshold(again) == (first, basis) and basis["source"] == "calibrated"
    assert duplicate_report(store).threshold == first
    assert duplicate_report(store, threshold=0.3).basis == {"source": "given"}


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


def test_a_bad_keep_rule_is_refused_naming_it() -> None:
    store = InMemoryImageEmbeddingStore.from_embeddings(["/a", "/b"], np.eye(2))
    with pytest.raises(ValueError, match=r"keep.*'biggest'"):
        duplicate_groups(store, keep="biggest")
    assert galleria.duplicates is duplicate_groups and galleria.duplicates.__name__ == "duplicates"


#: Three vectors within 2·10⁻⁸ of each other (cosine): one group at any threshold above that.
_NEAR = np.array([[1.0, 1.0], [1.0, 1.0001], [1.0, 1.0002]])


# The image kept -----------------------------------------------------------------------------------


def _noise(size: tuple[int, int], seed: int) -> Image.Image:
    return Image.fromarray(
        np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    )


def test_best_keeps_the_most_pixels_then_bytes_then_the_oldest(tmp_path: Path) -> None:
    big, small = tmp_path / "z_big.jpg", tmp_path / "a_small.png"
    _noise((64, 48), 0).save(big, quality=30)
    _noise((32, 24), 0).save(small)  # more bytes, fewer pixels
    assert small.stat().st_size > big.stat().st_size
    facts = {path: file_facts(str(path)) for path in (big, small)}
    assert (facts[big].width, facts[big].height) == (64, 48)
    paths = [str(small), str(big)]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, np.array([[1.0, 0.0], [1.0, 0.001]]))
    group = duplicate_groups(store, threshold=0.01, check=False)[0]
    assert group.keep == str(big) and group.kept_because == "largest pixel count (64×48 vs 32×24)"
    assert duplicate_groups(store, threshold=0.01, check=False, keep="largest")[0].keep == str(small)
    assert duplicate_groups(store, threshold=0.01, check=False, keep="first")[0].keep == str(small)
    # The same pixel count: the larger file; the same bytes too: the oldest.
    twin = tmp_path / "m_twin.png"
    _noise((64, 48), 1).save(twin)
    why = kept_because("best", file_facts(str(twin)), facts[big])
    assert why.startswith("same pixel count (64×48), larger file (")
    a, b = tmp_path / "b.png", tmp_path / "a.png"
    a.write_bytes(twin.read_bytes())
    b.write_bytes(twin.read_bytes())
    os.utime(a, ns=(1, 1_000_000_000))
    os.utime(b, ns=(1, 2_000_000_000))
    store = InMemoryImageEmbeddingStore.from_embeddings([str(b), str(a)], np.array([[1.0, 0.0], [1.0, 0.0]]))
    group = duplicate_groups(store, threshold=0.01, check=False)[0]
    assert (
        group.keep == str(a)
        and "oldest file (1970-01-01 00:00:01 vs 1970-01-01 00:00:02 UTC)" in group.kept_because
    )
    assert duplicate_groups(store, threshold=0.01, check=False, keep="oldest")[0].keep == str(a)
    os.utime(b, ns=(1, 1_000_000_500))  # half a microsecond younger: the same second, told apart
    group = duplicate_groups(store, threshold=0.01, check=False)[0]
    told = "oldest file (1970-01-01 00:00:01.000000000 vs 1970-01-01 00:00:01.000000500 UTC)"
    assert group.keep == str(a) and told in group.kept_because


def test_a_url_or_a_missing_file_never_wins_over_a_local_file(tmp_path: Path) -> None:
    local = tmp_path / "z.png"
    _noise((8, 8), 2).save(local)
    paths = ["https://example.org/a.png", str(tmp_path / "a_gone.png"), str(local)]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, _NEAR)
    for rule in ("best", "largest", "oldest"):
        group = duplicate_groups(store, threshold=0.01, check=False, keep=rule)[0]
        assert group.keep == str(local) and len(group.paths) == 3
    assert duplicate_groups(store, threshold=0.01, check=False)[0].kept_because.startswith(
        "the only local file"
    )
    assert file_facts(paths[0]) == FileFacts(False) and file_facts(paths[1]) == FileFacts(False)


def test_keeping_reads_headers_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import galleria.images.reading as reading

    paths = []
    for number in range(3):
        path = tmp_path / f"{number}.png"
        _noise((10 + number, 10), number).save(path)
        paths.append(str(path))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an image was decoded")

    monkeypatch.setattr(reading, "_decode_any", refuse)
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, _NEAR)
    assert (
        duplicate_groups(store, threshold=0.01, check=False)[0].keep == paths[2]
    )  # 12 × 10, the most pixels


# What counts as a copy (files, the default pixel embedder, the calibrated threshold) ------------------


def _picture(seed: int, size: int = 96) -> Image.Image:
    """A colourful, asymmetric smooth picture (a stand-in for a photograph)."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, size=(5, 5, 3)).astype(np.uint8)
    coarse[0, 0] = (255, 0, 0)  # a red corner: a mirror image differs
    coarse[-1, -1] = (0, 0, 255)
    return Image.fromarray(coarse).resize((size, size), Image.BICUBIC)


def _build(folder: Path) -> InMemoryImageEmbeddingStore:
    store = InMemoryImageEmbeddingStore(sorted(str(p) for p in folder.iterdir()), PixelEmbedder())
    store.build_store(progress=False)
    return store


def _partners(store: InMemoryImageEmbeddingStore, name: str) -> set[str]:
    for group in duplicate_groups(store):
        names = {Path(path).name for path in group.paths}
        if name in names:
            return names - {name}
    return set()


def test_what_counts_as_a_copy(tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    for seed in range(40):
        _picture(seed).save(folder / f"p{seed:02d}.png")
    original = _picture(0)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored turned, displayed upright: the same picture
    original.transpose(Image.Transpose.ROTATE_90).save(folder / "exif.png", exif=exif.tobytes())
    original.transpose(Image.Transpose.ROTATE_90).save(folder / "exif.jpg", quality=90, exif=exif.tobytes())
    _picture(1).resize((48, 48), Image.BICUBIC).save(folder / "half_p01.png")
    _picture(2).save(folder / "q30_p02.jpg", quality=30)
    ImageEnhance.Brightness(_picture(3)).enhance(1.2).save(folder / "bright_p03.png")
    _picture(4).crop((2, 2, 94, 94)).save(folder / "crop_p04.png")  # 2 % a side
    ImageOps.grayscale(_picture(5)).save(folder / "grey_p05.png")
    ImageOps.mirror(_picture(6)).save(folder / "mirror_p06.png")
    store = _build(folder)
    assert _partners(store, "p00.png") == {"exif.png", "exif.jpg"}
    exact = [group for group in duplicate_groups(store) if "exif.png" in {Path(p).name for p in group.paths}]
    row = {Path(path).name: number for number, path in enumerate(store.paths)}
    digests = store.pixel_digests
    assert digests is not None and (digests[row["exif.png"]] == digests[row["p00.png"]]).all()  # same pixels
    assert dict(zip(exact[0].paths, exact[0].distances, strict=True))[str(folder / "exif.png")] == 0.0
    assert _partners(store, "half_p01.png") == {"p01.png"}
    assert _partners(store, "q30_p02.jpg") == {"p02.png"}
    assert _partners(store, "bright_p03.png") == {"p03.png"}
    assert _partners(store, "crop_p04.png") == {"p04.png"}
    assert _partners(store, "grey_p05.png") == set()  # colour is part of the picture
    assert _partners(store, "mirror_p06.png") == set()  # another picture: left and right swapped
    assert exact and exact[0].keep == str(folder / "p00.png")  # the PNG original: as many pixels, more bytes


# Bad input and edge galleries: behave and say what was seen ----------------------------------------


def test_tiny_icons_say_they_are_tiny(tmp_path: Path) -> None:
    folder = tmp_path / "icons"
    folder.mkdir()
    for seed in range(30):
        _picture(seed, 16).save(folder / f"i{seed:02d}.png")
    _picture(0, 16).save(folder / "copy.bmp")
    report = duplicate_report(_build(folder))
    names = [{Path(p).name for p in group.paths} for group in report.groups]
    assert {"i00.png", "copy.bmp"} in names
    assert any("tiny" in note for note in report.notes)


def test_a_folder_of_copies_of_one_picture_is_one_group(tmp_path: Path) -> None:
    folder = tmp_path / "same"
    folder.mkdir()
    picture = _picture(7)
    for number in range(12):
        ImageEnhance.Brightness(picture).enhance(0.9 + 0.02 * number).save(folder / f"c{number:02d}.png")
    picture.resize((192, 192), Image.BICUBIC).save(folder / "big.png")
    report = duplicate_report(_build(folder))
    assert [len(group.paths) for group in report.groups] == [13]
    assert report.groups[0].keep.endswith("big.png") and "largest pixel count (192×192 vs 96×96)" in (
        report.groups[0].kept_because
    )
    assert "every image is a copy of one picture" in report.notes


def test_no_copies_one_image_and_one_class(tmp_path: Path) -> None:
    folder = tmp_path / "distinct"
    folder.mkdir()
    for seed in range(25):
        _picture(seed).save(folder / f"p{seed:02d}.png")
    report = duplicate_report(_build(folder))
    assert report.groups == [] and report.notes[0] == "no duplicates among 25 images"
    assert report.threshold > 0 and report.basis["source"] == "calibrated"
    single = InMemoryImageEmbeddingStore.from_embeddings(["/only.png"], np.ones((1, 3)))
    alone = duplicate_report(single)
    assert alone.groups == [] and alone.notes == ["1 image(s): nothing to compare"]
    assert alone.threshold == THRESHOLD_BOUNDS["pixel"][0] or alone.basis["rule"] == "floor"


def test_a_copy_the_vectors_place_far_is_found_by_its_fingerprint(tmp_path: Path) -> None:
    """Candidates do not depend on the embedder alone: vectors that put a copy far from its original
    (as a semantic embedder may for a resized tiny picture) still give the pair, by the pictures."""
    folder = tmp_path / "photos"
    folder.mkdir()
    for seed in range(20):
        _picture(seed).save(folder / f"p{seed:02d}.png")
    _picture(3).resize((48, 48), Image.BICUBIC).save(folder / "half_p03.png")
    paths = sorted(str(p) for p in folder.iterdir())
    vectors = np.random.default_rng(0).normal(size=(len(paths), 16))  # says nothing of the pictures
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, vectors)
    report = duplicate_report(store)
    assert [{Path(p).name for p in group.paths} for group in report.groups] == [{"p03.png", "half_p03.png"}]
    assert report.check is not None and report.check["fingerprints"] and report.check["fingerprint_pairs"] > 0
    distance = report.groups[0].distances[report.groups[0].paths.index(str(folder / "half_p03.png"))]
    assert distance > report.threshold  # its true distance in the store's space, reported as it is
    assert duplicate_report(store).groups == report.groups  # one store state, one answer
    assert duplicate_report(store, check=False).groups == []  # the vectors alone miss it


def test_above_the_fingerprint_limit_the_vectors_alone_give_candidates_and_it_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import galleria.curation.dedup as dedup

    folder = tmp_path / "photos"
    folder.mkdir()
    for seed in range(8):
        _picture(seed).save(folder / f"p{seed:02d}.png")
    _picture(2).crop((2, 2, 94, 94)).save(folder / "crop_p02.png")
    store = _build(folder)
    monkeypatch.setattr(dedup, "FINGERPRINT_LIMIT", 5)
    report = duplicate_report(store)
    assert report.check is not None and not report.check["fingerprints"]
    assert any("no picture fingerprints" in note for note in report.notes)
