"""Every command's ``--json`` output is strict JSON: no NaN, no Infinity (a strict parser reads it),
and a non-finite score is never shown as a number in text either."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from _support.extras import needs
from galleria.cli import main
from galleria.cli._common import print_json
from galleria.viewer.text import format_score

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220)}


def strict(text: str) -> Any:
    """Parse ``text`` refusing NaN, Infinity and -Infinity (Python's parser accepts them)."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("strict")
    rng = np.random.default_rng(1)
    for label, colour in COLOURS.items():
        (root / label).mkdir()
        for number in range(10):
            noise = rng.normal(0, 50, (10, 10, 3))
            Image.fromarray(np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8)).save(
                root / label / f"{number}.png"
            )
    return root


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    code = main([*args, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return strict(captured.out)


def test_print_json_writes_null_for_non_finite_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    print_json({"a": float("nan"), "b": [float("inf"), np.float32(-np.inf), np.float64(0.5)], "c": 1})
    assert strict(capsys.readouterr().out) == {"a": None, "b": [None, None, 0.5], "c": 1}


def test_every_command_prints_strict_json(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s.safetensors"
    images = sorted(str(p) for p in (folder / "red").iterdir())
    run_json(capsys, "build", str(folder / "green"), "--out", str(store), "--workers", "1")
    run_json(capsys, "add", str(store), *images[:3])
    run_json(capsys, "remove", str(store), images[0])
    run_json(capsys, "sync", str(store), str(folder / "green"))
    run_json(capsys, "info", str(store))
    run_json(capsys, "models")
    found = run_json(capsys, "search", str(store), "--image", images[5], "-k", "3")
    assert len(found["queries"][0]["results"]) == 3
    run_json(capsys, "evaluate", str(folder), "--workers", "1")
    scores, truth = tmp_path / "scores.npy", tmp_path / "truth.npy"
    np.save(scores, np.random.default_rng(0).normal(size=(4, 6)))
    np.save(truth, np.eye(4, 6, dtype=bool))
    run_json(
        capsys, "evaluate-scores", "--scores", str(scores), "--ground-truth", str(truth), "--ks", "1", "5"
    )


@needs("optuna")
def test_tune_prints_strict_json(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "tuned.json"
    run_json(
        capsys, "tune", str(folder), "--out", str(settings), "--trials", "2", "--splits", "2",
        "--validation-queries", "6", "--workers", "1",
    )  # fmt: skip


def test_search_never_prints_a_non_finite_score(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from galleria.index import ExactIndex

    store = tmp_path / "s.safetensors"
    assert main(["build", str(folder / "blue"), "--out", str(store), "--workers", "1"]) == 0
    real = ExactIndex.search

    def overflowing(self: ExactIndex, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        ids, scores = real(self, queries, k)
        scores = scores.copy()
        scores[:, 1:] = np.inf  # what distances of overflowing vectors came out as
        return ids, scores

    monkeypatch.setattr(ExactIndex, "search", overflowing)
    query = str(next((folder / "blue").iterdir()))
    payload = run_json(capsys, "search", str(store), "--image", query, "-k", "4")
    assert [math.isfinite(r["score"]) for r in payload["queries"][0]["results"]] == [True]
    capsys.readouterr()
    assert main(["search", str(store), "--image", query, "-k", "4"]) == 0
    text = capsys.readouterr().out
    assert "inf" not in text and "nan" not in text.lower()


def test_text_shows_non_finite_scores_as_not_available() -> None:
    assert format_score(float("nan")) == "n/a" and format_score(float("-inf"), 6) == "n/a"
    assert format_score(0.25, 6) == "0.250000" and format_score(-1e-9, 6) == "0.000000"
