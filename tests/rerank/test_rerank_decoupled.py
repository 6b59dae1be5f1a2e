"""Decoupled diffusion (Yang et al., AAAI 2019) against a literal dense transcription of its definition."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _support.store_files import old_layout, read_parts, write_sealed
from galleria import InMemoryImageEmbeddingStore
from galleria.rerank import (
    DecoupledDiffusionReranker,
    decoupled_diffusion_rerank_features,
    make_reranker,
    offline_diffusion,
    prepare_offline_diffusion,
)
from galleria.rerank import decoupled as decoupled_module
from galleria.rerank.registry import RERANK_METHODS, check_method_params, precompute_rerank

# ------------------------------------------------------------------------------ the dense transcription


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _dense_laplacian(gallery: np.ndarray, k: int, alpha: float, gamma: float) -> np.ndarray:
    """I - α S with S = D^-1/2 A D^-1/2, A the mutual k-NN affinity max(s, 0)^γ, written out loop by loop."""
    unit = _unit(gallery)
    sims = unit @ unit.T
    n = len(unit)
    knn = []
    for i in range(n):
        others = sorted((j for j in range(n) if j != i), key=lambda j: (-sims[i, j], j))
        knn.append(set(others[:k]))
    affinity = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if j in knn[i] and i in knn[j]:
                affinity[i, j] = max(sims[i, j], 0.0) ** gamma
    degree = affinity.sum(axis=1)
    s = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if degree[i] > 0 and degree[j] > 0:
                s[i, j] = affinity[i, j] / np.sqrt(degree[i] * degree[j])
    return np.eye(n) - alpha * s


def _dense_offline(gallery: np.ndarray, k: int, truncation: int, alpha: float, gamma: float) -> np.ndarray:
    """The (n, n) matrix F of offline rows: row i of (I - αS)^-1 restricted to i's truncation list."""
    laplacian = _dense_laplacian(gallery, k, alpha, gamma)
    n = len(gallery)
    if truncation >= n:
        return np.linalg.inv(laplacian)  # the closed form (I - α S)^-1
    unit = _unit(gallery)
    sims = unit @ unit.T
    rows = np.zeros((n, n))
    for i in range(n):
        others = sorted((j for j in range(n) if j != i), key=lambda j: (-sims[i, j], j))
        ids = [i, *others[: truncation - 1]]
        e0 = np.zeros(len(ids))
        e0[0] = 1.0
        rows[i, ids] = np.linalg.solve(laplacian[np.ix_(ids, ids)], e0)
    return rows


def _dense_scores(probes: np.ndarray, gallery: np.ndarray, offline: np.ndarray, query_k: int, gamma: float):
    unit_p, unit_g = _unit(probes), _unit(gallery)
    sims = unit_p @ unit_g.T
    scores = np.zeros((len(probes), len(gallery)))
    for p in range(len(probes)):
        nearest = sorted(range(len(gallery)), key=lambda j: (-sims[p, j], j))[:query_k]
        for j in nearest:
            scores[p] += max(sims[p, j], 0.0) ** gamma * offline[j]
    return scores


def _clusters(seed: int, n: int = 36, d: int = 8, centres: int = 4, sigma: float = 0.4) -> np.ndarray:
    rng = np.random.default_rng(seed)
    middle = rng.normal(size=(centres, d))
    return middle[rng.integers(0, centres, n)] + rng.normal(0, sigma, (n, d))


