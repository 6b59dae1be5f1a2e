"""Plugins that cannot break galleria (issue 35 §2), with real plugin packages: a module and its
dist-info on the path of a child process, found by ``importlib.metadata`` as an installed package is.

Each case is one plugin misbehaving in one way; the built-ins and the good plugin keep working, and
what the user sees is one line naming the plugin.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from _support.plugin_packages import KEEP, RERANKERS, bad_site, keep_site, run_galleria, write_plugin

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A labelled folder of 18 small images (3 colours) and its store, ``colours.safetensors`` beside it."""
    from galleria import InMemoryImageEmbeddingStore, PixelEmbedder

    root = tmp_path_factory.mktemp("gallery") / "colours"
    rng = np.random.default_rng(0)
    for label, colour in {"red": (200, 40, 40), "green": (40, 200, 40), "blue": (40, 40, 200)}.items():
        (root / label).mkdir(parents=True)
        for i in range(6):
            pixels = np.clip(np.array(colour) + rng.normal(0, 40, size=(8, 8, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i}.png")
    store = InMemoryImageEmbeddingStore(
        sorted(map(str, root.rglob("*.png"))), PixelEmbedder(size=4), num_workers=1
    )
    store.build_store(progress=False)
    store.save_to_disk(root.parent / "colours.safetensors")
    return root


def _search(gallery: Path, site: Path, method: str, *extra: str) -> Any:
    store = str(gallery.parent / "colours.safetensors")
    query = str(gallery / "red" / "0.png")
    return run_galleria(
        site, "search", store, "--image", query, "-k", "4", "--rerank", "--rerank-method", method,
        "--pool", "10", "--json", *extra,
    )  # fmt: skip


def _one_error_line(stderr: str, *needles: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def _plugin_warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "warning: galleria: plugin package" in line]


# --- the plugin of docs/extending.md, as the page shows it -------------------------------------------


def _doc_plugin() -> tuple[str, str, dict[str, str]]:
    """The module name, the code and the entry points of docs/extending.md's complete plugin."""
    text = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    module = re.search(r"<!-- plugin module: (\w+)/__init__\.py -->\n```python\n(.*?)```", text, re.S)
    toml = re.search(r"<!-- plugin entry points -->\n```toml\n(.*?)```", text, re.S)
    assert module is not None and toml is not None, "docs/extending.md lost its complete plugin"
    group = re.search(r'\[project\.entry-points\."([\w.]+)"\]', toml.group(1))
    assert group is not None and group.group(1) == RERANKERS
    entries = dict(re.findall(r'^([\w-]+) = "([^"]+)"$', toml.group(1), re.M))
    return module.group(1), module.group(2), entries


def test_the_plugin_of_the_docs_runs_as_shown(gallery: Path, tmp_path: Path) -> None:
    name, code, entries = _doc_plugin()
    site = write_plugin(tmp_path, "galleria-centroid", {f"{name}.__init__": code}, {RERANKERS: entries})
    listed = run_galleria(site, "methods", "--kind", "reranker", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "centroid" in [entry["name"] for entry in json.loads(listed.stdout)] and not listed.stderr

    found = _search(gallery, site, "centroid", "--rerank-param", "m=2")
    store_file, query = str(gallery.parent / "colours.safetensors"), str(gallery / "red" / "0.png")
    plain = run_galleria(site, "search", store_file, "--image", query, "-k", "10", "--json")
    assert found.returncode == 0 and plain.returncode == 0, found.stderr
    reranked = json.loads(found.stdout)["queries"][0]["results"]
    pool = json.loads(plain.stdout)["queries"][0]["results"]
    # The doc's formula, computed here from the stored vectors: the same four, in the same order.
    from galleria import InMemoryImageEmbeddingStore

    store = InMemoryImageEmbeddingStore.load_from_disk(gallery.parent / "colours.safetensors")
    vectors = store.embeddings_of([item["path"] for item in pool])
    centre = vectors[:2].mean(axis=0)
    centre /= np.linalg.norm(centre)
    scores = [
        0.5 * item["score"] + 0.5 * (1.0 - float(v @ centre)) for item, v in zip(pool, vectors, strict=True)
    ]
    expected = [pool[i]["path"] for i in np.argsort(scores, kind="stable")[:4]]
    assert [item["path"] for item in reranked] == expected
    assert [item["score"] for item in reranked] == pytest.approx(sorted(scores)[:4], abs=1e-5)

    evaluated = run_galleria(
        site, "evaluate", str(gallery), "--embedder", "pixel:4", "--rerank", "--rerank-method", "centroid",
        "--pool", "10", "--json",
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["configurations"][-1]["settings"]["rerank_method"] == "centroid"


# --- discovery ----------------------------------------------------------------------------------------


def test_importing_galleria_discovers_nothing(tmp_path: Path) -> None:
    """No module of galleria reads an entry point when imported; the first use of a registry does."""
    site = keep_site(tmp_path)
    script = (
        "import galleria, galleria.store, galleria.rerank, galleria.index, galleria.embedders, "
        "galleria.tune, galleria.components, galleria.retrieval, galleria.cli.search, galleria.cli.tune, "
        "galleria.web.app\n"
        "import galleria._plugins as p, sys\n"
        "print(sorted(p._FOUND), 'keep_plugin' in sys.modules)\n"
        "from galleria.rerank import RERANK_METHODS\n"
        "print(RERANK_METHODS[-1], sorted(p._FOUND), 'keep_plugin' in sys.modules)\n"
    )
    ran = run_galleria(site, "-c", script)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["[] False", "keep ['reranker'] True"]


def test_an_index_plugin_may_import_galleria_at_its_import(tmp_path: Path) -> None:
    """Before, index discovery ran while `from galleria import InMemoryImageEmbeddingStore` was still
    importing the store, and such a plugin was reported broken."""
    index = """
        from galleria import InMemoryImageEmbeddingStore  # the whole facade, at import
        from galleria.components import PLUGIN_API_VERSION, Component
        from galleria.index.exact import ExactIndex


        class Mine(ExactIndex):
            name = "mine"


        COMPONENT = Component(
            "index", "mine", (), build=Mine, extra={"creatable": True}, api_version=PLUGIN_API_VERSION
        )
        """
    site = write_plugin(
        tmp_path, "galleria-mine", {"mine_index": index}, {"galleria.indexes": {"mine": "mine_index"}}
    )
    script = (
        "import numpy as np, warnings\n"
        "warnings.simplefilter('error')\n"
        "from galleria import InMemoryImageEmbeddingStore\n"
        "store = InMemoryImageEmbeddingStore.from_embeddings(['a', 'b'], np.eye(2), search_index='mine')\n"
        "print(type(store.search_index).__name__, store.retrieve_by_vector(np.eye(2)[:1], 1)[0][0].path)\n"
    )
    ran = run_galleria(site, "-c", script)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "Mine a"


@pytest.mark.parametrize(
    ("module", "value", "expected"),
    [
        ("import argparse\nargparse.ArgumentParser(prog='bad').parse_args()\n", "bad_plugin",
         "failed to import: SystemExit: 2"),
        ("raise SystemExit('usage: bad [--x]')\n", "bad_plugin",
         "failed to import: SystemExit: usage: bad [--x]"),
        ("import numpyy\n", "bad_plugin", "failed to import: ModuleNotFoundError: No module named 'numpyy'"),
        ("", "bad_plugin:COMPONENT oops", "has a malformed value"),
        ("", "bad plugin", "has a malformed value"),
        (KEEP.replace('"keep"', '"diffusion"'), "bad_plugin",
         "'diffusion', a name already taken by a built-in"),
        (KEEP.replace('Param("n", int, 1, 1, 9)', 'Param("n", int, 50, 1, 9)'), "bad_plugin",
         "parameter 'n': its default is invalid: n must lie in [1, 9], got 50"),
        (KEEP.replace('Param("n", int, 1, 1, 9)', 'Param("pool", int, 1, 1, 9)'), "bad_plugin",
         "declares the parameter 'pool' (keep), a name galleria's settings already use"),
        (KEEP.replace('Param("n", int, 1, 1, 9)', 'Param("n", int, 1, 1, 9, aliases=("k1",))'), "bad_plugin",
         "declares the parameter alias 'k1' (keep.n), already a spelling of k-reciprocal's 'k1'"),
        (KEEP.replace("def rerank(self", "def other(self"), "bad_plugin",
         "whose class Keep lacks rerank (a reranker needs rerank())"),
        (KEEP.replace('"reranker", "keep"', '"index", "keep"'), "bad_plugin",
         "declares a index, not a reranker"),
    ],
    ids=["argparse", "sys-exit", "import-error", "value", "value-space", "name-builtin", "default",
         "settings-key", "alias", "no-rerank", "kind"],
)  # fmt: skip
def test_a_bad_plugin_is_one_warning_and_the_rest_works(
    gallery: Path, tmp_path: Path, module: str, value: str, expected: str
) -> None:
    site = bad_site(keep_site(tmp_path), module, value)
    listed = run_galleria(site, "methods", "--kind", "reranker", "--json")
    assert listed.returncode == 0, listed.stderr
    names = [entry["name"] for entry in json.loads(listed.stdout)]
    assert names[0] == "k-reciprocal" and names.count("keep") == 1 and "bad" not in names
    warned = _plugin_warnings(listed.stderr)
    assert len(warned) == 1, listed.stderr
    assert "plugin package 'galleria-bad', entry point 'bad'" in warned[0] and expected in warned[0]
    searched = _search(gallery, site, "keep")  # the good plugin, through the batched default
    assert searched.returncode == 0, searched.stderr
    assert len(json.loads(searched.stdout)["queries"][0]["results"]) == 4


def test_two_plugins_of_one_name_keep_the_first_and_warn_of_the_second(tmp_path: Path) -> None:
    site = keep_site(tmp_path)
    write_plugin(site, "galleria-keep-too", {"keep_too": KEEP}, {RERANKERS: {"keep": "keep_too"}})
    listed = run_galleria(site, "methods", "--kind", "reranker", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [entry["name"] for entry in json.loads(listed.stdout)].count("keep") == 1
    warned = _plugin_warnings(listed.stderr)
    assert len(warned) == 1 and "'keep', a name already taken by another plugin" in warned[0], listed.stderr


def test_ctrl_c_while_a_plugin_is_imported_stops_the_command(tmp_path: Path) -> None:
    site = write_plugin(
        tmp_path, "galleria-slow", {"slow": "raise KeyboardInterrupt\n"}, {RERANKERS: {"slow": "slow"}}
    )
    ran = run_galleria(site, "methods", "--kind", "reranker")
    assert ran.returncode == 130 and "galleria: interrupted" in ran.stderr, ran.stderr


# --- a plugin's code fails while galleria runs it -----------------------------------------------------


BOOM = KEEP.replace('"keep"', '"boom"').replace(
    "return [c.rescored(c.score) for c in candidates][:top_k]", "return 1 / 0"
)
STRAY = KEEP.replace('"keep"', '"stray"').replace(
    "return [c.rescored(c.score) for c in candidates][:top_k]",
    "from galleria.components import Candidate\n        return [Candidate('/elsewhere.png', 0.0)]",
)
FACTORY = KEEP.replace(
    '"keep", (Param("n", int, 1, 1, 9),), build=Keep', '"factory", (), build=lambda store: object()'
)


@pytest.mark.parametrize(
    ("module", "method", "expected"),
    [
        (BOOM, "boom", "the re-ranking method 'boom' (plugin package 'galleria-bad', entry point 'bad'"),
        (BOOM, "boom", "failed while re-ranking: ZeroDivisionError: division by zero"),
        (STRAY, "stray", "returned '/elsewhere.png'[0], which was not among the candidates"),
        (FACTORY, "factory", "built a object without rerank"),
    ],
    ids=["names-the-plugin", "says-what-it-raised", "stray-answer", "factory-without-rerank"],
)
def test_a_failing_plugin_is_one_line_on_search(
    gallery: Path, tmp_path: Path, module: str, method: str, expected: str
) -> None:
    site = bad_site(tmp_path, module)
    ran = _search(gallery, site, method)
    assert ran.returncode == 2, ran.stderr
    _one_error_line(ran.stderr, "galleria search: error:", expected)


def test_a_failing_plugin_is_one_line_on_evaluate_and_tune(gallery: Path, tmp_path: Path) -> None:
    site = bad_site(tmp_path, BOOM)
    evaluated = run_galleria(
        site, "evaluate", str(gallery), "--embedder", "pixel:4", "--rerank", "--rerank-method", "boom",
        "--pool", "10",
    )  # fmt: skip
    assert evaluated.returncode == 2, evaluated.stderr
    _one_error_line(evaluated.stderr, "galleria evaluate: error:", "'boom'", "ZeroDivisionError")
    tuned = run_galleria(
        site, "tune", str(gallery), "--embedder", "pixel:4", "--methods", "boom", "--trials", "2",
        "--out", str(tmp_path / "tuned.json"),
    )  # fmt: skip
    assert tuned.returncode == 2, tuned.stderr
    _one_error_line(tuned.stderr, "galleria tune: error:", "'boom'", "ZeroDivisionError")
    assert not (tmp_path / "tuned.json").exists()


def test_the_api_answers_a_failing_plugin_as_json_and_serves_on(gallery: Path, tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    site = bad_site(tmp_path, BOOM)
    script = f"""
import json
from fastapi.testclient import TestClient
from galleria import InMemoryImageEmbeddingStore
from galleria.web import create_app
store = InMemoryImageEmbeddingStore.load_from_disk({str(gallery.parent / "colours.safetensors")!r})
client = TestClient(create_app(store, root={str(gallery)!r}), raise_server_exceptions=False)
path = store.paths[0]
boom = {{"path": path, "k": 3, "rerank": True, "method": "boom", "pool": 10}}
failed = client.post("/api/search", json=boom)
page = client.get("/", params={{"path": "red/0.png", "rerank": "1", "method": "boom", "pool": "10"}})
plain = client.post("/api/search", json={{"path": path, "k": 3}})
print(json.dumps([failed.status_code, failed.json(), page.status_code, "division by zero" in page.text,
                  "Traceback" in page.text, plain.status_code]))
"""
    ran = run_galleria(site, "-c", script)
    assert ran.returncode == 0, ran.stderr
    status, body, page, page_says, traceback, plain = json.loads(ran.stdout.strip().splitlines()[-1])
    assert status == 500 and body["plugin"] == {"kind": "reranker", "name": "boom"}
    assert "'boom'" in body["detail"] and "ZeroDivisionError: division by zero" in body["detail"]
    assert "Traceback" not in body["detail"] and "File " not in body["detail"]
    assert (page, page_says, traceback) == (500, True, False)
    assert plain == 200  # serving on
