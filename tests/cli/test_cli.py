"""End-to-end tests of the ``galleria`` command line.

The main path (build → search → evaluate, and the demo) runs in subprocesses, as a user runs it;
the many error paths run through ``galleria.cli.main`` in-process (the same dispatcher, without the
start-up cost) plus a few in subprocesses to check the real exit status and the absence of a
traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from _support.extras import installed, needs
from galleria.cli import COMMANDS, main

COLOURS = {"red": (210, 40, 40), "green": (40, 190, 60), "blue": (40, 60, 210), "yellow": (220, 210, 40)}
PER_LABEL = 8
N_IMAGES = len(COLOURS) * PER_LABEL


def galleria(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``python -m galleria ARGS`` and return the finished process."""
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "galleria", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def ok_json(*args: str) -> Any:
    """Run a command that must succeed with ``--json`` and parse its stdout."""
    process = galleria(*args, "--json")
    assert process.returncode == 0, process.stderr
    return json.loads(process.stdout)


def fails(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run ``main(args)`` in-process; it must return 2 and print exactly one line on stderr."""
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"galleria {args[0]}: error: "), lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------------------------------
# Fixtures: a small labelled folder of coloured noise images, one store built from it.


def _write_images(root: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for label, colour in COLOURS.items():
        (root / label).mkdir(parents=True)
        for i in range(PER_LABEL):
            pixels = np.clip(np.array(colour) + rng.normal(0, 30, size=(12, 12, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i:02d}.png")


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("images") / "colours"
    _write_images(root)
    return root


@pytest.fixture(scope="module")
def built(image_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    store = tmp_path_factory.mktemp("store") / "colours.safetensors"
    summary = ok_json("build", str(image_dir), "--out", str(store), "--index", "hnsw", "--workers", "2")
    return store, summary


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


# ---------------------------------------------------------------------------------------------------------
# Help


def test_help_lists_every_command_with_examples(capsys: pytest.CaptureFixture[str]) -> None:
    process = galleria("--help")
    assert process.returncode == 0
    names = ("demo", "build", "search", "evaluate", "evaluate-scores")
    positions = [process.stdout.index(f"\n    {name}") for name in names]
    assert positions == sorted(positions)
    assert list(COMMANDS)[:4] == ["demo", "build", "search", "evaluate"]
    for command in ("demo", "build", "search", "evaluate"):
        with pytest.raises(SystemExit) as stop:
            main([command, "--help"])
        assert stop.value.code == 0
        assert f"galleria {command}" in capsys.readouterr().out.split("examples:")[1]


# ---------------------------------------------------------------------------------------------------------
# build → search → evaluate


def test_build_indexes_every_image(built: tuple[Path, dict[str, Any]]) -> None:
    store, summary = built
    assert store.is_file()
    assert summary == {
        "store": str(store),
        "indexed": N_IMAGES,
        "resumed": 0,
        "skipped": [],
        "embedder": "pixel",
        "index": "hnsw",
        "space": "cosine",
    }


def test_build_text_summary_and_skip_errors(image_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    _write_images(broken, seed=1)
    (broken / "red" / "zz_corrupt.png").write_bytes(b"not a png at all")
    out = tmp_path / "broken.safetensors"
    process = galleria("build", str(broken), "--out", str(out))
    assert process.returncode == 2 and "Traceback" not in process.stderr
    assert "zz_corrupt.png" in process.stderr and not out.exists()
    process = galleria("build", str(broken), "--out", str(out), "--skip-errors", "--index", "exact")
    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() == f"indexed {N_IMAGES} image(s), skipped 1 → {out}"
    assert "zz_corrupt.png" in process.stderr and out.is_file()


def test_search_image_json(built: tuple[Path, dict[str, Any]], image_dir: Path) -> None:
    store, _ = built
    query = image_dir / "blue" / "03.png"
    payload = ok_json(
        "search", str(store), "--image", str(query), str(image_dir / "red" / "00.png"), "-k", "5"
    )
    assert payload["k"] == 5 and payload["expand"] is None and payload["rerank"] is None
    assert payload["store"] == str(store)
    first, second = payload["queries"]
    assert first["query"] == str(query) and first["kind"] == "image"
    assert [result["rank"] for result in first["results"]] == [1, 2, 3, 4, 5]
    assert first["results"][0]["path"] == str(query) and first["results"][0]["score"] == pytest.approx(
        0, abs=1e-5
    )
    scores = [result["score"] for result in first["results"]]
    assert scores == sorted(scores)
    assert all(Path(result["path"]).parent.name == "blue" for result in first["results"])
    assert all(Path(result["path"]).parent.name == "red" for result in second["results"])


def test_search_text_output_with_expansion_and_reranking(
    built: tuple[Path, dict[str, Any]], image_dir: Path
) -> None:
    store, _ = built
    query = str(image_dir / "green" / "05.png")
    options = [
        "--expand",
        "--alpha",
        "2",
        "--neighbors",
        "4",
        "--rerank",
        "--k1",
        "6",
        "--k2",
        "2",
        "--pool",
        "20",
    ]
    payload = ok_json("search", str(store), "--image", query, "-k", "3", *options)
    assert payload["expand"] == {"expansion_alpha": 2.0, "expansion_neighbors": 4}
    assert payload["rerank"] == {"k1": 6, "k2": 2, "lambda_value": 0.3, "pool": 20}
    results = payload["queries"][0]["results"]
    assert len(results) == 3 and all(Path(result["path"]).parent.name == "green" for result in results)
    process = galleria("search", str(store), "--image", query, "-k", "2", *options)
    assert process.returncode == 0, process.stderr
    lines = process.stdout.splitlines()
    assert lines[0] == f"image query: {query}"
    assert lines[1] == "rank  distance  path"
    assert len(lines) == 4 and lines[2].split()[0] == "1" and lines[3].split()[0] == "2"
    assert lines[2].split()[2] == results[0]["path"]


def test_search_text_output_prints_whole_paths_on_a_narrow_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path longer than the terminal is printed whole (it used to be cut to ``…/NAME``)."""
    deep = tmp_path / ("a-folder-name-long-enough-to-pass-any-terminal-" * 3) / "labels"
    _write_images(deep)
    store = tmp_path / "deep.safetensors"
    assert main(["build", str(deep), "--out", str(store), "--json"]) == 0
    query = str(deep / "red" / "00.png")
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "40")
    assert main(["search", str(store), "--image", query, "-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"image query: {query}" and lines[1] == "rank  distance  path"
    assert [line.split()[0] for line in lines[2:]] == ["1", "2", "3"]
    assert lines[2].split()[2] == query  # whole, although far wider than 40 columns
    assert all(line.split()[2].startswith(str(deep)) for line in lines[2:])


@needs("matplotlib")
def test_evaluate_json_and_report(image_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    payload = ok_json(
        "evaluate", str(image_dir), "--n-queries", "8", "--seed", "3", "--expand", "--neighbors", "3",
        "--rerank", "--k1", "5", "--k2", "2", "--pool", "20", "--report", str(out),
    )  # fmt: skip
    assert payload["schema"] == "galleria.evaluation/1"
    assert payload["n_queries"] == 8 and payload["n_gallery"] == N_IMAGES - 8
    assert payload["dataset"]["seed"] == 3 and payload["dataset"]["n_labels"] == len(COLOURS)
    configurations = payload["configurations"]
    assert [c["name"] for c in configurations] == ["plain", "aqe", "aqe+rerank"]
    assert configurations[2]["settings"] == {
        "query_expansion": True,
        "expansion_alpha": 3.0,
        "expansion_neighbors": 3,
        "rerank": True,
        "k1": 5,
        "k2": 2,
        "lambda_value": 0.3,
        "pool": 20,
    }
    for entry in configurations:
        for key in ("recall@1", "recall@5", "map@100", "mrr"):
            assert 0.0 <= entry[key] <= 1.0
        assert entry["recall@1"] == 1.0  # the colours are far apart
        assert entry["ms_per_query"] > 0
    assert json.loads((out / "metrics.json").read_text()) == payload
    assert "| Configuration |" in (out / "report.md").read_text()
    _check_per_query(out, payload, ("plain", "aqe+rerank"))
    with Image.open(out / "pr_curve.png") as image:
        image.load()
        assert image.format == "PNG"


def _check_per_query(out: Path, payload: dict[str, Any], compared: tuple[str, str]) -> None:
    """queries.json (what ``serve --eval`` reads): every query, AP@100 averaging to each mAP@100."""
    from galleria.evaluation._query_reading import read_query_results

    recorded = read_query_results(out)
    assert recorded.compared == compared and len(recorded.queries) == payload["n_queries"]
    for entry in payload["configurations"]:
        mean = sum(query.ap[entry["name"]] for query in recorded.queries) / len(recorded.queries)
        assert abs(mean - entry["map@100"]) <= 1e-4
    for query in recorded.queries:
        assert len(query.before.paths) == len(query.after.paths) == 20
        assert query.before.hits == tuple(path.split("/")[-2] == query.label for path in query.before.paths)
        assert all(rank is None or rank >= 1 for rank in query.after.previous_ranks or ())


def test_evaluate_plain_only_text_table(image_dir: Path) -> None:
    process = galleria("evaluate", str(image_dir), "--query-fraction", "0.25")
    assert process.returncode == 0, process.stderr
    lines = process.stdout.splitlines()
    assert "8 queries" in lines[0]
    assert lines[1].startswith("labels: ") and "images per label: min" in lines[1]
    assert lines[2].split()[:3] == ["configuration", "Recall@1", "Recall@5"]
    assert len(lines) == 4 and lines[3].startswith("plain retrieval")


def test_evaluate_skip_errors(tmp_path: Path) -> None:
    root = tmp_path / "broken"
    _write_images(root, seed=2)
    corrupt = sorted(str(root / label / "zz.png") for label in COLOURS)
    for path in corrupt:
        Path(path).write_bytes(b"broken")
    process = galleria("evaluate", str(root), "--n-queries", "8")
    assert process.returncode == 2 and "Traceback" not in process.stderr and "zz.png" in process.stderr
    payload = ok_json("evaluate", str(root), "--n-queries", "8", "--skip-errors")
    assert sorted(payload["skipped"]) == corrupt
    assert payload["n_queries"] + payload["n_gallery"] == N_IMAGES


# ---------------------------------------------------------------------------------------------------------
# The demo


@needs("sklearn", "matplotlib")
def test_demo_reduced(cache_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    payload = ok_json("demo", "--n-queries", "30", "--cache-dir", str(cache_dir), "--report", str(out))
    assert payload["n_queries"] == 30 and payload["n_gallery"] == 1797 - 30
    assert payload["index"]["name"] == "hnsw" and payload["embedder"]["type"] == "pixel"
    plain, aqe, rerank = payload["configurations"]
    assert (plain["name"], aqe["name"], rerank["name"]) == ("plain", "aqe", "aqe+rerank")
    assert rerank["settings"]["pool"] == 200
    assert rerank["map@100"] > plain["map@100"]
    assert sorted(p.name for p in out.iterdir()) == [
        "metrics.json",
        "pr_curve.png",
        "queries.json",
        "report.html",
        "report.md",
        "thumbs",
    ]
    assert json.loads((out / "metrics.json").read_text()) == payload
    _check_per_query(out, payload, ("plain", "aqe+rerank"))
    with Image.open(out / "pr_curve.png") as image:
        image.load()
        assert image.format == "PNG" and image.size[0] > 100
    assert (cache_dir / "digits" / "0").is_dir()


@needs("sklearn")
def test_demo_text_table(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--n-queries", "20", "--seed", "2", "--cache-dir", str(cache_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "20 queries, 1777 gallery images" in lines[0]
    assert lines[1].split()[0] == "configuration" and len(lines) == 5
    assert (
        lines[2].startswith("plain retrieval") and lines[4].startswith("αQE") and "k-reciprocal" in lines[4]
    )


# ---------------------------------------------------------------------------------------------------------
# Error paths: one line naming the problem, exit code 2, no traceback.


def test_errors_in_a_real_process(tmp_path: Path, built: tuple[Path, dict[str, Any]]) -> None:
    for args, needle in [
        (("evaluate", str(tmp_path / "missing")), "does not exist"),
        (
            ("build", str(tmp_path), "--out", str(tmp_path / "s.safetensors"), "--embedder", "resnet"),
            "resnet",
        ),
        (("search", str(built[0]), "--text", "a red square"), "--text"),
    ]:
        process = galleria(*args)
        assert process.returncode == 2, process
        assert "Traceback" not in process.stderr
        assert len(process.stderr.strip().splitlines()) == 1 and needle in process.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "galleria: error: the following arguments are required: COMMAND"),
        (("nosuch",), "invalid choice: 'nosuch'"),
        (("build", "photos"), "galleria build: error: the following arguments are required: --out"),
        (
            ("search", "s.safetensors"),
            "galleria search: error: one of the arguments --image --queries --text",
        ),
        (("search", "s.safetensors", "--image", "a.png", "--text", "cat"), "not allowed with"),
        (("evaluate", "photos", "--index", "bogus"), "galleria evaluate: error: argument --index"),
        (("evaluate", "photos", "--n-queries", "3", "--query-fraction", "0.1"), "not allowed with"),
        (("demo", "--bogus"), "galleria: error: unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(list(args))
    assert stop.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].endswith("--help')"), captured.err
    assert captured.out == ""


def test_build_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path, image_dir: Path) -> None:
    out = str(tmp_path / "s.safetensors")
    empty = tmp_path / "empty"
    empty.mkdir()
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "notes.txt").write_text("hello")
    assert "does not exist" in fails(capsys, "build", str(tmp_path / "missing"), "--out", out)
    assert "is not a directory" in fails(capsys, "build", str(texts / "notes.txt"), "--out", out)
    assert "is empty" in fails(capsys, "build", str(empty), "--out", out)
    assert "holds no images" in fails(capsys, "build", str(texts), "--out", out)
    assert "unknown embedder 'vgg'" in fails(
        capsys, "build", str(image_dir), "--out", out, "--embedder", "vgg"
    )
    assert "malformed" in fails(capsys, "build", str(image_dir), "--out", out, "--embedder", "clip::openai")
    missing_weights = str(tmp_path / "weights.bin")
    line = fails(
        capsys, "build", str(image_dir), "--out", out, "--embedder", f"clip:ViT-B-32:{missing_weights}"
    )
    if installed("torch") and installed("open_clip"):
        assert "weights.bin' does not exist" in line
    else:  # without the clip extra, the one line names it
        assert "'.[clip]'" in line
    assert "--workers" in fails(capsys, "build", str(image_dir), "--out", out, "--workers", "0")
    assert "--workers" in fails(capsys, "build", str(image_dir), "--out", out, "--workers", "two")
    assert "does not exist" in fails(capsys, "build", str(image_dir), "--out", str(tmp_path / "no" / "s.st"))
    assert "is a directory" in fails(capsys, "build", str(image_dir), "--out", str(tmp_path))
    assert not Path(out).exists()


def test_search_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, built: tuple[Path, dict[str, Any]], image_dir: Path
) -> None:
    store = str(built[0])
    image = str(image_dir / "red" / "00.png")
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x00" * 64)
    assert "does not exist" in fails(capsys, "search", str(tmp_path / "none.safetensors"), "--image", image)
    assert "garbage.safetensors" in fails(capsys, "search", str(garbage), "--image", image)
    assert "is a directory" in fails(capsys, "search", str(tmp_path), "--image", image)
    assert "PixelEmbedder" in fails(capsys, "search", store, "--text", "a red square")
    assert "query image" in fails(capsys, "search", store, "--image", str(tmp_path / "q.png"))
    assert f"give query images with --image {image}" in fails(capsys, "search", store, "--queries", image)
    foreign = tmp_path / "foreign.safetensors"
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(3, dtype=np.float32)}, str(foreign))
    assert "not a galleria store" in fails(capsys, "search", str(foreign), "--image", image)
    (tmp_path / "image.safetensors").write_bytes(Path(image).read_bytes())
    assert "image.safetensors" in fails(
        capsys, "search", str(tmp_path / "image.safetensors"), "--image", image
    )
    assert "is not a file" in fails(capsys, "search", store, "--image", str(tmp_path))
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"not an image")
    assert "corrupt.png" in fails(capsys, "search", store, "--image", str(corrupt))
    cases = [
        (("-k", "0"), "-k must be at least 1"),
        (("-k", "ten"), "-k must be an integer"),
        (("--rerank", "--lambda", "2"), "--lambda"),
        (("--rerank", "--lambda", "nan"), "--lambda"),
        (("--rerank", "--k1", "3", "--k2", "5"), "--k2 must not exceed --k1"),
        (("--rerank", "--pool", "5", "-k", "10"), "--pool must be at least -k"),
        (("--k1", "30"), "--k1 needs --rerank"),
        (("--alpha", "2"), "--alpha needs --expand"),
        (("--expand", "--alpha", "-1"), "--alpha"),
        (("--expand", "--neighbors", "0"), "--neighbors"),
    ]
    for options, needle in cases:
        assert needle in fails(capsys, "search", store, "--image", image, *options), options


