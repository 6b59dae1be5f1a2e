"""Labels that cannot silently lie: the labels' root a store records, the refusals, the reported
label counts, and a folder and its store drawing one split with or without ``--skip-errors``."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from _support.attack_corpus import _read, _seal
from galleria import InMemoryImageEmbeddingStore
from galleria.cli import main
from galleria.cli._labelled import open_source, split_of
from galleria.cli.tune import rounded_for_reading
from galleria.datasets.labels import label_problem, labels_root_of, labels_under, summarise_labels


def _classes(root: Path, sizes: dict[str, int], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for label, size in sizes.items():
        (root / label).mkdir(parents=True, exist_ok=True)
        base = rng.integers(0, 256, size=(10, 10, 3))
        for i in range(size):
            noise = rng.integers(-40, 40, size=(10, 10, 3))
            pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i:02d}.png")


@pytest.fixture
def gallery(tmp_path: Path) -> Path:
    root = tmp_path / "g"
    _classes(root, {f"c{i}": 7 for i in range(6)})
    (root / "c2" / "zz_broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    return root


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _build(capsys: pytest.CaptureFixture[str], folder: Path, out: Path) -> Path:
    code, _, err = _run(capsys, "build", str(folder), "--out", str(out), "--skip-errors")
    assert code == 0, err
    return out


def test_the_store_records_its_labels_root_and_keeps_it(
    gallery: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_file = _build(capsys, gallery, tmp_path / "s.safetensors")
    store = InMemoryImageEmbeddingStore.load_from_disk(store_file)
    assert store.labels_root == str(gallery)
    code, out, _ = _run(capsys, "info", str(store_file), "--json")
    assert code == 0 and json.loads(out)["labels_root"] == str(gallery)
    store.save_to_disk(tmp_path / "copy.safetensors")
    assert InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "copy.safetensors").labels_root == str(
        gallery
    )
    moved = InMemoryImageEmbeddingStore.load_from_disk(store_file, root=tmp_path / "elsewhere")
    assert moved.labels_root == str(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="absolute"):
        store.labels_root = "relative/folder"
    with pytest.raises(TypeError, match="labels_root"):
        store.labels_root = 3  # type: ignore[assignment]
    assert store.labels_root == str(gallery)


@pytest.mark.parametrize("value", ["relative", "/a\nb", 7, "/" + "x" * 5000])
def test_a_hostile_labels_root_record_is_refused_naming_the_key(
    gallery: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: object
) -> None:
    store_file = _build(capsys, gallery, tmp_path / "s.safetensors")
    header, tensors = _read(store_file)
    header["labels_root"] = value
    _seal(tmp_path / "bad.safetensors", header, tensors)
    with pytest.raises(ValueError, match="header key 'labels_root'"):
        InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "bad.safetensors")


def _args(**values: object) -> argparse.Namespace:
    defaults: dict[str, object] = {"skip_errors": False, "workers": "2", "labels_root": None}
    return argparse.Namespace(**{**defaults, **values})


def test_a_folder_and_its_store_draw_the_same_split_with_a_broken_file(
    gallery: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_file = _build(capsys, gallery, tmp_path / "s.safetensors")
    folder = open_source(_args(skip_errors=True), str(gallery), "IMAGE_DIR")
    stored = open_source(_args(), str(store_file), "STORE")
    assert folder.unreadable == [str(gallery / "c2" / "zz_broken.png")]
    assert folder.paths == stored.paths and folder.labels == stored.labels
    for seed in (0, 1, 5):
        a, b = (
            split_of(folder, {"query_fraction": 0.2}, seed),
            split_of(stored, {"query_fraction": 0.2}, seed),
        )
        assert a.query_paths == b.query_paths and a.gallery_paths == b.gallery_paths
    code, out_folder, _ = _run(capsys, "evaluate", str(gallery), "--skip-errors", "--json", "--seed", "3")
    assert code == 0
    code, out_store, _ = _run(capsys, "evaluate", str(store_file), "--json", "--seed", "3")
    assert code == 0
    folder_json, store_json = json.loads(out_folder), json.loads(out_store)
    for key in ("recall@1", "recall@5", "map@100", "mrr"):
        assert folder_json["configurations"][0][key] == store_json["configurations"][0][key]
    assert folder_json["n_queries"] == store_json["n_queries"]
    assert folder_json["skipped"] == [str(gallery / "c2" / "zz_broken.png")]
    labels = store_json["dataset"]["labels"]
    assert labels == {"n_labels": 6, "images_per_label": {"min": 7, "median": 7.0}, "root": str(gallery)}


def test_evaluate_refuses_a_store_whose_paths_left_its_labels_root(
    gallery: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_file = _build(capsys, gallery, tmp_path / "s.safetensors")
    _classes(tmp_path / "queries", {"new": 3}, seed=9)
    code, _, err = _run(capsys, "add", str(store_file), str(tmp_path / "queries"))
    assert code == 0, err
    code, out, err = _run(capsys, "evaluate", str(store_file))
    assert code == 2 and out == ""
    assert "3 of the 45 images" in err and "outside the labels' root" in err and "--labels-root" in err
    code, _, err = _run(capsys, "tune", str(store_file), "--out", str(tmp_path / "t.json"), "--trials", "1")
    assert code == 2 and "outside the labels' root" in err
    assert not (tmp_path / "t.json").exists()
    # Stating a root under which every image has a label folder scores again: labels g and queries.
    code, out, err = _run(capsys, "evaluate", str(store_file), "--labels-root", str(tmp_path))
    assert code == 0, err
    assert f"labels: 2 labels from the folders of {tmp_path}, images per label: min 3, median 22.5" in out


def test_evaluate_refuses_labels_that_are_not_classes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = tmp_path / "one"
    _classes(one, {"only": 6})
    code, out, err = _run(capsys, "evaluate", str(one))
    assert code == 2 and out == "" and "1 label ('only')" in err
    lopsided = tmp_path / "lopsided"
    _classes(lopsided, {"big": 9, "a": 1, "b": 1, "c": 1})
    code, _, err = _run(capsys, "evaluate", str(lopsided))
    assert code == 2 and "label 'big' holds 9 of 12 images" in err


def test_the_text_output_shows_the_labels(gallery: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "evaluate", str(gallery), "--skip-errors")
    assert code == 0
    assert f"labels: 6 labels from the folders of {gallery}, images per label: min 7, median 7" in out


@pytest.mark.parametrize(
    ("sizes", "said"),
    [
        ({"cat": 8}, "1 label ('cat'): scoring needs at least 2"),
        ({f"c{i}": 1 for i in range(9)}, "each of the 9 labels holds one image: no query has a match"),
    ],
)
@pytest.mark.parametrize("options", [[], ["--expand", "--rerank"]])
def test_a_folder_of_one_class_or_of_classes_of_one_image_says_what_it_saw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sizes: dict[str, int], said: str, options: list[str]
) -> None:
    """Bad input (issue 33): the defaults are not run on labels that cannot be scored; one line says why."""
    folder = tmp_path / "g"
    _classes(folder, sizes)
    code, out, err = _run(capsys, "evaluate", str(folder), *options)
    assert code == 2 and out == ""
    assert said in err and len(err.strip().splitlines()) == 1 and str(folder) in err


def test_labels_root_is_for_stores_only(gallery: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "evaluate", str(gallery), "--labels-root", str(gallery))
    assert code == 2 and "applies to a store file" in err


def test_label_checks_against_their_definitions() -> None:
    assert labels_root_of("/g", ["/g/a/1.png", "/g/2.png"]) == "/g"
    assert labels_root_of("/g", ["/g/2.png", "/gx/a/1.png"]) is None
    assert labels_under(["/g/a/1.png", "/gx/a/1.png", "/g/b/c/d.png"], "/g") == (
        ["a", "", "b"],
        ["/gx/a/1.png"],
    )
    assert label_problem(["a", "a", "b", "b"]) is None
    assert label_problem(["a", "a", "a", "b"]) is not None  # 3 of 4 and the other a single image
    assert label_problem(["a", "a", "b", "b", "c"]) is None  # no label above half
    assert label_problem(["a", "a", "a", "b", "b", "c"]) is None  # the others are not all single
    assert "each of the 3 labels holds one image" in str(label_problem(["a", "b", "c"]))
    assert label_problem(["a", "b", "c", "c"]) is None  # one label with a match is enough
    summary = summarise_labels(["a"] * 3 + ["b"] * 5 + ["c"], "/r")
    assert (summary.n_labels, summary.min_per_label, summary.median_per_label) == (3, 1, 3.0)
    assert os.sep not in summary.line().split(" from ")[0]


def test_the_tuner_prints_numbers_rounded_for_reading() -> None:
    assert rounded_for_reading("λ=0.123456789, k=50, alpha 3.0") == "λ=0.1235, k=50, alpha 3.0"
    assert rounded_for_reading("lift +0.0123 (0.99999999)") == "lift +0.0123 (1)"


def test_search_keeps_the_label_folder_and_file_name_readable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("a-long-folder-name-" * 3) / "photos"
    _classes(deep, {"tabby-cat": 3, "dog": 3})
    store_file = _build(capsys, deep, tmp_path / "s.safetensors")
    monkeypatch.setenv("COLUMNS", "50")
    code, out, err = _run(
        capsys, "search", str(store_file), "--image", str(deep / "dog" / "00.png"), "-k", "3"
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == "rank  distance  path"  # a header names the columns
    results = [line for line in lines if line.startswith("  ")]
    assert len(results) == 3 and results[0].endswith(f"  {deep / 'dog' / '00.png'}")  # whole, past 50
    assert all(f"{deep}/dog/" in line or f"{deep}/tabby-cat/" in line for line in results)
    assert "…" not in out
