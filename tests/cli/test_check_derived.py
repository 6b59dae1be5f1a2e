"""``galleria check`` lists and verifies the derived side files: ``STORE.graph`` and ``STORE.map``
(none, current, stale, or damaged: a FAIL line and exit code 2, as for the other side files)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from galleria import InMemoryImageEmbeddingStore
from galleria.cli import main
from galleria.distances import prepare_vectors
from galleria.store.gallery_map import gallery_map, map_file_for
from galleria.store.graph import graph_file_for, neighbor_graph


def _store(count: int, seed: int = 0) -> InMemoryImageEmbeddingStore:
    vectors = prepare_vectors(np.random.default_rng(seed).normal(size=(count, 8)), "cosine")
    return InMemoryImageEmbeddingStore.from_embeddings([f"/g/{i % 3}/{i}.png" for i in range(count)], vectors)


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A store file of 60 items with a current ``STORE.graph`` and ``STORE.map`` beside it."""
    file = tmp_path / "s.safetensors"
    _store(60).save_to_disk(file)
    neighbor_graph(InMemoryImageEmbeddingStore.load_from_disk(file), 5, store_file=file)
    gallery_map(InMemoryImageEmbeddingStore.load_from_disk(file), method="pca", store_file=file)
    return file


def _parts(file: Path, capsys: pytest.CaptureFixture[str], code: int = 0) -> dict[str, dict]:
    assert main(["check", str(file), "--json"]) == code
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is (code == 0)
    return {part["part"]: part for part in report["parts"]}


def test_check_lists_no_graph_or_map_when_there_is_none(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    file = tmp_path / "s.safetensors"
    _store(10).save_to_disk(file)
    parts = _parts(file, capsys)
    assert parts["graph"]["detail"].startswith("none") and parts["graph"]["path"] == graph_file_for(file)
    assert parts["map"]["detail"].startswith("none") and parts["map"]["path"] == map_file_for(file)


def test_check_says_current_graph_and_map(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parts = _parts(saved, capsys)
    assert parts["graph"]["ok"] and parts["graph"]["detail"] == "current: k=5 (exact); all 60 rows verified"
    assert parts["map"]["ok"] and parts["map"]["detail"] == "current: 60 point(s) (pca)"
    assert main(["check", str(saved)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("ok   graph ") for line in lines) == 1
    assert sum(line.startswith("ok   map ") for line in lines) == 1


def test_check_says_stale_for_another_state(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _store(60, seed=7).save_to_disk(saved)  # other vectors under the same paths
    parts = _parts(saved, capsys)
    assert parts["graph"]["ok"] and parts["graph"]["detail"].startswith("stale: of another state")
    assert parts["map"]["ok"] and "of another gallery" in parts["map"]["detail"]
    assert parts["map"]["detail"].startswith("stale:")


def test_check_says_what_a_grown_map_places(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _store(61).save_to_disk(saved)  # the same 60 items (the same random stream) and one more
    parts = _parts(saved, capsys)
    assert parts["map"]["ok"] and parts["map"]["detail"].startswith("stale: 60 point(s) (pca); 1 image(s)")


def _garbage(data: bytes) -> bytes:
    return b"garbage, not a side file" * 5


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _flipped(data: bytes) -> bytes:
    return data[:-9] + bytes([data[-9] ^ 0x01]) + data[-8:]


@pytest.mark.parametrize("side", ["graph", "map"])
@pytest.mark.parametrize("damage", [_garbage, _truncated, _flipped])
def test_check_fails_on_a_damaged_graph_or_map(saved: Path, side: str, damage, capsys) -> None:  # type: ignore[no-untyped-def]
    name = Path(graph_file_for(saved) if side == "graph" else map_file_for(saved))
    name.write_bytes(damage(name.read_bytes()))
    parts = _parts(saved, capsys, code=2)
    assert not parts[side]["ok"] and parts[side]["detail"].startswith("damaged: ")
    assert name.name in parts[side]["detail"]
    other = "map" if side == "graph" else "graph"
    assert parts[other]["ok"] and parts["store"]["ok"]
    assert main(["check", str(saved)]) == 2
    assert f"FAIL {side} " in capsys.readouterr().out