def test_evaluate_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path, image_dir: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    Image.new("RGB", (4, 4)).save(flat / "a.png")
    empty = tmp_path / "empty"
    empty.mkdir()
    unlabelled = tmp_path / "unlabelled" / "cat"
    unlabelled.mkdir(parents=True)
    (unlabelled / "notes.txt").write_text("x")
    folder = str(image_dir)
    assert "does not exist" in fails(capsys, "evaluate", str(tmp_path / "missing"))
    assert "is empty" in fails(capsys, "evaluate", str(empty))
    assert "no label sub-folders" in fails(capsys, "evaluate", str(flat))
    assert "holds no images" in fails(capsys, "evaluate", str(tmp_path / "unlabelled"))
    assert "too many" in fails(capsys, "evaluate", folder, "--n-queries", "29")
    assert "--n-queries must be at least 1" in fails(capsys, "evaluate", folder, "--n-queries", "0")
    assert "--query-fraction" in fails(capsys, "evaluate", folder, "--query-fraction", "1.5")
    assert "--query-fraction" in fails(capsys, "evaluate", folder, "--query-fraction", "0")
    assert "--seed" in fails(capsys, "evaluate", folder, "--seed", "-1")
    assert "unknown embedder" in fails(capsys, "evaluate", folder, "--embedder", "sift")
    assert "--pool" in fails(capsys, "evaluate", folder, "--rerank", "--pool", "x")
    assert "--k2 needs --rerank" in fails(capsys, "evaluate", folder, "--k2", "3")
    blocker = tmp_path / "report.txt"
    blocker.write_text("x")
    assert "is a file" in fails(capsys, "evaluate", folder, "--n-queries", "4", "--report", str(blocker))
    assert blocker.read_text() == "x"


@needs("sklearn")
def test_demo_errors(capsys: pytest.CaptureFixture[str], cache_dir: Path, tmp_path: Path) -> None:
    assert "--n-queries must be at least 1" in fails(
        capsys, "demo", "--n-queries", "0", "--cache-dir", str(cache_dir)
    )
    assert "--n-queries must be an integer" in fails(capsys, "demo", "--n-queries", "many")
    assert "too many" in fails(capsys, "demo", "--n-queries", "5000", "--cache-dir", str(cache_dir))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "is not a directory" in fails(capsys, "demo", "--n-queries", "5", "--cache-dir", str(blocker))
    foreign = tmp_path / "foreign"
    (foreign / "digits").mkdir(parents=True)
    (foreign / "digits" / "mine.txt").write_text("x")
    assert "not a complete galleria digits folder" in fails(capsys, "demo", "--cache-dir", str(foreign))


def test_missing_extra_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without scikit-learn (the demo extra) the demo says which extra to install, without a traceback."""
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # makes `import sklearn.datasets` fail
    line = fails(capsys, "demo", "--n-queries", "5", "--cache-dir", str(tmp_path / "fresh"))
    assert "pip install -e '.[demo]'" in line
