"""The gallery's neighbour graph: exact equals brute force, the inverted-file pass finds nearly all,
the graph is kept per store state (in memory and in STORE.graph), and a graph file is untrusted."""

from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

import galleria
from galleria import InMemoryImageEmbeddingStore
from galleria.distances import pairwise_distances, prepare_vectors
from galleria.index.neighbor_graph import (
    GRAPH_PHASE,
    HNSW_BUILD,
    HNSW_SEARCH,
    approximate_graph,
    build_graph,
    check_graph_arrays,
    exact_graph,
    graph_recall,
    hnsw_graph,
    smallest_sorted,
)
from galleria.store import graph as graph_module
from galleria.store.graph import (
    GraphStateWarning,
    graph_file_for,
    read_graph_file,
    read_graph_header,
    save_neighbor_graph,
)


def brute_force(vectors: np.ndarray, k: int, space: str) -> tuple[np.ndarray, np.ndarray]:
    distances = pairwise_distances(vectors, vectors, space)
    np.fill_diagonal(distances, np.inf)
    order = np.argsort(distances, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(distances, order, axis=1)


def clustered(count: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(1, count // 200), dim))
    vectors = centres[rng.integers(0, len(centres), count)] + rng.normal(0, 0.5, (count, dim))
    return prepare_vectors(vectors, "cosine")


@pytest.mark.parametrize("space", ["cosine", "ip", "l2"])
def test_exact_graph_equals_brute_force_with_ties_and_duplicates(space: str) -> None:
    rng = np.random.default_rng(1)
    if space == "cosine":  # unit rows: products round differently per block shape, so no exact ties
        vectors = prepare_vectors(rng.normal(size=(300, 4)), space)
    else:  # small integers: every product is exact, so the many ties are real ties
        vectors = rng.integers(0, 3, (300, 4)).astype(np.float32)
    vectors[7] = vectors[9]
    ids, distances = exact_graph(vectors, 12, space, block_elements=500)  # many small blocks
    expected_ids, expected_distances = brute_force(vectors, 12, space)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(distances, expected_distances, rtol=0, atol=1e-6)
    assert ids.dtype == np.int32 and distances.dtype == np.float32
    assert 7 not in ids[7] and (space == "ip" or 9 in ids[7])  # ip: the largest products win
    check_graph_arrays(ids, distances, 300, "graph", vectors=vectors, space=space)


@pytest.mark.parametrize(("width", "top"), [(40, 4), (3000, 50), (3000, 7), (3000, 2999)])
def test_smallest_sorted_is_a_stable_sort_prefix(width: int, top: int) -> None:
    values = np.random.default_rng(2).integers(0, top, (50, width)).astype(np.float32)  # many ties
    values[3, ::5] = np.inf
    positions, found = smallest_sorted(values, 7)
    np.testing.assert_array_equal(positions, np.argsort(values, axis=1, kind="stable")[:, :7])
    np.testing.assert_array_equal(found, np.take_along_axis(values, positions, axis=1))


def test_k_is_capped_and_small_galleries_work() -> None:
    ids, _distances = exact_graph(np.eye(3, dtype=np.float32), 10, "l2")
    assert ids.shape == (3, 2) and ids.tolist() == [[1, 2], [0, 2], [0, 1]]
    assert exact_graph(np.ones((1, 2), dtype=np.float32), 5, "l2")[0].shape == (1, 0)
    with pytest.raises(ValueError, match="k must be at most"):
        exact_graph(np.eye(3), 10**6, "l2")
    with pytest.raises(ValueError, match="method"):
        build_graph(np.eye(3), 1, "l2", "magic")


def test_inverted_file_pass_finds_nearly_every_neighbour_with_exact_distances() -> None:
    vectors = clustered(6000)
    ids, distances = approximate_graph(vectors, 10, "cosine", cell_size=200, probes=6)
    exact_ids, _ = exact_graph(vectors, 10, "cosine")
    assert graph_recall(ids, exact_ids) >= 0.95
    assert not (ids == np.arange(6000)[:, None]).any()
    check_graph_arrays(ids, distances, 6000, "ivf graph", vectors=vectors, space="cosine", sample=500)
    few, _ = approximate_graph(vectors, 10, "cosine", cell_size=200, probes=1)
    assert graph_recall(few, exact_ids) < graph_recall(ids, exact_ids)  # probes matter
    again, _ = approximate_graph(vectors, 10, "cosine", cell_size=200, probes=6)
    np.testing.assert_array_equal(again, ids)  # deterministic


@pytest.mark.parametrize("space", ["cosine", "l2"])
def test_hnsw_graph_refines_its_candidates_exactly(space: str) -> None:
    vectors = clustered(3000) * (3.0 if space == "l2" else 1.0)
    ids, distances = hnsw_graph(vectors, 10, space)
    exact_ids, exact_distances = exact_graph(vectors, 10, space)
    assert graph_recall(ids, exact_ids) >= 0.95
    check_graph_arrays(ids, distances, 3000, "hnsw graph", vectors=vectors, space=space, sample=300)
    same = (ids == exact_ids).all(axis=1)
    np.testing.assert_allclose(distances[same], exact_distances[same], atol=1e-5)
    assert build_graph(vectors[:50], 3, space, "auto")[2] == "exact"


@pytest.mark.parametrize(
    ("method", "phases"),
    [("exact", [GRAPH_PHASE]), ("ivf", [GRAPH_PHASE]), ("hnsw", [HNSW_BUILD, HNSW_SEARCH])],
)
def test_progress_counts_every_row_once_per_phase_and_changes_nothing(
    method: str, phases: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``on_progress(phase, done, total)`` rises to the row count in each phase, in order."""
    vectors = clustered(3000)
    calls: list[tuple[str, int, int]] = []
    with_progress = build_graph(vectors, 5, "cosine", method, on_progress=lambda *call: calls.append(call))
    assert list(dict.fromkeys(phase for phase, _, _ in calls)) == phases
    for phase in phases:
        done = [d for p, d, t in calls if p == phase and t == 3000]
        assert len(done) == sum(p == phase for p, _, _ in calls)  # the total is the row count
        assert done == sorted(done) and done[0] > 0 and done[-1] == 3000
    if method == "hnsw":
        assert [d for p, d, _ in calls if p == HNSW_BUILD] == [3000]  # added in one call
        exact_ids, _ = exact_graph(vectors, 5, "cosine")
        assert graph_recall(with_progress[0], exact_ids) >= 0.95
    else:  # exact and ivf are deterministic: the same graph as without progress
        plain = build_graph(vectors, 5, "cosine", method)
        np.testing.assert_array_equal(with_progress[0], plain[0])
    rows = np.array([3, 40, 500])
    sample: list[tuple[str, int, int]] = []
    exact_graph(vectors, 5, "cosine", rows=rows, on_progress=lambda *call: sample.append(call))
    assert sample[-1] == (GRAPH_PHASE, 3, 3)
    cells: list[tuple[str, int, int]] = []  # the inverted-file pass proper (more cells than probes)
    approximate_graph(vectors, 5, "cosine", cell_size=200, probes=4, on_progress=lambda *c: cells.append(c))
    assert len(cells) > 4 and cells[-1] == (GRAPH_PHASE, 3000, 3000)


def test_public_function_keeps_the_graph_per_store_state() -> None:
    vectors = clustered(400)
    store = InMemoryImageEmbeddingStore.from_embeddings([f"p{i}" for i in range(400)], vectors)
    ids, _distances = galleria.neighbor_graph(store, 8)
    expected_ids, _ = brute_force(store.embeddings, 8, "cosine")
    np.testing.assert_array_equal(ids, expected_ids)
    smaller, _ = galleria.neighbor_graph(store, 3)
    assert np.shares_memory(smaller, ids)  # the kept graph answers a smaller k
    store.remove_images(["p0"])
    shrunk, _ = galleria.neighbor_graph(store, 8)
    assert shrunk.shape == (399, 8)  # updated for the new gallery (galleria.index.graph_update)
    assert graph_recall(shrunk, brute_force(store.embeddings, 8, "cosine")[0]) >= 0.95
    rebuilt, _ = galleria.neighbor_graph(store, 8, method="exact")  # an updated graph is not exact
    np.testing.assert_array_equal(rebuilt, brute_force(store.embeddings, 8, "cosine")[0])
    with pytest.raises(TypeError, match="store must be"):
        galleria.neighbor_graph("store", 3)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ STORE.graph


@pytest.fixture
def saved(tmp_path: Path) -> tuple[InMemoryImageEmbeddingStore, Path]:
    file = tmp_path / "s.safetensors"
    store = InMemoryImageEmbeddingStore.from_embeddings([f"p{i}" for i in range(300)], clustered(300))
    store.save_to_disk(file)
    return InMemoryImageEmbeddingStore.load_from_disk(file), file


def test_graph_file_is_written_once_reused_and_never_rewritten_unchanged(saved: tuple) -> None:
    store, file = saved
    ids, _ = graph_module.neighbor_graph(store, 6, store_file=file)
    side = Path(graph_file_for(file))
    assert read_graph_header(side)["k"] == 6 and read_graph_header(side)["n"] == 300
    stamp = side.stat().st_mtime_ns
    assert save_neighbor_graph(store, file) is False  # unchanged: not rewritten
    store.save_to_disk(file)  # saving the store leaves the graph file alone, and it stays valid
    assert side.stat().st_mtime_ns == stamp
    fresh = InMemoryImageEmbeddingStore.load_from_disk(file)
    loaded = read_graph_file(side, fresh)
    assert loaded is not None
    np.testing.assert_array_equal(loaded.ids, ids)
    again, _ = graph_module.neighbor_graph(fresh, 6, store_file=file)
    np.testing.assert_array_equal(again, ids)


def test_graph_of_another_state_is_ignored_with_a_warning_and_rebuilt(saved: tuple) -> None:
    store, file = saved
    graph_module.neighbor_graph(store, 5, store_file=file)
    other = InMemoryImageEmbeddingStore.from_embeddings([f"p{i}" for i in range(300)], clustered(300, seed=5))
    with pytest.warns(GraphStateWarning, match="another state"):
        assert read_graph_file(graph_file_for(file), other) is None
    with pytest.warns(GraphStateWarning):
        ids, _ = graph_module.neighbor_graph(other, 5, store_file=file)
    np.testing.assert_array_equal(ids, brute_force(other.embeddings, 5, "cosine")[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_graph_file(graph_file_for(file), other) is not None  # rewritten for the new state


def _rewrite(side: Path, change) -> None:  # type: ignore[no-untyped-def]
    data = side.read_bytes()
    (length,) = struct.unpack("<I", data[16:20])
    header = json.loads(data[20 : 20 + length])
    count, k = header["n"], header["k"]
    body = data[20 + length :]
    ids = np.frombuffer(body[: 4 * count * k], dtype="<i4").reshape(count, k).copy()
    distances = np.frombuffer(body[4 * count * k :], dtype="<f4").reshape(count, k).copy()
    header, ids, distances = change(header, ids, distances)
    import hashlib

    payload = ids.astype("<i4").tobytes() + distances.astype("<f4").tobytes()
    header["sha256"] = hashlib.sha256(payload).hexdigest()
    encoded = json.dumps(header).encode()
    side.write_bytes(data[:16] + struct.pack("<I", len(encoded)) + encoded + payload)


def _swap_first_two(h, i, d):  # type: ignore[no-untyped-def]
    i[:, [0, 1]] = i[:, [1, 0]]
    d[:, [0, 1]] = d[:, [1, 0]]
    return h, i, d


def _self_neighbour(h, i, d):  # type: ignore[no-untyped-def]
    i[3, 0] = 3
    return h, i, d


def _out_of_range(h, i, d):  # type: ignore[no-untyped-def]
    i[3, 0] = 10**6
    return h, i, d


def _wrong_distances(h, i, d):  # type: ignore[no-untyped-def]
    return h, i, d * 0.5


def _repeated(h, i, d):  # type: ignore[no-untyped-def]
    i[:, 1] = i[:, 0]
    d[:, 1] = d[:, 0]
    return h, i, d


def _nan(h, i, d):  # type: ignore[no-untyped-def]
    d[0, 0] = np.nan
    return h, i, d


def _more_items(h, i, d):  # type: ignore[no-untyped-def]
    h["n"] = 10**9
    return h, i, d


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_swap_first_two, "sorted by distance"),
        (_self_neighbour, "its own neighbours"),
        (_out_of_range, r"must lie in \[0, 300\)"),
        (_wrong_distances, "do not match the store's vectors"),
        (_repeated, "sorted by distance|listed twice"),
        (_nan, "finite"),
        (_more_items, "1000000000 items recorded"),
    ],
)
def test_a_damaged_or_forged_graph_file_is_refused(saved: tuple, change, problem: str) -> None:  # type: ignore[no-untyped-def]
    store, file = saved
    graph_module.neighbor_graph(store, 5, store_file=file)
    side = Path(graph_file_for(file))
    _rewrite(side, change)
    fresh = InMemoryImageEmbeddingStore.load_from_disk(file)
    with pytest.raises(ValueError, match=problem) as raised:
        read_graph_file(side, fresh)
    assert "s.safetensors.graph" in str(raised.value)


def test_graph_file_size_and_bytes_are_checked(saved: tuple) -> None:
    store, file = saved
    graph_module.neighbor_graph(store, 5, store_file=file)
    side = Path(graph_file_for(file))
    data = side.read_bytes()
    side.write_bytes(data + b"\0")
    with pytest.raises(ValueError, match="must be exactly"):
        read_graph_file(side, store)
    side.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ValueError, match="damaged"):
        read_graph_file(side, store)
    side.write_bytes(b"not a graph")
    with pytest.raises(ValueError, match="not a galleria graph file"):
        read_graph_file(side, store)
    side.write_bytes(data[:16] + struct.pack("<I", 1 << 30))
    with pytest.raises(ValueError, match="header of 1073741824 bytes"):
        read_graph_header(side)


# ------------------------------------------------------------------------------ the command line


def test_cli_graph_builds_keeps_reuses_and_info_shows_it(
    saved: tuple, capsys: pytest.CaptureFixture[str]
) -> None:
    from galleria.cli import main

    _, file = saved
    assert main(["graph", str(file), "--k", "7", "--json", "--sample", "100"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["k"] == 7 and figures["items"] == 300 and figures["method"] == "exact"
    assert figures["recall"] == 1.0 and figures["recall_sample"] == 100 and not figures["reused"]
    assert figures["peak_rss_bytes"] > 10 * 2**20 and figures["seconds"] >= 0
    assert main(["graph", str(file), "--k", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reused"] is True  # a kept k=7 graph answers k=5
    assert main(["graph", str(file), "--k", "5"]) == 0
    text = capsys.readouterr().out
    assert "peak RSS" in text and "recall@5:  1.0000 on 300 sampled items" in text
    assert main(["info", str(file), "--json"]) == 0
    graph = json.loads(capsys.readouterr().out)["graph"]
    assert graph["k"] == 7 and graph["current"] is True
    other = InMemoryImageEmbeddingStore.from_embeddings([f"p{i}" for i in range(300)], clustered(300, seed=9))
    other.save_to_disk(file)  # the store changes: the kept graph is of another state
    assert main(["info", str(file)]) == 0
    assert "of another store state" in capsys.readouterr().out
    assert main(["graph", str(file), "--k", "5", "--json", "--sample", "0"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["reused"] is False and "belongs to another state of the store; ignored" in err


def test_a_store_loaded_by_the_cli_reads_its_graph_file_and_never_writes_one(
    saved: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from galleria.cli._store_options import load_store
    from galleria.rerank import DiffusionReranker

    _, file = saved
    args = argparse.Namespace(checkpoint=None, root=None, connect=False)
    store = load_store(args, str(file))
    query = store.embeddings[:1]
    expected = DiffusionReranker(store, k=6).rerank(store.retrieve_by_vector(query, k=20)[0], top_k=5)
    assert not Path(graph_file_for(file)).exists()  # built in memory, not written beside the store
    graph_module.neighbor_graph(InMemoryImageEmbeddingStore.load_from_disk(file), 10, store_file=file)

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the graph was built again")

    monkeypatch.setattr(graph_module, "build_graph", refuse)
    fresh = load_store(args, str(file))
    got = DiffusionReranker(fresh, k=6).rerank(fresh.retrieve_by_vector(query, k=20)[0], top_k=5)
    assert [c.path for c in got] == [c.path for c in expected]  # the kept file answered
