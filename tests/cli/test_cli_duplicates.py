"""``galleria duplicates`` (and the threshold line of ``galleria info``) on a folder with planted copies."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from galleria.cli import main


def _folder(root: Path) -> None:
    rng = np.random.default_rng(3)
    root.mkdir()
    for number in range(30):
        coarse = rng.integers(0, 256, size=(4, 4, 3)).astype(np.uint8)  # a smooth picture, like a photo
        Image.fromarray(coarse).resize((48, 48), Image.BICUBIC).save(root / f"img{number:02d}.png")
    Image.open(root / "img00.png").save(root / "copy_of_00.bmp")  # the same pixels
    Image.open(root / "img01.png").save(root / "a_q30_01.jpg", quality=30)  # first by name, fewer bytes
    Image.open(root / "img02.png").resize((24, 24), Image.BICUBIC).save(root / "a_half_02.png")


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    _folder(tmp_path / "photos")
    target = str(tmp_path / "s.safetensors")
    assert main(["build", str(tmp_path / "photos"), "--out", target]) == 0
    capsys.readouterr()
    return target


def test_json_gives_the_threshold_each_distance_and_why_each_image_is_kept(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["duplicates", store, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert isinstance(payload["threshold"], float) and 0 < payload["threshold"] <= 0.05
    assert payload["threshold_basis"]["source"] == "calibrated" and payload["keep_rule"] == "best"
    groups = {frozenset(Path(p).name for p in group["paths"]): group for group in payload["groups"]}
    assert set(groups) == {
        frozenset({"img00.png", "copy_of_00.bmp"}),
        frozenset({"img01.png", "a_q30_01.jpg"}),
        frozenset({"img02.png", "a_half_02.png"}),
    }
    jpeg = groups[frozenset({"img01.png", "a_q30_01.jpg"})]
    assert Path(jpeg["keep"]).name == "img01.png"  # not the quality-30 copy that sorts first
    assert jpeg["kept_because"].startswith("same pixel count (48×48), larger file (")
    assert list(jpeg["distances"]) == [p for p in jpeg["paths"] if p != jpeg["keep"]]
    assert 0 < next(iter(jpeg["distances"].values())) <= payload["threshold"]
    half = groups[frozenset({"img02.png", "a_half_02.png"})]
    assert (
        Path(half["keep"]).name == "img02.png"
        and half["kept_because"] == "largest pixel count (48×48 vs 24×24)"
    )
    exact = groups[frozenset({"img00.png", "copy_of_00.bmp"})]
    assert exact["kind"] == "exact" and list(exact["distances"].values()) == [0.0]
    assert os.path.exists(store + ".graph")  # the graph is kept beside the store
    assert main(["duplicates", store, "--json"]) == 0  # the same store state: the same answer
    assert json.loads(capsys.readouterr().out) == payload
    assert main(["duplicates", store, "--json", "--keep", "first"]) == 0
    first = json.loads(capsys.readouterr().out)
    kept = {Path(group["keep"]).name for group in first["groups"]}
    assert "a_q30_01.jpg" in kept and first["groups"][0]["kept_because"].startswith("first path")
    assert payload["check"]["pairs_checked"] >= 2 and payload["check"]["same_picture"] > 0.9
    assert main(["duplicates", store, "--json", "--no-check"]) == 0
    assert json.loads(capsys.readouterr().out)["check"] is None


def test_text_and_csv(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["duplicates", store]) == 0
    text = capsys.readouterr().out
    assert text.startswith("3 group(s) of duplicates holding 6 of 33 images\nthreshold ")
    assert "keep: best" in text and "kept: largest pixel count (48×48 vs 24×24)" in text
    assert "  d=0.0000  " in text  # the exact copy's distance to the image kept
    assert "or by fingerprint (" in text  # the candidates from the pictures, counted
    assert main(["duplicates", store, "--csv"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "group,kind,keep,distance,path" and len(rows) == 7
    assert sum(1 for row in rows[1:] if ",yes,," in row) == 3


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["--threshold", "3"], "--threshold"), (["--keep", "biggest"], "--keep"), (["--k", "0"], "--k")],
)
def test_bad_arguments_are_one_line_errors(
    store: str, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    before = sorted(os.listdir(os.path.dirname(store)))
    try:
        code = main(["duplicates", store, *argv])
    except SystemExit as stopped:  # argparse's own refusal (a choice)
        code = stopped.code
    assert code == 2
    assert named in capsys.readouterr().err
    assert sorted(os.listdir(os.path.dirname(store))) == before


@pytest.mark.parametrize("layout", ["one-class", "classes-of-one"])
def test_a_folder_without_copies_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    rng = np.random.default_rng(5)
    root = tmp_path / "photos"
    for number in range(12):  # one class folder of 12 images, or 12 class folders of one image
        folder = root / ("only" if layout == "one-class" else f"class{number:02d}")
        folder.mkdir(parents=True, exist_ok=True)
        coarse = rng.integers(0, 256, size=(4, 4, 3)).astype(np.uint8)
        Image.fromarray(coarse).resize((32, 32)).save(folder / f"{number}.png")
    target = str(tmp_path / "s.safetensors")
    assert main(["build", str(root), "--out", target]) == 0
    capsys.readouterr()
    assert main(["duplicates", target]) == 0
    out = capsys.readouterr().out
    assert out.startswith("0 group(s) of duplicates holding 0 of 12 images")
    assert "note: no duplicates among 12 images" in out and "threshold " in out


def test_info_shows_the_duplicates_threshold(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["duplicates", store, "--json"]) == 0
    applied = json.loads(capsys.readouterr().out)["threshold"]
    assert main(["info", store, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["duplicates"]["threshold"] == applied and info["duplicates"]["source"] == "calibrated"
    assert main(["info", store]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("duplicates:")]
    assert len(lines) == 1 and f"threshold {applied:.4g}" in lines[0]
