"""A damaged ``STORE.graph`` (garbage, truncated, a flipped byte) is ignored with a warning naming the
file and rebuilt wherever a graph is wanted (neighbor_graph, ``galleria duplicates``), never used;
``galleria graph`` and :func:`read_graph_file` stay strict."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from galleria import InMemoryImageEmbeddingStore
from galleria.cli import main
from galleria.distances import prepare_vectors
from galleria.store import graph as graph_module
from galleria.store.graph import GraphFileWarning, graph_file_for, read_graph_file


def _garbage(data: bytes) -> bytes:
    return b"\x89PNG not a graph at all" * 7


def _truncated(data: bytes) -> bytes:
    return data[: len(data) * 2 // 3]


def _flipped(data: bytes) -> bytes:
    middle = len(data) - 37  # inside the distances
    return data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1 :]


DAMAGES = {"garbage": _garbage, "truncated": _truncated, "flipped": _flipped}


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, bytes]:
    """A store file of 120 items with near copies, and its valid ``STORE.graph`` (k=6)."""
    rng = np.random.default_rng(4)
    base = rng.normal(size=(100, 12))
    vectors = np.concatenate([base, base[:20] + rng.normal(0, 1e-3, (20, 12))])
    file = tmp_path / "s.safetensors"
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"/g/{i // 30}/{i}.png" for i in range(120)], prepare_vectors(vectors, "cosine")
    )
    store.save_to_disk(file)
    graph_module.neighbor_graph(InMemoryImageEmbeddingStore.load_from_disk(file), 6, store_file=file)
    return file, Path(graph_file_for(file)).read_bytes()


def _fresh(file: Path, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The graph built anew, with no side file in sight."""
    return graph_module.neighbor_graph(InMemoryImageEmbeddingStore.load_from_disk(file), k)


@pytest.mark.parametrize("damage", DAMAGES)
def test_neighbor_graph_warns_and_rebuilds_a_damaged_file(saved: tuple[Path, bytes], damage: str) -> None:
    file, data = saved
    side = Path(graph_file_for(file))
    side.write_bytes(DAMAGES[damage](data))
    store = InMemoryImageEmbeddingStore.load_from_disk(file)
    with pytest.raises(ValueError, match=r"s\.safetensors\.graph"):
        read_graph_file(side, store)  # the verifier stays strict
    with pytest.warns(GraphFileWarning, match=r"s\.safetensors\.graph.*unusable \(.+\); ignored and rebuilt"):
        ids, distances = graph_module.neighbor_graph(store, 6, store_file=file)
    expected_ids, expected_distances = _fresh(file, 6)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(distances, expected_distances)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = read_graph_file(side, InMemoryImageEmbeddingStore.load_from_disk(file))
    assert kept is not None and side.read_bytes() == data  # rewritten: the same bytes as the valid file


def test_a_graph_file_remembered_by_the_cli_is_rebuilt_in_memory_and_left_alone(
    saved: tuple[Path, bytes],
) -> None:
    import argparse

    from galleria.cli._store_options import load_store

    file, data = saved
    side = Path(graph_file_for(file))
    side.write_bytes(_flipped(data))
    store = load_store(argparse.Namespace(checkpoint=None, root=None, connect=False), str(file))
    with pytest.warns(GraphFileWarning, match=r"s\.safetensors\.graph"):
        ids, _ = graph_module.neighbor_graph(store, 4)
    np.testing.assert_array_equal(ids, _fresh(file, 4)[0])
    assert side.read_bytes() == _flipped(data)  # a file remembered from loading is never written


@pytest.mark.parametrize("damage", DAMAGES)
def test_cli_duplicates_warns_and_answers_as_with_a_fresh_graph(
    saved: tuple[Path, bytes], damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    file, _ = saved
    side = Path(graph_file_for(file))
    side.unlink()
    assert main(["duplicates", str(file), "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert expected["groups"]  # the planted near copies are found
    side.write_bytes(DAMAGES[damage](side.read_bytes()))
    assert main(["duplicates", str(file), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == expected
    assert "s.safetensors.graph" in err and "ignored and rebuilt" in err


def test_cli_graph_stays_strict_and_rebuild_replaces_a_damaged_file(
    saved: tuple[Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    file, data = saved
    side = Path(graph_file_for(file))
    side.write_bytes(_truncated(data))
    assert main(["graph", str(file), "--k", "6", "--sample", "0"]) != 0
    err = capsys.readouterr().err
    assert "s.safetensors.graph" in err and "--rebuild" in err and "ignored and rebuilt" not in err
    assert side.read_bytes() == _truncated(data)  # left as it was
    assert main(["graph", str(file), "--k", "6", "--sample", "0", "--rebuild"]) == 0
    assert side.read_bytes() == data