EXACT = {"tol": 1e-13, "maxiter": 2000}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [3, 7])
def test_offline_rows_equal_the_closed_form_without_truncation(seed: int, k: int) -> None:
    gallery = _clusters(seed)
    positions, values = offline_diffusion(gallery, k=k, truncation=1000, alpha=0.9, gamma=3.0, **EXACT)
    assert positions.dtype == np.int32 and values.dtype == np.float32
    assert positions.shape == values.shape == (len(gallery), len(gallery))
    assert (positions[:, 0] == np.arange(len(gallery))).all()
    got = np.zeros((len(gallery), len(gallery)))
    np.put_along_axis(got, positions.astype(np.int64), values.astype(np.float64), axis=1)
    np.testing.assert_allclose(got, _dense_offline(gallery, k, 1000, 0.9, 3.0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize("truncation", [5, 12, 30])
def test_offline_rows_equal_the_dense_truncated_systems(seed: int, truncation: int) -> None:
    gallery = _clusters(seed)
    positions, values = offline_diffusion(gallery, k=5, truncation=truncation, alpha=0.99, gamma=2.0, **EXACT)
    assert positions.shape == (len(gallery), truncation)
    got = np.zeros((len(gallery), len(gallery)))
    np.put_along_axis(got, positions.astype(np.int64), values.astype(np.float64), axis=1)
    np.testing.assert_allclose(got, _dense_offline(gallery, 5, truncation, 0.99, 2.0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", [5, 6])
def test_full_setting_equals_the_dense_linear_combination(seed: int) -> None:
    gallery = _clusters(seed, n=40)
    probes = _clusters(seed + 100, n=7)
    offline = _dense_offline(gallery, 6, 15, 0.95, 3.0)
    want = -_dense_scores(probes, gallery, offline, 4, 3.0)
    got = decoupled_diffusion_rerank_features(
        probes, gallery, k=6, truncation=15, query_k=4, alpha=0.95, gamma=3.0, **EXACT
    )
    assert got.shape == (7, 40) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_paper_settings_stay_close_to_the_closed_form() -> None:
    # 20 iterations at tol 1e-6 (the paper's) rank like the exact solution on a clustered gallery.
    gallery = _clusters(7, n=60)
    paper = decoupled_diffusion_rerank_features(gallery[:5], gallery, k=5, query_k=3)
    exact = decoupled_diffusion_rerank_features(gallery[:5], gallery, k=5, query_k=3, **EXACT)
    assert np.allclose(paper, exact, atol=0.05 * np.abs(exact).max())


def _store(gallery: np.ndarray) -> InMemoryImageEmbeddingStore:
    return InMemoryImageEmbeddingStore.from_embeddings([f"g{i}" for i in range(len(gallery))], gallery)


@pytest.mark.parametrize("seed", [8, 9])
def test_pool_reranker_equals_the_dense_scores_on_the_pool(seed: int) -> None:
    gallery = _clusters(seed, n=40)
    probes = _clusters(seed + 50, n=4)
    store = _store(gallery)
    reranker = DecoupledDiffusionReranker(store, k=6, truncation=15, query_k=4, alpha=0.95, **EXACT)
    offline = _dense_offline(gallery, 6, 15, 0.95, 3.0)
    for probe in probes:
        pool = store.retrieve_by_vector(probe, k=25)[0]
        rows = [int(c.path[1:]) for c in pool]
        # the query's 4 nearest are the pool's best 4; its weights are (1 - d)^γ of their scores
        want = np.zeros(len(rows))
        for j in range(4):
            want += max(1.0 - pool[j].score, 0.0) ** 3.0 * offline[rows[j], rows]
        order = np.argsort(-want, kind="stable")
        got = reranker.rerank(pool, top_k=25)
        assert [c.path for c in got] == [pool[i].path for i in order]
        np.testing.assert_allclose([c.score for c in got], -want[order], rtol=1e-5, atol=1e-6)
        batch = reranker.rerank_batch([pool, pool[:10]], top_k=5)
        assert [c.path for c in batch[0]] == [c.path for c in got[:5]]
        assert batch[1] == reranker.rerank(pool[:10], top_k=5)


def test_the_offline_part_is_computed_once_kept_in_the_store_and_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gallery = _clusters(10, n=30)
    store = _store(gallery)
    assert store._offline_diffusion is None
    reranker = make_reranker("decoupled-diffusion", store, k=5, truncation=10)
    pool = store.retrieve_by_vector(gallery[0], k=12)[0]
    first = reranker.rerank(pool, top_k=12)
    held = store._offline_diffusion
    assert held is not None and held.params["truncation"] == 10 and held.positions.shape == (30, 10)
    file = tmp_path / "s.safetensors"
    store.save_to_disk(file)
    calls = []
    original = decoupled_module._offline
    monkeypatch.setattr(decoupled_module, "_offline", lambda *a: calls.append(a) or original(*a))
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    assert loaded._offline_diffusion is not None
    np.testing.assert_array_equal(loaded._offline_diffusion.positions, held.positions)
    np.testing.assert_array_equal(loaded._offline_diffusion.values, held.values)
    again = DecoupledDiffusionReranker(loaded, k=5, truncation=10)
    same = again.rerank(loaded.retrieve_by_vector(gallery[0], k=12)[0], top_k=12)
    assert [(c.path, c.score) for c in same] == [(c.path, c.score) for c in first]
    assert calls == []  # reused from the file
    other = DecoupledDiffusionReranker(loaded, k=5, truncation=8)  # other settings: recomputed, replaced
    other.rerank(loaded.retrieve_by_vector(gallery[0], k=12)[0], top_k=3)
    assert len(calls) == 1 and loaded._offline_diffusion.params["truncation"] == 8


def test_prepare_ahead_and_mutation_drops_it() -> None:
    gallery = _clusters(11, n=20)
    store = _store(gallery)
    held = prepare_offline_diffusion(store, k=4, truncation=6)
    assert store._offline_diffusion is held
    assert prepare_offline_diffusion(store, k=4, truncation=6) is held
    store.remove_images(["g3"])
    assert store._offline_diffusion is None
    reranker = DecoupledDiffusionReranker(store, k=4, truncation=6)
    got = reranker.rerank(store.retrieve_by_vector(gallery[0], k=19)[0], top_k=19)
    assert "g3" not in {c.path for c in got} and store._offline_diffusion.positions.shape == (19, 6)


def _tamper(file: Path, tensors_edit=None, header_edit=None, old: bool = False) -> Path:
    """Rewrite a store file with edited tensors / header and digests recomputed (a well-formed liar);
    ``old``: laid out as before the extension slot (such files are still read, as strictly)."""
    header, tensors = read_parts(file)
    if tensors_edit:
        tensors_edit(tensors)
    if header_edit:
        header_edit(header)
    if old:
        header, tensors = old_layout(header, tensors)
    return write_sealed(file.with_name("tampered.safetensors"), header, tensors)


POSITIONS, VALUES = "ext/offline_diffusion/positions", "ext/offline_diffusion/values"


def _set(name: str, fn):
    def edit(tensors: dict) -> None:
        tensors[name] = np.ascontiguousarray(fn(tensors[name]))

    return edit


def _header(key: str, value):
    def edit(header: dict) -> None:
        header["extensions"]["offline_diffusion"][key] = value

    return edit


def _flip_row(p: np.ndarray) -> np.ndarray:
    p = p.copy()
    p[2, 1] = p[2, 2]
    return p


def _outside(p: np.ndarray) -> np.ndarray:
    p = p.copy()
    p[1, 3] = 99
    return p


def _nan(v: np.ndarray) -> np.ndarray:
    v = v.copy()
    v[0, 1] = np.nan
    return v


def _drop(name: str):
    def edit(tensors: dict) -> None:
        del tensors[name]

    return edit


def _no_record(header: dict) -> None:
    del header["extensions"]["offline_diffusion"]


@pytest.mark.parametrize(
    ("tensors_edit", "header_edit", "message"),
    [
        (_set(POSITIONS, lambda p: p.astype(np.int64)), None, "int32"),
        (_set(POSITIONS, lambda p: p[:, :5]), None, "shape"),
        (_set(VALUES, lambda v: v[:-1]), None, "shape"),
        (_set(POSITIONS, _outside), None, "outside"),
        (_set(POSITIONS, lambda p: p[:, ::-1].copy()), None, "start with"),
        (_set(POSITIONS, _flip_row), None, "twice"),
        (_set(VALUES, _nan), None, "NaN"),
        (_drop(VALUES), None, "needs the tensors"),
        (None, _no_record, "no header key"),
        (None, _header("truncation", 6), "shape"),
        (None, _header("alpha", 1.5), "alpha"),
        (None, _header("k", True), "'k'"),
        (None, _header("maxiter", 1 << 30), "maxiter"),
        (None, _header("gamma", "3"), "gamma"),
        (None, lambda h: h["extensions"]["offline_diffusion"].update(extra=1), "exactly the keys"),
    ],
)
@pytest.mark.parametrize("old", [False, True], ids=["slot", "old-layout"])
def test_a_stored_offline_diffusion_is_validated(
    tmp_path: Path, tensors_edit, header_edit, message, old: bool
) -> None:
    store = _store(_clusters(12, n=12))
    prepare_offline_diffusion(store, k=3, truncation=8)
    file = tmp_path / "s.safetensors"
    store.save_to_disk(file)
    InMemoryImageEmbeddingStore.load_from_disk(file)  # the untouched file loads
    InMemoryImageEmbeddingStore.load_from_disk(_tamper(file, old=old))  # so does its old layout
    bad = _tamper(file, tensors_edit, header_edit, old)
    with pytest.raises(ValueError, match=message):
        InMemoryImageEmbeddingStore.load_from_disk(bad)


def test_registry_cli_and_parameter_checks() -> None:
    assert "decoupled-diffusion" in RERANK_METHODS
    checked = check_method_params("decoupled-diffusion", {"query_k": 5})
    assert checked == {
        "k": 50,
        "truncation": 1000,
        "query_k": 5,
        "alpha": 0.99,
        "gamma": 3.0,
        "tol": 1e-6,
        "maxiter": 20,
    }
    from galleria.cli._rerank_options import RERANK_METHOD_CHOICES

    assert RERANK_METHOD_CHOICES == RERANK_METHODS
    store = _store(_clusters(13, n=10))
    for name, value, error in (
        ("k", 0, ValueError),
        ("truncation", 1.5, TypeError),
        ("query_k", True, TypeError),
        ("alpha", 1.0, ValueError),
        ("gamma", -1.0, ValueError),
        ("tol", float("nan"), ValueError),
        ("maxiter", 1 << 21, ValueError),
    ):
        with pytest.raises(error, match=name):
            DecoupledDiffusionReranker(store, **{name: value})
        if name != "query_k":  # an online setting
            with pytest.raises(error, match=name):
                offline_diffusion(np.eye(3), **{name: value})
    with pytest.raises(TypeError, match="InMemoryImageEmbeddingStore"):
        DecoupledDiffusionReranker("store")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dimension"):
        decoupled_diffusion_rerank_features(np.ones((2, 3)), np.ones((4, 2)))


def test_single_item_gallery_and_other_stores_candidates() -> None:
    store = _store(np.array([[1.0, 0.0]]))
    got = DecoupledDiffusionReranker(store).rerank(store.retrieve_by_vector([1.0, 0.1], k=1)[0], top_k=3)
    assert [c.path for c in got] == ["g0"] and got[0].score < 0
    other = _store(np.eye(2))
    with pytest.raises(ValueError):
        DecoupledDiffusionReranker(store).rerank(other.retrieve_by_vector([1.0, 0.0], k=1)[0], top_k=1)


def test_build_precomputes_the_offline_part_and_search_reuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from PIL import Image
    from safetensors import safe_open

    from galleria.cli import main
    from galleria.cli._rerank_options import PRECOMPUTE_RERANK_CHOICES
    from galleria.rerank.adaptive import default_rerank_params
    from galleria.rerank.registry import PRECOMPUTED_METHODS

    assert PRECOMPUTE_RERANK_CHOICES == PRECOMPUTED_METHODS
    rng = np.random.default_rng(0)
    folder = tmp_path / "photos"
    for label, colour in {"red": (200, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 200)}.items():
        (folder / label).mkdir(parents=True)
        for i in range(8):
            pixels = np.clip(np.array(colour) + rng.normal(0, 40, (12, 12, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / label / f"{label}{i}.png")
    out = tmp_path / "g.safetensors"
    args = ["build", str(folder), "--out", str(out), "--embedder", "pixel:8", "--json"]
    assert main([*args, "--precompute-rerank", "decoupled-diffusion"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["precomputed"]["method"] == "decoupled-diffusion"
    with safe_open(str(out), framework="numpy") as reader:
        header = json.loads(reader.metadata()["galleria"])
        assert {POSITIONS, VALUES} <= set(reader.keys())  # in the extension slot
        positions = reader.get_tensor(POSITIONS)
    assert positions.shape == (24, 24)  # truncation 1000 capped at the gallery
    loaded = InMemoryImageEmbeddingStore.load_from_disk(out)
    wanted = check_method_params("decoupled-diffusion", default_rerank_params(loaded, "decoupled-diffusion"))
    params = header["extensions"]["offline_diffusion"]
    assert params == {key: wanted[key] for key in decoupled_module.OFFLINE_PARAMS}
    assert summary["precomputed"]["params"] == wanted

    calls: list[Any] = []
    original = decoupled_module._offline
    monkeypatch.setattr(decoupled_module, "_offline", lambda *a: calls.append(a) or original(*a))
    query = str(folder / "red" / "red0.png")
    search = ["search", str(out), "--image", query, "-k", "5", "--json", "--rerank"]
    search += ["--rerank-method", "decoupled-diffusion"]
    assert main(search) == 0
    results = json.loads(capsys.readouterr().out)["queries"][0]["results"]
    assert len(results) == 5 and calls == []  # the stored part was used, nothing recomputed
    plain_out = tmp_path / "plain.safetensors"
    assert main(["build", str(folder), "--out", str(plain_out), "--embedder", "pixel:8", "--json"]) == 0
    capsys.readouterr()
    assert main([*search[:1], str(plain_out), *search[2:]]) == 0
    again = json.loads(capsys.readouterr().out)["queries"][0]["results"]
    assert len(calls) == 1  # without --precompute-rerank the first search computes it
    assert [r["path"] for r in again] == [r["path"] for r in results]
    with pytest.raises(SystemExit):
        main([*args[:-1], "--precompute-rerank", "diffusion", "--overwrite"])
    with pytest.raises(ValueError, match="precompute_rerank"):
        precompute_rerank(loaded, "diffusion")

    # galleria info says what each file keeps for re-ranking
    assert main(["info", str(out), "--json"]) == 0
    kept = json.loads(capsys.readouterr().out)["rerank"]
    assert kept["precomputed"] == {"method": "decoupled-diffusion", "params": params}
    assert kept["statistics"]["n_items"] == 24
    assert main(["info", str(plain_out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rerank"]["precomputed"] is None
    assert main(["info", str(out)]) == 0
    line = [row for row in capsys.readouterr().out.splitlines() if row.startswith("re-ranking:")]
    assert len(line) == 1 and "decoupled-diffusion offline part kept (k=" in line[0]
