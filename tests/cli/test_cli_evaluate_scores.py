"""``galleria evaluate-scores``: figures, JSON, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from galleria.cli import main
from galleria.metrics import mean_rank, median_rank, mrr_from_ranks, recall_at_k, retrieval_ranks


@pytest.fixture
def arrays(tmp_path: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    scores = rng.random((40, 25), dtype=np.float32).round(1)
    truth = rng.integers(0, 25, size=40)
    scores_path = tmp_path / "scores.npy"
    truth_path = tmp_path / "gt.npy"
    np.save(scores_path, scores)
    np.save(truth_path, truth)
    return scores_path, truth_path, scores, truth


def test_json_output_matches_the_library(
    arrays: tuple[Path, Path, np.ndarray, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    scores_path, truth_path, scores, truth = arrays
    code = main(
        [
            "evaluate-scores",
            "--scores",
            str(scores_path),
            "--ground-truth",
            str(truth_path),
            "--ks",
            "1",
            "5",
            "5",
            "--json",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    payload = json.loads(out)
    ranks = retrieval_ranks(scores, truth)
    assert payload == {
        "n_queries": 40,
        "n_gallery": 25,
        "ks": [1, 5, 5],
        "recall_at_k": recall_at_k(scores, truth, [1, 5, 5]),
        "mrr": mrr_from_ranks(ranks),
        "median_rank": median_rank(ranks),
        "mean_rank": mean_rank(ranks),
    }
    assert out == json.dumps(payload, indent=2, sort_keys=True) + "\n"  # stable: sorted keys


def test_table_output_has_every_figure(
    arrays: tuple[Path, Path, np.ndarray, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    scores_path, truth_path, scores, truth = arrays
    assert main(["evaluate-scores", "--scores", str(scores_path), "--ground-truth", str(truth_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = {line.rsplit("  ", 1)[0].strip(): line.rsplit("  ", 1)[1].strip() for line in lines}
    recalls = recall_at_k(scores, truth, [1, 5, 10])
    assert table["queries"] == "40"
    assert table["gallery items"] == "25"
    assert [table["Recall@1"], table["Recall@5"], table["Recall@10"]] == [f"{r:.4f}" for r in recalls]
    ranks = retrieval_ranks(scores, truth)
    assert table["MRR"] == f"{mrr_from_ranks(ranks):.4f}"
    assert table["median rank (1-indexed)"] == f"{median_rank(ranks):g}"


def test_ground_truth_as_a_boolean_mask(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scores = np.array([[0.9, 0.5, 0.5], [0.1, 0.7, 0.7]])
    mask = np.array([[False, True, True], [True, False, True]])
    np.save(tmp_path / "s.npy", scores)
    np.save(tmp_path / "m.npy", mask)
    code = main(
        [
            "evaluate-scores",
            "--scores",
            str(tmp_path / "s.npy"),
            "--ground-truth",
            str(tmp_path / "m.npy"),
            "--ks",
            "1",
            "2",
            "--json",
        ]
    )
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["recall_at_k"] == [0.0, 1.0]  # ranks 1 and 1
    assert payload["median_rank"] == 2.0


def _write_bad_files(folder: Path) -> dict[str, Path]:
    (folder / "garbage.npy").write_bytes(b"not a numpy file at all")
    (folder / "empty.npy").write_bytes(b"")
    np.save(folder / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(folder / "archive.npz", a=np.zeros(3))
    header_only = folder / "truncated.npy"
    np.save(header_only, np.zeros((100, 100)))
    header_only.write_bytes(header_only.read_bytes()[:200])
    (folder / "adir.npy").mkdir()
    return {
        "missing": folder / "missing.npy",
        "garbage": folder / "garbage.npy",
        "empty": folder / "empty.npy",
        "objects": folder / "objects.npy",
        "archive": folder / "archive.npz",
        "truncated": header_only,
        "directory": folder / "adir.npy",
    }


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "does not exist"),
        ("garbage", "is not a .npy file"),
        ("empty", "is not a .npy file"),
        ("objects", "is not a readable .npy array"),
        ("archive", "is not a .npy file"),
        ("truncated", "is not a readable .npy array"),
        ("directory", "is a directory"),
    ],
)
@pytest.mark.parametrize("option", ["--scores", "--ground-truth"])
def test_unreadable_files_are_one_line_errors_with_exit_code_2(
    arrays: tuple[Path, Path, np.ndarray, np.ndarray],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    message: str,
    option: str,
) -> None:
    scores_path, truth_path, _, _ = arrays
    bad = _write_bad_files(tmp_path)[case]
    files = {"--scores": str(scores_path), "--ground-truth": str(truth_path), option: str(bad)}
    code = main(["evaluate-scores", "--scores", files["--scores"], "--ground-truth", files["--ground-truth"]])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"galleria evaluate-scores: error: {option} file ")
    assert message in lines[0]


@pytest.mark.parametrize(
    ("scores", "truth", "ks", "message"),
    [
        (np.array([[0.1, np.nan]]), np.array([0]), ["1"], "--scores contains NaN (first at row 0, column 1)"),
        (np.zeros(3), np.array([0]), ["1"], "--scores must be 2-D"),
        (np.zeros((2, 3)), np.array([0, 3]), ["1"], "--ground-truth[1] = 3 is out of range [0, 3)"),
        (np.zeros((2, 3)), np.array([0]), ["1"], "--ground-truth must have 2 entries"),
        (np.zeros((2, 3)), np.array([0.0, 1.0]), ["1"], "--ground-truth must hold integer indices"),
        (np.zeros((2, 3)), np.array([0, 1]), ["0"], "--ks must be at least 1, got 0"),
        (np.zeros((2, 3)), np.array([0, 1]), ["x"], "--ks must be an integer, got 'x'"),
        (np.zeros((2, 3), dtype=bool), np.array([0, 1]), ["1"], "--scores must hold real numbers"),
    ],
)
def test_bad_values_are_one_line_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    scores: np.ndarray,
    truth: np.ndarray,
    ks: list[str],
    message: str,
) -> None:
    np.save(tmp_path / "s.npy", scores)
    np.save(tmp_path / "g.npy", truth)
    code = main(
        [
            "evaluate-scores",
            "--scores",
            str(tmp_path / "s.npy"),
            "--ground-truth",
            str(tmp_path / "g.npy"),
            "--ks",
            *ks,
        ]
    )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert message in err


def test_the_console_command_prints_no_traceback(tmp_path: Path) -> None:
    np.save(tmp_path / "g.npy", np.array([0]))
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "galleria",
            "evaluate-scores",
            "--scores",
            str(tmp_path / "nope.npy"),
            "--ground-truth",
            str(tmp_path / "g.npy"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    assert (
        completed.stderr.strip()
        == f"galleria evaluate-scores: error: --scores file {str(tmp_path / 'nope.npy')!r} does not exist"
    )


@pytest.mark.parametrize("option", ["--scores", "--ground-truth"])
def test_fifo_or_device_inputs_are_refused_at_once(tmp_path: Path, option: str) -> None:
    scores = tmp_path / "s.npy"
    np.save(scores, np.eye(3))
    truth = tmp_path / "g.npy"
    np.save(truth, np.arange(3))
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    for special in (str(fifo), "/dev/zero"):
        files = {"--scores": str(scores), "--ground-truth": str(truth), option: special}
        done = subprocess.run(
            [sys.executable, "-m", "galleria", "evaluate-scores", *[x for kv in files.items() for x in kv]],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2
        assert "not a regular file" in done.stderr and len(done.stderr.strip().splitlines()) == 1
