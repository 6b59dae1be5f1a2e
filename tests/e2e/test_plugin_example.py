"""examples/plugin installed into a temporary environment: its re-ranker appears everywhere a built-in does.

The environment is ``python -m venv --system-site-packages`` plus one ``.pth`` line per directory of
this interpreter's path (the galleria under test first), since a virtualenv made from inside another
one does not see that one's packages; the plugin is then installed with
``pip install --no-deps --no-build-isolation`` and driven through the command line and the HTTP API.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import galleria
from _support.extras import installed, need

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "plugin"


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "GALLERIA_NO_PLUGINS")
    }
    return subprocess.run(
        [str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def _need_a_wheel_builder() -> None:
    """Skip where pip cannot build the plugin without build isolation: it needs setuptools' own
    ``bdist_wheel`` (setuptools 70.1 and later) or the ``wheel`` package."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(part) for part in version("setuptools").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        major, minor = 0, 0
    if (major, minor) < (70, 1) and not installed("wheel"):
        pytest.skip(
            "building the example plugin needs setuptools >= 70.1 or the wheel package (pip install wheel)"
        )


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv seeing this interpreter's packages (the galleria under test first), plugin installed."""
    _need_a_wheel_builder()
    where = tmp_path_factory.mktemp("venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(where / "env")],
        check=True,
        timeout=300,
    )
    python = where / "env" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    source = str(Path(galleria.__file__).resolve().parents[1])
    paths = [source, sysconfig.get_paths()["purelib"], *[p for p in sys.path if p.endswith("site-packages")]]
    Path(purelib, "_galleria_under_test.pth").write_text("\n".join(dict.fromkeys(paths)) + "\n")
    copy = where / "plugin"
    shutil.copytree(PLUGIN, copy, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    install = _run(
        python,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-q",
        str(copy),
        cwd=where,
    )
    assert install.returncode == 0, install.stderr
    return python


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gallery") / "colours"
    rng = np.random.default_rng(0)
    for label, colour in {"red": (200, 40, 40), "green": (40, 200, 40), "blue": (40, 40, 200)}.items():
        (root / label).mkdir(parents=True)
        for i in range(8):
            pixels = np.clip(np.array(colour) + rng.normal(0, 40, size=(10, 10, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i}.png")
    return root


def test_the_plugin_is_listed_and_documented(venv: Path, tmp_path: Path) -> None:
    listed = _run(venv, "-m", "galleria", "methods", "--kind", "reranker", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    names = [entry["name"] for entry in json.loads(listed.stdout)]
    assert names[0] == "k-reciprocal" and names[-1] == "pool-aqe"
    helped = _run(venv, "-m", "galleria", "search", "--help", cwd=tmp_path)
    assert "pool-aqe" in helped.stdout and "neighbors, alpha" in " ".join(helped.stdout.split())
    off = _run(venv, "-c", "import os; os.environ['GALLERIA_NO_PLUGINS'] = '1'; "
               "from galleria.rerank import RERANK_METHODS; print(RERANK_METHODS)", cwd=tmp_path)  # fmt: skip
    assert off.returncode == 0 and "pool-aqe" not in off.stdout


def test_evaluate_search_and_tune_run_the_plugin(venv: Path, gallery: Path, tmp_path: Path) -> None:
    evaluate = [
        "-m", "galleria", "evaluate", str(gallery), "--embedder", "pixel:6", "--rerank",
        "--rerank-method", "pool-aqe", "--rerank-param", "neighbors=2", "--pool", "12", "--json",
    ]  # fmt: skip
    evaluated = _run(venv, *evaluate, cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    reranked_row = json.loads(evaluated.stdout)["configurations"][-1]
    assert reranked_row["title"] == "pool αQE (neighbors=2, alpha=3, pool=12)"  # the declared label
    assert (
        reranked_row["settings"]["rerank_method"] == "pool-aqe" and reranked_row["settings"]["neighbors"] == 2
    )
    bad = _run(venv, *evaluate[:-5], "--rerank-param", "neighbors=0", cwd=tmp_path)
    assert bad.returncode == 2 and "neighbors must lie in [1, 1000], got 0" in bad.stderr

    store = tmp_path / "colours.safetensors"
    built = _run(venv, "-m", "galleria", "build", str(gallery), "--out", str(store), "--embedder", "pixel:6",
                 cwd=tmp_path)  # fmt: skip
    assert built.returncode == 0, built.stderr
    query = str(gallery / "red" / "0.png")
    search = ["-m", "galleria", "search", str(store), "--image", query, "-k", "5", "--json"]
    plain = _run(venv, *search, cwd=tmp_path)
    reranked = _run(venv, *search, "--rerank", "--rerank-method", "pool-aqe", "--pool", "12", cwd=tmp_path)
    assert plain.returncode == 0 and reranked.returncode == 0, reranked.stderr
    assert json.loads(reranked.stdout) != json.loads(plain.stdout)  # re-ranked scores

    settings = tmp_path / "tuned.json"
    tune = ["-m", "galleria", "tune", str(gallery), "--embedder", "pixel:6", "--out", str(settings)]
    tuned = _run(venv, *tune, "--methods", "pool-aqe", "--trials", "4", "--json", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    assert "pool-aqe" in tuned.stdout


def test_the_http_api_answers_with_the_plugin(venv: Path, gallery: Path, tmp_path: Path) -> None:
    need("fastapi")
    need("httpx")
    script = f"""
import json
from fastapi.testclient import TestClient
from galleria import Candidate, InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.rerank import make_reranker
from galleria.retrieval import RetrievalConfig
from galleria.web import create_app
paths = sorted(str(p) for p in __import__("pathlib").Path({str(gallery)!r}).rglob("*.png"))
store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=6), num_workers=1)
store.build_store()
params = {{"neighbors": 2}}
config = RetrievalConfig("plugin", rerank=True, rerank_method="pool-aqe", rerank_params=params, pool=12)
client = TestClient(create_app(store, defaults=config))
body = client.post("/api/search", json={{"path": paths[0], "k": 5, "rerank": True}}).json()
pool = client.post("/api/search", json={{"path": paths[0], "k": 12}}).json()["plain"]
reranker = make_reranker("pool-aqe", store, neighbors=2)
expected = reranker.rerank([Candidate(i["path"], i["score"]) for i in pool], 5)
print(json.dumps({{"reranked": [[i["path"], i["score"]] for i in body["reranked"]],
                   "expected": [[c.path, c.score] for c in expected]}}))
"""
    answered = _run(venv, "-c", script, cwd=tmp_path)
    assert answered.returncode == 0, answered.stderr
    body = json.loads(answered.stdout.strip().splitlines()[-1])
    assert len(body["reranked"]) == 5
    assert [path for path, _ in body["reranked"]] == [path for path, _ in body["expected"]]
    assert [score for _, score in body["reranked"]] == pytest.approx([score for _, score in body["expected"]])
