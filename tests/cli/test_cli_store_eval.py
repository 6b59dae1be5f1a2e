"""``evaluate`` and ``tune`` on a built store (nothing embedded again), and settings that cannot leak."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from _support.extras import needs
from galleria.cli import main
from galleria.embedders.pixel import PixelEmbedder

COLOURS = {"red": (200, 40, 40), "green": (40, 190, 60), "blue": (40, 60, 210)}
TUNE = ("--trials", "2", "--splits", "1", "--methods", "plain", "aqe", "--n-validation-queries", "6")


def _write(root: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for label, colour in COLOURS.items():
        (root / label).mkdir(parents=True)
        for number in range(12):
            noise = rng.normal(0, 60, (10, 10, 3))
            Image.fromarray(np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8)).save(
                root / label / f"{number:02d}.png"
            )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store-eval") / "colours"
    _write(root, 0)
    return root


@pytest.fixture(scope="module")
def store(folder: Path) -> Path:
    out = folder.parent / "colours.safetensors"
    assert main(["build", str(folder), "--out", str(out), "--workers", "1"]) == 0
    return out


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, _, err = _run(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"galleria {args[0]}: error: ")
    return lines[0]


def _refuse(self: object, images: object) -> None:
    raise AssertionError("an image was embedded")


def test_evaluate_a_store_gives_the_folders_figures_without_embedding(
    folder: Path, store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    options = ("--expand", "--rerank", "--pool", "20", "--k1", "5", "--k2", "2", "--json", "--seed", "2")
    code, stdout, err = _run(capsys, "evaluate", str(folder), *options, "--workers", "1")
    assert code == 0, err
    from_folder = json.loads(stdout)
    monkeypatch.setattr(PixelEmbedder, "embed", _refuse)
    code, stdout, err = _run(capsys, "evaluate", str(store), *options)
    assert code == 0, err
    from_store = json.loads(stdout)
    assert from_store["n_queries"] == from_folder["n_queries"] == 4
    assert from_store["n_gallery"] == from_folder["n_gallery"] == 32
    for ours, theirs in zip(from_store["configurations"], from_folder["configurations"], strict=True):
        for key in ("recall@1", "recall@5", "map@100", "mrr"):
            assert ours[key] == pytest.approx(theirs[key], abs=1e-6), key
    assert from_store["dataset"]["store"] == str(store)
    # metric learning on a store: the stored vectors, again nothing embedded
    code, stdout, err = _run(capsys, "evaluate", str(store), "--protocol", "metric-learning", "--json")
    assert code == 0, err
    assert json.loads(stdout)["n_images"] == 36


def test_store_mode_refuses_embedding_options(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(capsys, "evaluate", str(store), "--embedder", "pixel:8")
    assert "--embedder does not apply to the store file" in line
    line = _refused(capsys, "tune", str(store), "--out", str(store.parent / "t.json"), "--skip-errors")
    assert "--skip-errors does not apply" in line
    line = _refused(capsys, "evaluate", str(store), "--space", "l2")
    assert "--space l2 does not apply to the store file" in line and "cosine space" in line
    line = _refused(capsys, "evaluate", str(store), "--protocol", "metric-learning", "--settings", "t.json")
    assert "--settings does not apply to --protocol metric-learning" in line


@needs("optuna")
def test_relative_folders_work(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder.parent)
    code, _, err = _run(capsys, "tune", "colours", "--out", str(tmp_path / "tuned.json"), *TUNE)
    assert code == 0, err
    code, stdout, err = _run(capsys, "evaluate", "colours", "--protocol", "metric-learning", "--json")
    assert code == 0, err
    assert json.loads(stdout)["n_images"] == 36
    code, _, err = _run(capsys, "evaluate", "colours", "--settings", str(tmp_path / "tuned.json"))
    assert code == 0, err


@needs("optuna")
def test_settings_record_their_split_and_evaluate_refuses_others(
    folder: Path,
    store: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tuned = tmp_path / "tuned.json"
    monkeypatch.setattr(PixelEmbedder, "embed", _refuse)
    code, stdout, err = _run(capsys, "tune", str(store), "--out", str(tuned), *TUNE)
    assert code == 0, err
    assert "evaluate with the same --seed 0 and --query-fraction 0.1" in stdout
    document = json.loads(tuned.read_text())
    record = document["tuned_on"]
    assert record["test_split"]["seed"] == 0 and record["test_split"]["query_fraction"] == 0.1
    assert record["test_split"]["count"] == 4 and record["gallery"]["n_images"] == 32
    assert document["source"]["kind"] == "store"
    # The same split, from the folder the store was built from or from the store itself: accepted.
    monkeypatch.undo()
    for source in (folder, store):
        if source == store:
            monkeypatch.setattr(PixelEmbedder, "embed", _refuse)
        code, stdout, err = _run(capsys, "evaluate", str(source), "--settings", str(tuned), "--workers", "1")
        assert code == 0 and "galleria tune` chooses" not in err, err
    for extra, message in (
        (
            ("--seed", "1"),
            "tuned with the test split --seed 0 --query-fraction 0.1, but this evaluation draws",
        ),
        (("--query-fraction", "0.2"), "--seed 0 --query-fraction 0.2; give the same split"),
        (("--n-queries", "3"), "--seed 0 --n-queries 3"),
    ):
        assert message in _refused(capsys, "evaluate", str(store), "--settings", str(tuned), *extra)


@needs("optuna")
def test_settings_from_another_gallery_or_holding_the_test_queries(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    _write(other, 5)
    tuned = tmp_path / "other.json"
    code, _, err = _run(capsys, "tune", str(other), "--out", str(tuned), *TUNE, "--workers", "1")
    assert code == 0, err
    line = _refused(capsys, "evaluate", str(folder), "--settings", str(tuned))
    assert "held out other test queries" in line or "another gallery" in line
    # A file tuned on every image (the test queries included): refused as a leak.
    document = json.loads(tuned.read_text())
    from galleria.datasets import load_image_folder
    from galleria.tune.provenance import split_record

    everything = load_image_folder(os.path.abspath(folder)).paths
    document["tuned_on"] = split_record(
        seed=0, split_option={"query_fraction": 0.1}, test_paths=[], tuned_paths=everything
    )
    del document["tuned_on"]["test_split"]
    leaky = tmp_path / "leaky.json"
    leaky.write_text(json.dumps(document))
    line = _refused(capsys, "evaluate", str(folder), "--settings", str(leaky))
    assert "was tuned on 4 of these 4 test queries (a leak" in line
    # An older file without the record: accepted, with a warning that it cannot be checked.
    del document["tuned_on"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(document))
    code, _, err = _run(capsys, "evaluate", str(folder), "--settings", str(old), "--workers", "1")
    assert code == 0 and "does not record the split it was tuned on" in err


def test_the_tune_hint_only_without_settings() -> None:
    from types import SimpleNamespace

    from galleria.cli.evaluate import _lowering_warnings
    from galleria.evaluation import RetrievalConfig

    plain = SimpleNamespace(config=RetrievalConfig("plain"), map_at_100=0.5, recall_at_1=0.6)
    worse = SimpleNamespace(config=RetrievalConfig("tuned", rerank=True), map_at_100=0.4, recall_at_1=0.6)
    assert "galleria tune" in _lowering_warnings([plain, worse])[-1]
    assert all("galleria tune" not in line for line in _lowering_warnings([plain, worse], hint=False))


def test_provenance_record_is_checked(tmp_path: Path) -> None:
    from galleria.tune.provenance import check_tuned_split, path_hashes

    for bad, message in (
        ([], "tuned_on must be a JSON object"),
        ({"gallery": 3}, "tuned_on.gallery must be"),
        ({"gallery": {"path_hashes": "***"}}, "not base64"),
        ({"gallery": {"path_hashes": "AAAA"}}, "multiple of 8"),
        ({"gallery": {"path_hashes": path_hashes(["a"])}, "test_split": 1}, "test_split must be"),
    ):
        with pytest.raises(ValueError, match=message):
            check_tuned_split(bad, seed=0, split_option={}, test_paths=["q"], gallery_paths=["a"], where="f")
