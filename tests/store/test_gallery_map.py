"""Issue 28 §5: the gallery's map, computed once per gallery and kept in ``STORE.map`` (untrusted)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from _support.extras import need
from galleria import InMemoryImageEmbeddingStore
from galleria.store import gallery_map as module
from galleria.store.gallery_map import (
    GalleryMap,
    MapFileWarning,
    gallery_map,
    map_file_for,
    place_points,
    project_vectors,
    read_map_file,
)


def _store(count: int = 40, seed: int = 0, dim: int = 6) -> InMemoryImageEmbeddingStore:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, dim)) * 5
    vectors = centres[np.arange(count) % 4] + rng.normal(size=(count, dim))
    return InMemoryImageEmbeddingStore.from_embeddings(
        [f"/g/c{i % 4}/{i}.png" for i in range(count)], vectors
    )


def _no_projection(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the map was recomputed")

    monkeypatch.setattr(module, "project_vectors", refuse)


def test_pca_projects_onto_the_leading_axes() -> None:
    rng = np.random.default_rng(1)
    vectors = np.zeros((200, 5))
    vectors[:, 2] = rng.normal(size=200) * 10  # the widest axis
    vectors[:, 4] = rng.normal(size=200) * 3
    vectors += rng.normal(size=(200, 5)) * 0.01
    points, used = project_vectors(vectors, "l2", method="pca")
    assert used == "pca" and points.shape == (200, 2) and points.dtype == np.float32
    assert abs(np.corrcoef(points[:, 0], vectors[:, 2])[0, 1]) > 0.999
    assert abs(np.corrcoef(points[:, 1], vectors[:, 4])[0, 1]) > 0.999
    with pytest.raises(ValueError, match="method"):
        project_vectors(vectors, method="umap")


def test_tsne_keeps_clusters_apart() -> None:
    need("openTSNE")
    store = _store(120)
    points, used = project_vectors(_vectors(store), "cosine")
    assert used == "tsne"
    labels = np.arange(120) % 4
    centres = np.array([points[labels == c].mean(axis=0) for c in range(4)])
    spread = max(float(np.linalg.norm(points[labels == c] - centres[c], axis=1).mean()) for c in range(4))
    gaps = min(float(np.linalg.norm(a - b)) for i, a in enumerate(centres) for b in centres[i + 1 :])
    assert gaps > 2 * spread


def _vectors(store: InMemoryImageEmbeddingStore) -> np.ndarray:
    return np.asarray(store._gallery_vectors(np.arange(len(store))), dtype=np.float32)


def test_place_points_is_the_mean_of_the_nearest_mapped() -> None:
    mapped = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0], [11.0, 0.0]])
    coordinates = np.array([[0.0, 0.0], [2.0, 2.0], [50.0, 50.0], [60.0, 60.0]], dtype=np.float32)
    placed = place_points(np.array([[0.2, 0.0], [10.4, 0.0]]), mapped, coordinates, "l2", k=2)
    assert placed.tolist() == [[1.0, 1.0], [55.0, 55.0]]


def test_the_map_is_kept_beside_the_store_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_file = tmp_path / "s.safetensors"
    first = gallery_map(_store(), method="pca", store_file=store_file)
    assert Path(map_file_for(store_file)).is_file() and first.placed == 0
    _no_projection(monkeypatch)
    again = gallery_map(_store(), store_file=store_file)  # another store object of the same gallery
    assert again.method == "pca" and np.array_equal(again.coordinates, first.coordinates)


def test_images_added_later_are_placed_without_recomputing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_file = tmp_path / "s.safetensors"
    store = _store(40)
    first = gallery_map(store, method="pca", store_file=store_file)
    vectors = _vectors(store)
    grown = InMemoryImageEmbeddingStore.from_embeddings(
        [*store.paths, "/g/new/a.png", "/g/new/b.png"],
        np.vstack([vectors, vectors[3] + 0.01, vectors[7] + 0.01]),
    )
    _no_projection(monkeypatch)
    extended = gallery_map(grown, store_file=store_file)
    assert extended.placed == 2 and extended.coordinates.shape == (42, 2)
    assert np.array_equal(extended.coordinates[:40], first.coordinates)
    expected = place_points(_vectors(grown)[40:], vectors, first.coordinates, "cosine")
    assert np.allclose(extended.coordinates[40:], expected)
    header = json.loads(_header_bytes(map_file_for(store_file)))
    assert header["n"] == 42  # the file now maps the grown gallery


def _header_bytes(path: str) -> bytes:
    data = Path(path).read_bytes()
    (length,) = struct.unpack("<I", data[14:18])
    return data[18 : 18 + length]


def test_a_map_of_another_gallery_is_ignored_with_a_warning(tmp_path: Path) -> None:
    store_file = tmp_path / "s.safetensors"
    gallery_map(_store(seed=1), method="pca", store_file=store_file)
    other = _store(seed=2)
    with pytest.warns(MapFileWarning, match="another gallery"):
        result = gallery_map(other, method="pca", store_file=store_file)
    assert result.placed == 0 and result.coordinates.shape == (40, 2)
    assert np.allclose(result.coordinates, project_vectors(_vectors(other), method="pca")[0])


def _rewrite(path: str, change: dict[str, object] | None = None, tail: bytes | None = None) -> None:
    data = Path(path).read_bytes()
    (length,) = struct.unpack("<I", data[14:18])
    header = json.loads(data[18 : 18 + length])
    header.update(change or {})
    encoded = json.dumps(header).encode()
    payload = data[18 + length :] if tail is None else tail
    Path(path).write_bytes(data[:14] + struct.pack("<I", len(encoded)) + encoded + payload)


@pytest.mark.parametrize(
    "damage",
    ["magic", "huge_n", "short", "long", "digest", "nan", "header_keys", "method", "fifo"],
)
def test_a_hostile_map_file_is_ignored_with_a_warning_and_recomputed(tmp_path: Path, damage: str) -> None:
    import os

    store_file = tmp_path / "s.safetensors"
    store = _store()
    gallery_map(store, method="pca", store_file=store_file)
    path = map_file_for(store_file)
    if damage == "magic":
        Path(path).write_bytes(b"NOT-A-MAP" + Path(path).read_bytes()[9:])
    elif damage == "huge_n":
        _rewrite(path, {"n": 10**9})
    elif damage == "short":
        Path(path).write_bytes(Path(path).read_bytes()[:-5])
    elif damage == "long":
        Path(path).write_bytes(Path(path).read_bytes() + b"\0" * 16)
    elif damage == "digest":
        data = bytearray(Path(path).read_bytes())
        data[-1] ^= 0xFF
        Path(path).write_bytes(bytes(data))
    elif damage == "nan":  # a consistent file (digest and state right) holding a non-finite coordinate
        keys = module.fingerprints(store.paths, _vectors(store))
        coordinates = np.zeros((40, 2), np.float32)
        coordinates[5, 1] = np.nan
        module._write_map_file(path, keys, GalleryMap(module._state(*keys), coordinates, "pca"))
    elif damage == "header_keys":
        _rewrite(path, {"extra": 1})
    elif damage == "method":
        _rewrite(path, {"method": "pickle"})
    else:
        os.remove(path)
        os.mkfifo(path)
    with pytest.raises(ValueError, match="map file"):
        read_map_file(path, len(store))
    with pytest.warns(MapFileWarning, match="ignored"):
        result = gallery_map(_store(), method="pca", store_file=store_file)
    assert np.all(np.isfinite(result.coordinates)) and result.coordinates.shape == (40, 2)
    if damage != "fifo":
        read_map_file(path, len(store))  # rewritten whole


def test_the_item_count_is_bounded_by_the_store(tmp_path: Path) -> None:
    store_file = tmp_path / "s.safetensors"
    gallery_map(_store(200), method="pca", store_file=store_file)
    with pytest.raises(ValueError, match=r"n must be an int in \[0, 104\]"):
        read_map_file(map_file_for(store_file), 20)


def test_the_map_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from galleria.cli import main

    store_file = tmp_path / "s.safetensors"
    _store().save_to_disk(store_file)
    assert main(["map", str(store_file), "--method", "pca", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["images"] == 40 and figures["method"] == "pca" and Path(figures["file"]).is_file()
    assert main(["map", str(store_file)]) == 0
    assert "map of 40 images (pca)" in capsys.readouterr().out


@pytest.mark.parametrize("space", ["cosine", "l2"])
def test_the_tsne_map_stands_on_the_stores_neighbour_graph(
    space: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """t-SNE's affinities come from the store's one neighbour graph (built once, kept for the other
    consumers; l2 distances as Euclidean ones), and the map keeps the clusters apart."""
    need("openTSNE")
    import galleria
    from galleria.index.neighbor_graph import build_graph
    from galleria.store import graph as graph_module

    calls: list[int] = []

    def counting(vectors: np.ndarray, k: int, *args: object, **kwargs: object) -> object:
        calls.append(k)
        return build_graph(vectors, k, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(graph_module, "build_graph", counting)
    rng = np.random.default_rng(1)
    vectors = (np.eye(4) * 6)[np.arange(120) % 4] + rng.normal(size=(120, 4))
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"/g/{i}.png" for i in range(120)], vectors, space=space
    )
    result = gallery_map(store, method="tsne")
    assert result.method == "tsne" and calls == [90]
    galleria.neighbor_graph(store, 30)  # the graph the map asked for serves the others
    assert calls == [90]
    labels = np.arange(120) % 4
    points = result.coordinates
    centres = np.array([points[labels == c].mean(axis=0) for c in range(4)])
    spread = max(float(np.linalg.norm(points[labels == c] - centres[c], axis=1).mean()) for c in range(4))
    gaps = [float(np.linalg.norm(a - b)) for i, a in enumerate(centres) for b in centres[i + 1 :]]
    assert min(gaps) > 2 * spread


def test_a_large_gallery_is_mapped_from_a_sample_and_placed_along_the_graph(tmp_path: Path) -> None:
    """Issue 36: above ``sample`` images, t-SNE lays out a seeded sample; the others are placed from
    their graph neighbours, near their cluster; the same map every time; the file records the sample."""
    need("openTSNE")
    count, sample = 400, 120
    store = _store(count, dim=6)
    result = gallery_map(store, sample=sample)
    assert result.method == "tsne" and result.sampled == sample and result.coordinates.shape == (count, 2)
    assert np.isfinite(result.coordinates).all()
    labels = np.arange(count) % 4
    points = result.coordinates
    centres = np.array([points[labels == c].mean(axis=0) for c in range(4)])
    nearest_centre = np.argmin(((points[:, None, :] - centres[None]) ** 2).sum(axis=2), axis=1)
    assert np.mean(nearest_centre == labels) > 0.95  # placed points land with their cluster
    again = gallery_map(_store(count, dim=6), sample=sample)
    assert np.array_equal(again.coordinates, points)  # seeded: the same map
    store_file = tmp_path / "s.safetensors"
    kept = gallery_map(_store(count, dim=6), sample=sample, store_file=store_file)
    assert module.read_map_header(map_file_for(store_file), count)["sampled"] == sample
    read = gallery_map(_store(count, dim=6), store_file=store_file)  # read back, not recomputed
    assert read.sampled == sample and np.array_equal(read.coordinates, kept.coordinates)
    full = gallery_map(_store(count, dim=6), sample=0, method="pca")
    assert full.sampled == 0
    with pytest.raises(ValueError, match="sample"):
        gallery_map(store, sample=-1)


def test_a_map_file_claiming_a_sample_larger_than_its_items_is_refused(tmp_path: Path) -> None:
    store = _store(20)
    store_file = tmp_path / "s.safetensors"
    gallery_map(store, method="pca", store_file=store_file)
    side = Path(map_file_for(store_file))
    data = side.read_bytes()
    (length,) = struct.unpack("<I", data[14:18])
    header = json.loads(data[18 : 18 + length])
    header["sampled"] = 21
    encoded = json.dumps(header, sort_keys=True).encode()
    side.write_bytes(data[:14] + struct.pack("<I", len(encoded)) + encoded + data[18 + length :])
    with pytest.raises(ValueError, match="sampled must be an int in"):
        read_map_file(side, 20)
