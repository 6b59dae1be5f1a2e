"""One option vocabulary: the new spellings, the old ones as warning aliases, one pool, --index-param."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from _support.extras import needs
from galleria.cli import COMMANDS, build_parser, main
from galleria.cli._rerank_options import rerank_settings
from galleria.retrieval.config import DEFAULT_POOL

COLOURS = {"red": (200, 40, 40), "green": (40, 190, 60), "blue": (40, 60, 210)}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vocabulary") / "colours"
    rng = np.random.default_rng(0)
    for label, colour in COLOURS.items():
        (root / label).mkdir(parents=True)
        for number in range(12):
            noise = rng.normal(0, 50, (10, 10, 3))
            Image.fromarray(np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8)).save(
                root / label / f"{number:02d}.png"
            )
    return root


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@needs("matplotlib")
def test_old_spellings_warn_once_and_mean_the_same(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ("evaluate", str(folder), "--workers", "1", "--json")
    code, new_out, new_err = _run(capsys, *common, "--n-queries", "6", "--report", str(tmp_path / "a"))
    assert code == 0 and "warning" not in new_err, new_err
    code, old_out, old_err = _run(capsys, *common, "--queries", "6", "--out", str(tmp_path / "b"))
    assert code == 0, old_err
    assert "galleria evaluate: warning: --queries is deprecated; use --n-queries N" in old_err
    assert "galleria evaluate: warning: --out is deprecated; use --report DIR" in old_err
    first, second = json.loads(new_out), json.loads(old_out)
    assert [c["map@100"] for c in first["configurations"]] == [c["map@100"] for c in second["configurations"]]
    assert (tmp_path / "a" / "metrics.json").is_file() and (tmp_path / "b" / "metrics.json").is_file()


def test_evaluate_scores_protocol_and_space_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    np.save(tmp_path / "s.npy", rng.random((4, 6)))
    np.save(tmp_path / "gt.npy", np.array([0, 1, 2, 3]))
    args = (
        "evaluate-scores",
        "--scores",
        str(tmp_path / "s.npy"),
        "--ground-truth",
        str(tmp_path / "gt.npy"),
    )
    code, new, err = _run(capsys, *args, "--protocol", "retrieval", "--json")
    assert code == 0 and not err
    code, old, err = _run(capsys, *args, "--protocol", "recall", "--json")
    assert code == 0 and json.loads(old) == json.loads(new)
    assert "warning: --protocol recall is deprecated; use --protocol retrieval" in err
    np.save(tmp_path / "e.npy", rng.normal(size=(8, 3)))
    np.save(tmp_path / "l.npy", np.array([0, 0, 1, 1, 2, 2, 3, 3]))
    learning = ("evaluate-scores", "--protocol", "metric-learning", "--embeddings", str(tmp_path / "e.npy"))
    learning += ("--labels", str(tmp_path / "l.npy"), "--json")
    code, new, err = _run(capsys, *learning, "--space", "l2")
    assert code == 0 and not err and json.loads(new)["metric"] == "euclidean"
    code, old, err = _run(capsys, *learning, "--metric", "euclidean")
    assert code == 0 and json.loads(old) == json.loads(new) and "--metric is deprecated" in err
    code, _, err = _run(capsys, *args, "--space", "l2")
    assert code == 2 and "--space does not apply to --protocol retrieval" in err


@needs("optuna")
def test_tune_validation_spellings(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ("tune", str(folder), "--trials", "1", "--splits", "1", "--methods", "plain", "--workers", "1")
    documents = []
    for extra in (("--n-validation-queries", "6"), ("--validation-queries", "6")):
        out = tmp_path / f"{extra[0]}.json"
        code, _, err = _run(capsys, *base, "--out", str(out), *extra)
        assert code == 0, err
        assert ("deprecated" in err) == (extra[0] == "--validation-queries")
        documents.append(json.loads(out.read_text()))
    assert documents[0]["validation"] == documents[1]["validation"]
    assert documents[0]["validation"]["n_queries"] == 6
    code, _, err = _run(capsys, *base, "--out", str(tmp_path / "f.json"), "--validation-fraction", "0.2")
    assert code == 0, err
    code, _, err = _run(capsys, *base, "--out", str(tmp_path / "g.json"), "--validation-fraction", "2")
    assert code == 2 and "--validation-fraction must be a share strictly between 0 and 1" in err


def test_one_pool_default_everywhere() -> None:
    from galleria.evaluation import RetrievalConfig
    from galleria.viewer.settings import SearchSettings

    parser = build_parser()
    for argv in (["search", "s.safetensors", "--image", "q.png", "--rerank"], ["evaluate", "d", "--rerank"]):
        assert rerank_settings(parser.parse_args(argv))["pool"] == DEFAULT_POOL == 200
    assert SearchSettings().config.pool == RetrievalConfig("x").pool == DEFAULT_POOL
    assert SearchSettings.from_mapping({"rerank": "1"}).config.pool == DEFAULT_POOL


def test_help_shows_only_the_current_spellings(capsys: pytest.CaptureFixture[str]) -> None:
    for command in COMMANDS:
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        if command in ("evaluate", "demo"):
            assert "--n-queries" in text and "--report" in text and "--out " not in text
        if command == "tune":
            assert "--n-validation-queries" in text and "--validation-queries" not in text
        if command == "evaluate-scores":
            assert "recall|" not in text and "--metric" not in text and "retrieval" in text


def test_index_param(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from galleria.store import InMemoryImageEmbeddingStore

    out = tmp_path / "s.safetensors"
    code, _, err = _run(
        capsys, "build", str(folder), "--out", str(out), "--index", "hnsw", "--index-param", "graph_degree=8",
        "--index-param", "search_candidates=40", "--workers", "1",
    )  # fmt: skip
    assert code == 0, err
    params = InMemoryImageEmbeddingStore.load_from_disk(out).search_index.params()
    assert params["graph_degree"] == 8 and params["search_candidates"] == 40
    small = tmp_path / "ivfpq.safetensors"
    code, _, err = _run(
        capsys, "build", str(folder), "--out", str(small), "--index", "ivfpq", "--index-param", "lists=2",
        "--index-param", "bits=4", "--index-param", "subquantizers=4", "--workers", "1",
    )  # fmt: skip
    assert code == 0, err
    assert InMemoryImageEmbeddingStore.load_from_disk(small).search_index.params()["lists"] == 2
    for extra, message in (
        (["--index-param", "degree"], "must be KEY=VALUE"),
        (["--index", "hnsw", "--index-param", "nope=1"], "unknown hnsw index parameter"),
        (["--index", "hnsw", "--index-param", "graph_degree=many"], "graph_degree"),
        (["--index-param", "lists=4"], "the exact index takes no parameters"),
        (["--index", "ivfpq", "--index-param", "lists=2", "--index-param", "lists=3"], "given twice"),
    ):
        code, _, err = _run(capsys, "build", str(folder), "--out", str(tmp_path / "x.safetensors"), *extra)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and message in lines[0], err
        assert lines[0].startswith("galleria build: error: --index-param")
    assert not (tmp_path / "x.safetensors").exists()
    code, stdout, err = _run(
        capsys, "evaluate", str(folder), "--index", "hnsw", "--index-param", "graph_degree=6", "--json",
        "--workers", "1",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(stdout)["index"]["params"] == {"graph_degree": 6}
