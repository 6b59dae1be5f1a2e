"""``galleria evaluate-scores --protocol …`` and ``galleria evaluate --protocol metric-learning``."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from galleria.cli import main
from galleria.metrics import metric_learning_evaluate, reid_evaluate, retrieval_ranks, revisited_evaluate


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out) if "--json" in args else captured.out


def _fails(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture
def reid_files(tmp_path: Path) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    probes, gallery = 12, 30
    arrays = {
        "d": rng.random((probes, gallery)).astype(np.float32).round(2),
        "qid": rng.integers(0, 5, probes),
        "gid": rng.integers(-1, 5, gallery),
        "qcam": rng.integers(0, 3, probes),
        "gcam": rng.integers(0, 3, gallery),
    }
    for name, array in arrays.items():
        np.save(tmp_path / f"{name}.npy", array)
    return {"dir": tmp_path, **arrays}


def _reid_args(files: dict[str, Any]) -> list[str]:
    folder = files["dir"]
    return [
        "evaluate-scores",
        "--protocol",
        "reid",
        "--query-ids",
        str(folder / "qid.npy"),
        "--gallery-ids",
        str(folder / "gid.npy"),
        "--query-cameras",
        str(folder / "qcam.npy"),
        "--gallery-cameras",
        str(folder / "gcam.npy"),
    ]


def test_reid_protocol_matches_the_library(
    reid_files: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = reid_files["dir"]
    per_query, out = tmp_path / "q.csv", tmp_path / "report"
    payload = _run(
        capsys,
        *_reid_args(reid_files),
        "--distances",
        str(folder / "d.npy"),
        "--max-rank",
        "10",
        "--per-query",
        str(per_query),
        "--report",
        str(out),
        "--json",
    )
    expected = reid_evaluate(
        reid_files["d"],
        reid_files["qid"],
        reid_files["gid"],
        reid_files["qcam"],
        reid_files["gcam"],
        max_rank=10,
    )
    assert payload["mAP"] == pytest.approx(expected.mAP)
    assert payload["mINP"] == pytest.approx(expected.mINP)
    assert payload["cmc"] == pytest.approx(expected.cmc.tolist())
    assert payload["valid_queries"] == expected.valid_queries
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["protocol"] == "reid" and saved["schema"] == "galleria.protocols/1"
    assert saved["pr_curve"]["precision"] == pytest.approx(expected.pr_precision.tolist())
    assert len(saved["pr_curve"]["recall"]) == 21
    rows = _csv(per_query)
    assert [row["query"] for row in rows] == [str(i) for i in range(12)]
    for row, ap, first, count in zip(
        rows, expected.ap, expected.first_positive_rank, expected.n_positives, strict=True
    ):
        assert int(row["first_positive_rank"]) == first and int(row["positives"]) == count
        assert (row["ap"] == "") if math.isnan(ap) else float(row["ap"]) == pytest.approx(ap, abs=1e-6)
        top = [int(x) for x in row["top10"].split()]
        assert len(top) <= 10 and all(reid_files["gid"][j] != -1 for j in top)
    # Similarities are the negated distances: same figures.
    np.save(folder / "s.npy", -reid_files["d"])
    flipped = _run(
        capsys, *_reid_args(reid_files), "--scores", str(folder / "s.npy"), "--max-rank", "10", "--json"
    )
    assert flipped["mAP"] == pytest.approx(expected.mAP)
    table = _run(capsys, *_reid_args(reid_files), "--scores", str(folder / "s.npy"))
    assert "mAP" in table and "CMC@1" in table


def test_revisited_protocol_reads_json_ground_truth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(1)
    sims = rng.random((5, 20))
    truth = []
    for _ in range(5):
        labels = rng.choice(["easy", "hard", "junk", "none"], size=20)
        truth.append({key: np.flatnonzero(labels == key).tolist() for key in ("easy", "hard", "junk")})
    np.save(tmp_path / "s.npy", sims)
    (tmp_path / "gnd.json").write_text(json.dumps({"gnd": truth, "imlist": [], "qimlist": []}))
    (tmp_path / "list.json").write_text(json.dumps(truth))
    expected = revisited_evaluate(sims, truth, kappas=[1, 5])
    for name in ("gnd.json", "list.json"):
        payload = _run(
            capsys,
            "evaluate-scores",
            "--protocol",
            "revisited",
            "--scores",
            str(tmp_path / "s.npy"),
            "--ground-truth",
            str(tmp_path / name),
            "--kappas",
            "1",
            "5",
            "--per-query",
            str(tmp_path / "q.csv"),
            "--json",
        )
        for setting in ("easy", "medium", "hard"):
            assert payload[setting]["mAP"] == pytest.approx(expected[setting]["mAP"])
            assert payload[setting]["mP@5"] == pytest.approx(expected[setting]["mP@5"])
            assert len(payload[setting]["pr_curve"]["precision"]) == 21
    rows = _csv(tmp_path / "q.csv")
    assert len(rows) == 15 and rows[0]["setting"] == "easy" and rows[1]["setting"] == "medium"


def test_metric_learning_protocol_matches_the_library(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(2)
    embeddings = rng.normal(size=(30, 6)).astype(np.float32)
    labels = rng.integers(0, 4, 30)
    np.save(tmp_path / "e.npy", embeddings)
    np.save(tmp_path / "l.npy", labels)
    args = ["evaluate-scores", "--protocol", "metric-learning", "--embeddings", str(tmp_path / "e.npy")]
    payload = _run(capsys, *args, "--labels", str(tmp_path / "l.npy"), "--space", "l2", "--json")
    expected = metric_learning_evaluate(embeddings, labels, metric="euclidean")
    assert payload["map@r"] == pytest.approx(expected.map_at_r)
    assert payload["r_precision"] == pytest.approx(expected.r_precision)
    assert payload["precision@1"] == pytest.approx(expected.precision_at_1)
    assert "pr_curve" not in payload
    _run(capsys, *args, "--labels", str(tmp_path / "l.npy"), "--report", str(tmp_path / "out"))
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert saved["protocol"] == "metric-learning" and len(saved["pr_curve"]["precision"]) == 21


def test_recall_protocol_detail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scores = np.array([[0.9, 0.5, 0.5], [0.1, 0.7, 0.7]])
    np.save(tmp_path / "s.npy", scores)
    np.save(tmp_path / "d.npy", -scores)
    np.save(tmp_path / "g.npy", np.array([[False, False, True], [True, False, True]]))
    base = ["evaluate-scores", "--ground-truth", str(tmp_path / "g.npy"), "--json"]
    plain = _run(capsys, *base, "--scores", str(tmp_path / "s.npy"))
    assert sorted(plain) == ["ks", "mean_rank", "median_rank", "mrr", "n_gallery", "n_queries", "recall_at_k"]
    flipped = _run(
        capsys, *base, "--distances", str(tmp_path / "d.npy"), "--per-query", str(tmp_path / "q.csv")
    )
    assert flipped == plain
    rows = _csv(tmp_path / "q.csv")
    # Query 0: its positive (index 2) ties with index 1 and comes after it: rank 2. Query 1: positives
    # 0 and 2 at ranks 2 and 1 → first 1, AP = (1/2 + 2/3) / 2.
    ranks = retrieval_ranks(scores, [2, [0, 2]])
    assert [int(row["first_positive_rank"]) for row in rows] == ranks.tolist() == [2, 1]
    assert float(rows[1]["ap"]) == pytest.approx((1 / 2 + 2 / 3) / 2, abs=1e-6)
    assert rows[0]["top10"] == "0 1 2" and rows[1]["top10"] == "1 2 0"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--protocol", "reid", "--scores", "S"], "--protocol reid needs --query-ids"),
        (["--protocol", "reid", "--ground-truth", "G"], "--ground-truth does not apply to --protocol reid"),
        (["--protocol", "revisited", "--ground-truth", "G"], "needs --scores S.npy or --distances D.npy"),
        (["--scores", "S", "--ground-truth", "G", "--kappas", "1"], "--kappas does not apply"),
        (["--protocol", "metric-learning", "--embeddings", "E"], "needs --labels"),
        (
            ["--protocol", "metric-learning", "--scores", "S", "--embeddings", "E", "--labels", "L"],
            "--scores does",
        ),
    ],
)
def test_option_errors(capsys: pytest.CaptureFixture[str], extra: list[str], message: str) -> None:
    assert message in _fails(capsys, "evaluate-scores", *extra)


def test_file_errors(tmp_path: Path, reid_files: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "s.npy", np.zeros((2, 3)))
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "short.json").write_text(json.dumps([{"easy": [0], "hard": [], "junk": []}]))
    (tmp_path / "huge.json").write_text(" " * (2 << 20))
    revisited = ["evaluate-scores", "--protocol", "revisited", "--scores", str(tmp_path / "s.npy")]
    assert "is not valid JSON" in _fails(capsys, *revisited, "--ground-truth", str(tmp_path / "bad.json"))
    assert "must have 2 entries" in _fails(capsys, *revisited, "--ground-truth", str(tmp_path / "short.json"))
    assert "too large" in _fails(capsys, *revisited, "--ground-truth", str(tmp_path / "huge.json"))
    assert "does not exist" in _fails(capsys, *revisited, "--ground-truth", str(tmp_path / "none.json"))
    np.save(reid_files["dir"] / "qid.npy", np.array([0.5] * 12))
    message = _fails(capsys, *_reid_args(reid_files), "--distances", str(reid_files["dir"] / "d.npy"))
    assert "--query-ids must hold integer ids" in message
    np.save(reid_files["dir"] / "qid.npy", reid_files["qid"])
    d = reid_files["d"].copy()
    d[3, 4] = np.inf
    np.save(reid_files["dir"] / "d.npy", d)
    message = _fails(capsys, *_reid_args(reid_files), "--distances", str(reid_files["dir"] / "d.npy"))
    assert "--distances must be finite, got inf at row 3, column 4" in message
    (tmp_path / "folder").mkdir()
    message = _fails(
        capsys,
        *_reid_args(reid_files),
        "--scores",
        str(tmp_path / "s.npy"),
        "--per-query",
        str(tmp_path / "folder"),
    )
    assert "is a directory" in message


def test_console_command_runs_a_protocol(reid_files: dict[str, Any]) -> None:
    folder = reid_files["dir"]
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "galleria",
            *_reid_args(reid_files),
            "--distances",
            str(folder / "d.npy"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["valid_queries"] > 0


# --------------------------------------------------------------------------- galleria evaluate


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ml") / "colours"
    rng = np.random.default_rng(0)
    for label, colour in {"red": (210, 40, 40), "green": (40, 190, 60), "blue": (40, 60, 210)}.items():
        (root / label).mkdir(parents=True)
        for i in range(5):
            pixels = np.clip(np.array(colour) + rng.normal(0, 30, size=(12, 12, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i:02d}.png")
    (root / "lonely").mkdir()
    pixels = np.random.default_rng(99).integers(0, 256, (12, 12, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(root / "lonely" / "only.png")
    return root


def test_evaluate_metric_learning(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from galleria.datasets import load_image_folder
    from galleria.embedders import PixelEmbedder

    per_query, out = tmp_path / "q.csv", tmp_path / "out"
    payload = _run(
        capsys,
        "evaluate",
        str(folder),
        "--protocol",
        "metric-learning",
        "--per-query",
        str(per_query),
        "--report",
        str(out),
        "--json",
    )
    dataset = load_image_folder(folder)
    images = []
    for path in dataset.paths:
        with Image.open(path) as image:
            images.append(np.asarray(image.convert("RGB")))
    embeddings = PixelEmbedder().embed(images)
    assert payload["protocol"] == "metric-learning" and payload["n_images"] == 16
    assert payload["skipped_queries"] == 1  # the one-image class
    assert payload["valid_queries"] == 15
    assert payload["precision@1"] == pytest.approx(1.0)  # three well-separated colours
    expected = metric_learning_evaluate(embeddings, dataset.labels)
    assert payload["map@r"] == pytest.approx(expected.map_at_r)
    rows = _csv(per_query)
    assert len(rows) == 16 and rows[0]["path"].endswith(".png")
    assert json.loads((out / "metrics.json").read_text())["map@r"] == pytest.approx(payload["map@r"])
    text = _run(capsys, "evaluate", str(folder), "--protocol", "metric-learning")
    assert "MAP@R" in text and "R-precision" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--protocol", "metric-learning", "--rerank"], "--rerank does not apply"),
        (["--protocol", "metric-learning", "--n-queries", "3"], "--n-queries does not apply"),
        (["--protocol", "metric-learning", "--space", "ip"], "use --space cosine or l2"),
        (["--per-query", "x.csv"], "--per-query needs --protocol metric-learning"),
    ],
)
def test_evaluate_protocol_errors(
    folder: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert message in _fails(capsys, "evaluate", str(folder), *extra)
