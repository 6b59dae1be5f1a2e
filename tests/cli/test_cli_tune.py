"""Command-line tests of ``galleria tune``, ``--settings`` on evaluate and search, and ``--rerank-method``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from _support.extras import needs
from galleria.cli import main

COLOURS = {"red": (200, 40, 40), "green": (40, 190, 60), "blue": (40, 60, 210)}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("colours")
    rng = np.random.default_rng(0)
    for label, colour in COLOURS.items():
        (root / label).mkdir()
        for number in range(12):
            noise = rng.normal(0, 60, (12, 12, 3))
            image = np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8)
            Image.fromarray(image).save(root / label / f"{number}.png")
    return root


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@needs("optuna")
def test_tune_then_evaluate_and_search_with_the_settings(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tuned.json"
    code, stdout, stderr = _run(
        capsys,
        "tune",
        str(folder),
        "--out",
        str(out),
        "--trials",
        "5",
        "--splits",
        "2",
        "--validation-queries",
        "6",
        "--workers",
        "1",
    )
    assert code == 0, stderr
    document = json.loads(out.read_text())
    assert document["format"] == "galleria-settings"
    assert document["source"]["test_split"] == {"seed": 0, "query_fraction": 0.1, "n_test_queries": 4}
    assert document["validation"]["n_gallery"] == 36 - 4 - 6  # test queries never reach tuning
    assert len(document["lift"]["per_split"]) == 2 and "plain retrieval" in stdout
    code, stdout, stderr = _run(
        capsys, "evaluate", str(folder), "--settings", str(out), "--json", "--workers", "1"
    )
    assert code == 0, stderr
    payload = json.loads(stdout)
    assert [entry["name"] for entry in payload["configurations"]] == ["plain", "tuned"]
    assert payload["configurations"][1]["settings"] == document["settings"]
    store = tmp_path / "s.safetensors"
    assert main(["build", str(folder), "--out", str(store), "--workers", "1"]) == 0
    query = str(next((folder / "red").iterdir()))
    code, stdout, stderr = _run(
        capsys, "search", str(store), "--image", query, "--settings", str(out), "--json"
    )
    assert code == 0, stderr
    assert len(json.loads(stdout)["queries"][0]["results"]) == 10
    code, stdout, stderr = _run(
        capsys,
        "tune",
        str(store),
        "--out",
        str(tmp_path / "t2.json"),
        "--trials",
        "2",
        "--splits",
        "1",
        "--validation-queries",
        "6",
        "--methods",
        "plain",
        "gnn",
    )
    assert code == 0, stderr
    assert json.loads((tmp_path / "t2.json").read_text())["source"]["kind"] == "store"


@pytest.mark.parametrize("method", ["diffusion", "gnn", "dba"])
def test_rerank_methods_on_the_command_line(
    folder: Path, method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout, stderr = _run(
        capsys,
        "evaluate",
        str(folder),
        "--rerank",
        "--rerank-method",
        method,
        "--pool",
        "20",
        "--json",
        "--workers",
        "1",
    )
    assert code == 0, stderr
    settings = json.loads(stdout)["configurations"][1]["settings"]
    assert settings["rerank_method"] == method and settings["pool"] == 20


def test_gnn_lambda_on_the_command_line(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, stderr = _run(
        capsys,
        "evaluate",
        str(folder),
        "--rerank",
        "--rerank-method",
        "gnn",
        "--lambda",
        "0",
        "--k1",
        "9",
        "--pool",
        "20",
        "--json",
        "--workers",
        "1",
    )
    assert code == 0, stderr
    settings = json.loads(stdout)["configurations"][1]["settings"]
    assert (settings["k1"], settings["k2"], settings["lambda_value"]) == (9, 7, 0.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rerank-method", "gnn"], "--rerank-method needs --rerank"),
        (
            ["--rerank", "--rerank-method", "diffusion", "--k1", "5"],
            "--k1 needs --rerank-method k-reciprocal or gnn",
        ),
        (
            ["--rerank", "--rerank-method", "dba", "--lambda", "0.2"],
            "--lambda needs --rerank-method k-reciprocal or gnn",
        ),
        (
            ["--rerank", "--rerank-method", "gnn", "--lambda", "1.5"],
            "--lambda must be at least 0 and at most 1",
        ),
        (["--settings", "x.json", "--expand"], "--settings replaces --expand"),
        (["--settings", "missing.json"], "settings file 'missing.json' does not exist"),
    ],
)
def test_option_errors(
    folder: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, stderr = _run(capsys, "evaluate", str(folder), *args)
    assert code == 2 and message in stderr


def test_tune_errors(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, stderr = _run(capsys, "tune", str(folder), "--out", str(tmp_path / "no" / "t.json"))
    assert code == 2 and "existing folder" in stderr
    code, _, stderr = _run(capsys, "tune", str(tmp_path / "nothing"), "--out", str(tmp_path / "t.json"))
    assert code == 2 and "does not exist" in stderr
    code, _, stderr = _run(capsys, "tune", str(folder), "--out", str(tmp_path / "t.json"), "--splits", "11")
    assert code == 2 and "at most 10" in stderr
    code, _, stderr = _run(capsys, "tune", str(folder), "--out", str(tmp_path / "t.json"), "--timeout", "0")
    assert code == 2 and "--timeout" in stderr


def test_evaluate_warns_when_a_method_lowers_the_metric() -> None:
    from types import SimpleNamespace

    from galleria.cli.evaluate import _lowering_warnings
    from galleria.evaluation import RetrievalConfig

    def result(name: str, map_100: float, recall_1: float, **options: object) -> SimpleNamespace:
        return SimpleNamespace(
            config=RetrievalConfig(name, **options), map_at_100=map_100, recall_at_1=recall_1
        )

    plain = result("plain", 0.5, 0.59)
    worse = result("aqe+rerank", 0.45, 0.39, query_expansion=True, rerank=True)
    better = result("aqe", 0.6, 0.7, query_expansion=True)
    lines = _lowering_warnings([plain, worse, better])
    assert lines[0].endswith("lowers mAP@100 from 0.5000 (plain retrieval) to 0.4500 on this gallery")
    assert "lowers Recall@1 from 0.5900 (plain retrieval) to 0.3900" in lines[1]
    assert len(lines) == 3 and "galleria tune" in lines[2]
    assert _lowering_warnings([plain, better]) == []
    slight = result("aqe", 0.495, 0.58, query_expansion=True)  # within the 0.01 margin: no warning
    assert _lowering_warnings([plain, slight]) == []


def test_demo_fashion_mnist_without_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, stderr = _run(
        capsys,
        "demo",
        "--dataset",
        "fashion-mnist",
        "--fashion-root",
        str(tmp_path),
        "--cache-dir",
        str(tmp_path),
    )
    assert code == 2 and "apt-get install dataset-fashion-mnist" in stderr
    code, _, stderr = _run(capsys, "demo", "--fashion-root", str(tmp_path))
    assert code == 2 and "--fashion-root needs --dataset fashion-mnist" in stderr


def test_rerank_defaults_are_read_from_the_gallery(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from galleria.rerank.adaptive import default_rerank_params
    from galleria.store import InMemoryImageEmbeddingStore

    store_file = tmp_path / "s.safetensors"
    assert main(["build", str(folder), "--out", str(store_file), "--workers", "1"]) == 0
    loaded = InMemoryImageEmbeddingStore.load_from_disk(store_file)
    assert loaded._rerank_statistics is not None  # recorded at build time, kept in the file
    adaptive = default_rerank_params(loaded)
    query = str(next((folder / "red").iterdir()))
    search = ["search", str(store_file), "--image", query, "--rerank", "--pool", "20", "--json"]
    code, stdout, stderr = _run(capsys, *search)
    assert code == 0, stderr
    used = json.loads(stdout)["rerank"]
    assert used["rerank_preset"] == "adaptive"
    assert {key: used[key] for key in ("k1", "k2", "lambda_value")} == adaptive
    code, stdout, stderr = _run(capsys, *search, "--rerank-preset", "paper")
    assert code == 0, stderr
    assert json.loads(stdout)["rerank"] == {"k1": 20, "k2": 6, "lambda_value": 0.3, "pool": 20}
    code, stdout, stderr = _run(capsys, *search, "--k1", "9")  # explicit values as before
    assert code == 0, stderr
    assert json.loads(stdout)["rerank"] == {"k1": 9, "k2": 6, "lambda_value": 0.3, "pool": 20}

    evaluate = ["evaluate", str(folder), "--rerank", "--pool", "20", "--json", "--workers", "1"]
    code, stdout, stderr = _run(capsys, *evaluate)
    assert code == 0, stderr
    configuration = json.loads(stdout)["configurations"][1]
    assert set(configuration["settings"]) == {"query_expansion", "rerank", "k1", "k2", "lambda_value", "pool"}
    code, stdout, stderr = _run(capsys, *evaluate, "--rerank-preset", "paper")
    assert code == 0, stderr
    assert json.loads(stdout)["configurations"][1]["settings"]["k1"] == 20
    code, stdout, stderr = _run(capsys, *evaluate, "--rerank-method", "gnn")
    assert code == 0, stderr
    assert json.loads(stdout)["configurations"][1]["settings"]["rerank_method"] == "gnn"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rerank", "--rerank-preset", "adaptive", "--k1", "5"], "drop --k1/--k2/--lambda"),
        (["--rerank-preset", "paper"], "--rerank-preset needs --rerank"),
    ],
)
def test_rerank_preset_errors(
    folder: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _stdout, stderr = _run(capsys, "evaluate", str(folder), *args, "--workers", "1")
    assert code != 0 and message in stderr


@needs("optuna")
@pytest.mark.parametrize("guard", ["recall@1", "none"])
def test_tune_records_its_guard(
    folder: Path, tmp_path: Path, guard: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tuned.json"
    code, _stdout, stderr = _run(
        capsys, "tune", str(folder), "--out", str(out), "--trials", "6", "--splits", "2",
        "--validation-queries", "6", "--workers", "1", "--guard", guard,
    )  # fmt: skip
    assert code == 0, stderr
    document = json.loads(out.read_text())
    assert document["guard"]["metric"] == (None if guard == "none" else "recall@1")
    assert document["guard"]["margin"] == 0.005
    assert isinstance(document["checked"], list)
    if guard != "none" and document["checked"]:
        assert len(document["guard"]["per_split"]) == 2


def test_settings_with_a_prepared_diffusion_run_in_evaluate_and_search(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tuned setting may normalise and augment the gallery before a diffusion: the CLI runs it as
    the API does (candidates from the re-ranker's prepared store, queries transformed)."""
    from galleria import InMemoryImageEmbeddingStore
    from galleria.evaluation import RetrievalConfig
    from galleria.rerank import make_reranker
    from galleria.tune.settings import write_settings

    params = {"k": 5, "query_k": 2, "vector_power": 0.5, "centre": True, "dba_neighbors": 3, "dba_alpha": 1.0}
    config = RetrievalConfig(
        "tuned", rerank=True, rerank_method="diffusion", rerank_params=params, pool=20, rerank_preset="paper"
    )
    settings = tmp_path / "prepared.json"
    write_settings(settings, config)
    code, stdout, stderr = _run(
        capsys, "evaluate", str(folder), "--settings", str(settings), "--json", "--workers", "1"
    )
    assert code == 0, stderr
    tuned = json.loads(stdout)["configurations"][1]
    assert tuned["settings"]["vector_power"] == 0.5 and tuned["settings"]["dba_neighbors"] == 3
    store_file = tmp_path / "s.safetensors"
    assert main(["build", str(folder), "--out", str(store_file), "--workers", "1"]) == 0
    query = str(next((folder / "green").iterdir()))
    code, stdout, stderr = _run(
        capsys, "search", str(store_file), "--image", query, "--settings", str(settings), "--json", "-k", "8"
    )
    assert code == 0, stderr
    got = [(r["path"], r["score"]) for r in json.loads(stdout)["queries"][0]["results"]]
    store = InMemoryImageEmbeddingStore.load_from_disk(str(store_file))
    reranker = make_reranker("diffusion", store, **params)
    pool = reranker.store.retrieve_top_k_similar([query], k=20)[0]
    want = [(c.path, c.score) for c in reranker.rerank(pool, top_k=8)]
    assert [p for p, _ in got] == [p for p, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-6)
    plain = [c.path for c in store.retrieve_top_k_similar([query], k=8)[0]]
    assert store.vector_transform is None and len(plain) == 8


def test_tune_help_names_every_registered_method(capsys: pytest.CaptureFixture[str]) -> None:
    # the description is derived from the registry (it once named four methods of six)
    from galleria.cli import build_parser
    from galleria.rerank import RERANK_METHODS

    with pytest.raises(SystemExit):
        build_parser().parse_args(["tune", "--help"])
    description = capsys.readouterr().out.split("options:")[0]
    missing = [method for method in RERANK_METHODS if method not in description]
    assert not missing, missing
