"""``add`` and ``remove`` update the store's kept neighbour graph (memory and ``STORE.graph``) instead of
discarding it; the file written records the new state, and duplicates, DBA and diffusion read it."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from galleria import InMemoryImageEmbeddingStore
from galleria.cli import main
from galleria.embedders import PixelEmbedder
from galleria.index.neighbor_graph import exact_graph, graph_recall
from galleria.rerank import DiffusionReranker, _dba_core, _diffusion_graph, augment_store
from galleria.store import _graph_follow
from galleria.store import graph as graph_module
from galleria.store.graph import (
    GraphStateWarning,
    graph_file_for,
    graph_state,
    neighbor_graph,
    read_graph_file,
    read_graph_header,
)

K = 10


def _image(path: Path, colour: tuple[int, int, int], rng: np.random.Generator) -> str:
    pixels = np.clip(np.array(colour) + rng.normal(0, 40, (8, 8, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)
    return str(path)


@pytest.fixture
def photos(tmp_path: Path) -> list[str]:
    rng = np.random.default_rng(2)
    colours = [(200, 40, 40), (40, 200, 40), (40, 40, 200), (200, 200, 40)]
    return [_image(tmp_path / f"p{i:03d}.png", colours[i % 4], rng) for i in range(90)]


def _builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the graphs built anywhere (the store's, DBA's, diffusion's)."""
    calls: list[int] = []
    real = graph_module.build_graph

    def counting(vectors: np.ndarray, k: int, *args: Any, **kwargs: Any) -> Any:
        calls.append(int(k))
        return real(vectors, k, *args, **kwargs)

    for module in (graph_module, _dba_core, _diffusion_graph):
        monkeypatch.setattr(module, "build_graph", counting)
    return calls


def _store(paths: list[str]) -> InMemoryImageEmbeddingStore:
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=4), num_workers=1)
    store.build_store(progress=False)
    return store


def test_add_and_remove_update_the_kept_graph(
    photos: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "s.safetensors"
    store = _store(photos[:80])
    store.save_to_disk(file)
    built = _builds(monkeypatch)
    neighbor_graph(store, K, store_file=file)
    assert built == [K]
    store.add_images(photos[80:], progress=False)
    store.remove_images(photos[:3])
    store.save_to_disk(file)
    ids, _distances = neighbor_graph(store, K, store_file=file)
    assert built == [K]  # updated, not rebuilt
    header = read_graph_header(graph_file_for(file))
    assert header["state"] == graph_state(store) and header["version"] == 2 and header["changed"] == 13
    truth, _ = exact_graph(store.embeddings, K, store.space)
    assert graph_recall(np.asarray(ids), truth) >= 0.95
    added = [store.paths.index(path) for path in photos[80:]]
    np.testing.assert_array_equal(ids[added], truth[added])  # the added images: searched exactly
    fresh = InMemoryImageEmbeddingStore.load_from_disk(file)
    kept = read_graph_file(graph_file_for(file), fresh, verify=None)  # every row checked, as updated
    assert kept is not None and kept.changed == 13
    np.testing.assert_array_equal(kept.ids, ids)
    # an updated graph is no longer exact: asking for the exact one rebuilds it
    exact, _ = neighbor_graph(store, K, method="exact")
    np.testing.assert_array_equal(exact, truth)
    assert built == [K, K]


def test_a_reembedded_image_counts_as_new(photos: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(photos[:40])
    neighbor_graph(store, K)
    store.remove_images(photos[:1])
    _image(Path(photos[0]), (40, 200, 200), np.random.default_rng(9))  # the file changed meanwhile
    store.add_images(photos[:1], progress=False)
    built = _builds(monkeypatch)
    ids, _ = neighbor_graph(store, K)
    assert built == []
    truth, _ = exact_graph(store.embeddings, K, store.space)
    row = store.paths.index(photos[0])
    np.testing.assert_array_equal(ids[row], truth[row])
    assert graph_recall(np.asarray(ids), truth) >= 0.95


def test_a_change_too_large_rebuilds(photos: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(photos[:40])
    neighbor_graph(store, K)
    built = _builds(monkeypatch)
    store.remove_images(photos[:12])  # 12 of 28 rows: past REBUILD_SHARE
    assert 12 > _graph_follow.REBUILD_SHARE * 28
    ids, _ = neighbor_graph(store, K)
    assert built == [K]
    np.testing.assert_array_equal(ids, exact_graph(store.embeddings, K, store.space)[0])


def _cli(*args: str) -> Any:
    assert main([*args, "--json"]) == 0


def test_the_cli_keeps_the_graph_with_the_store_and_its_readers_use_it(
    photos: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    file = str(tmp_path / "s.safetensors")
    _store(photos[:80]).save_to_disk(file)
    _cli("graph", file, "--k", str(K), "--sample", "0")
    _cli("add", file, *photos[80:])
    _cli("remove", file, photos[5], photos[6])
    capsys.readouterr()
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    header = read_graph_header(graph_file_for(file))
    assert header["state"] == graph_state(loaded) and header["changed"] == 12
    built = _builds(monkeypatch)
    assert main(["duplicates", file, "--json", "--k", str(K)]) == 0
    assert main(["check", file]) == 0
    assert "graph" in capsys.readouterr().out
    neighbor_graph(loaded, K, store_file=file)  # the updated file, read
    augment_store(loaded, neighbors=K)
    query = loaded.retrieve_by_vector(loaded.embeddings_of([photos[0]])[0], k=30)[0]
    DiffusionReranker(loaded, k=K).rerank(query, 10)
    assert built == []  # duplicates, DBA and diffusion all read the updated graph


def test_a_graph_update_that_fails_leaves_a_stale_file_never_a_mixed_one(
    photos: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    file = str(tmp_path / "s.safetensors")
    _store(photos[:80]).save_to_disk(file)
    _cli("graph", file, "--k", str(K), "--sample", "0")
    before = Path(graph_file_for(file)).read_bytes()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(graph_module, "write_graph_arrays", broken)  # what STORE.graph is written with
    _cli("add", file, *photos[80:])
    assert "could not be updated" in capsys.readouterr().err
    assert Path(graph_file_for(file)).read_bytes() == before  # the old state's graph, whole
    loaded = InMemoryImageEmbeddingStore.load_from_disk(file)
    assert len(loaded) == 90
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read_graph_file(graph_file_for(file), loaded) is None  # stale: refused
    assert any(issubclass(w.category, GraphStateWarning) for w in caught)
    monkeypatch.undo()
    built = _builds(monkeypatch)
    with pytest.warns(GraphStateWarning):
        neighbor_graph(loaded, K, store_file=file)
    assert built == [K]  # rebuilt for the new state
    assert read_graph_header(graph_file_for(file))["state"] == graph_state(loaded)
    assert json.loads(json.dumps(read_graph_header(graph_file_for(file))))["version"] == 1


def test_galleria_graph_waits_for_no_writer_while_it_builds(
    photos: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from galleria._files import writer_lock

    file = str(tmp_path / "s.safetensors")
    _store(photos[:30]).save_to_disk(file)
    with writer_lock(file):  # another process is changing the store
        assert main(["graph", file, "--k", str(K), "--sample", "0"]) == 2
    assert "is being changed by another galleria process" in capsys.readouterr().err
    assert not Path(graph_file_for(file)).exists()
    _cli("graph", file, "--k", str(K), "--sample", "0")  # the lock released: built
    assert read_graph_header(graph_file_for(file))["k"] == K
