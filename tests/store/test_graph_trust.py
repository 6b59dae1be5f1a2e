"""``STORE.graph`` as an attacker or a broken disk leaves it (issue 34, docs/security.md).

* A forged graph that lists the *true* distances of items that are not the nearest hides every
  near-duplicate group; each verified row must hold its true nearest neighbours, so it is refused.
* Rows are drawn afresh at each read and the seed is printed; ``galleria check --seed`` reruns the same
  rows, ``--full`` verifies every row (a single forged row outside a sample is found).
* A side file that cannot be read or written (FIFO, folder, link to /dev/zero, dangling link,
  read-only folder) is a warning for ``galleria duplicates``, which answers from the graph it
  computed; ``galleria graph`` and ``galleria check`` stay strict.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from galleria import InMemoryImageEmbeddingStore
from galleria.cli import main
from galleria.distances import prepare_vectors
from galleria.index.neighbor_graph import exact_graph
from galleria.store import _graph_file as graph_file_module
from galleria.store import graph as graph_module
from galleria.store.graph import GraphFileWarning, graph_file_for, read_graph_file

K = 6


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A store of 200 items, 13 of them with a near copy, and its valid ``STORE.graph`` (k=6)."""
    rng = np.random.default_rng(11)
    base = rng.normal(size=(187, 16))
    vectors = np.concatenate([base, base[:13] + rng.normal(0, 1e-3, (13, 16))])
    file = tmp_path / "s.safetensors"
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"/g/{i}.png" for i in range(200)], prepare_vectors(vectors, "cosine")
    )
    store.save_to_disk(file)
    graph_module.neighbor_graph(InMemoryImageEmbeddingStore.load_from_disk(file), K, store_file=file)
    return file


def _forge(file: Path, rows: np.ndarray | None = None) -> None:
    """Rewrite ``STORE.graph`` so that ``rows`` (all when None) list their 2nd..(K+1)th nearest items
    at their true distances: every array check passes, the nearest item is hidden."""
    store = InMemoryImageEmbeddingStore.load_from_disk(file)
    vectors = store.embeddings
    ids, distances = exact_graph(vectors, K + 1, store.space)
    forged_ids, forged = ids[:, :K].copy(), distances[:, :K].copy()
    chosen = np.arange(len(store)) if rows is None else rows
    forged_ids[chosen] = ids[chosen, 1:]
    forged[chosen] = distances[chosen, 1:]  # the true distances of the items listed
    graph = graph_module.NeighborGraph(graph_module.graph_state(store), forged_ids, forged, "exact")
    graph_module._write_graph_file(graph_file_for(file), graph)


def _groups(file: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    assert main(["duplicates", str(file), "--json", "--k", str(K)]) == 0
    out, err = capsys.readouterr()
    return len(json.loads(out)["groups"]), err


def test_a_forged_graph_of_true_distances_is_refused(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truth, _ = _groups(saved, capsys)
    assert truth == 13
    _forge(saved)
    assert main(["check", str(saved)]) == 2
    out = capsys.readouterr().out
    assert re.search(r"FAIL graph .*does not list its true neighbour", out), out
    assert re.search(r"rows verified, seed \d+", out)
    with pytest.raises(ValueError, match="true neighbour"):
        read_graph_file(graph_file_for(saved), InMemoryImageEmbeddingStore.load_from_disk(saved))
    found, err = _groups(saved, capsys)  # the forged file is refused, the graph rebuilt (and rewritten)
    assert found == 13 and "ignored and rebuilt" in err
    assert main(["check", str(saved)]) == 0


def test_rows_are_drawn_afresh_the_seed_reruns_them_and_full_sees_every_row(
    saved: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = InMemoryImageEmbeddingStore.load_from_disk(saved)
    seeds = set()
    for _ in range(3):
        graph = read_graph_file(graph_file_for(saved), store)
        assert graph is not None and graph.verified == 64
        seeds.add(graph.seed)
    assert len(seeds) == 3  # drawn afresh
    assert main(["check", str(saved)]) == 0
    printed = re.search(r"64 rows verified \(seed (\d+);", capsys.readouterr().out)
    assert printed is not None
    seed = int(printed.group(1))
    drawn = np.sort(np.random.default_rng(seed).choice(200, size=64, replace=False))
    hidden = int(np.setdiff1d(np.arange(200), drawn)[0])  # a row this seed does not draw
    _forge(saved, np.array([hidden]))
    assert main(["check", str(saved), "--seed", str(seed)]) == 0  # the same rows: the forgery unseen
    assert f"seed {seed};" in capsys.readouterr().out
    assert main(["check", str(saved), "--full"]) == 2
    out = capsys.readouterr().out
    assert f"row {hidden} does not list its true neighbour" in out and "every row verified" in out
    drawn_row = int(drawn[0])
    _forge(saved, np.array([drawn_row]))
    assert main(["check", str(saved), "--seed", str(seed)]) == 2
    assert f"row {drawn_row} does not list" in capsys.readouterr().out


def _fifo(side: Path) -> None:
    os.mkfifo(side)


def _folder(side: Path) -> None:
    side.mkdir()


def _dev_zero(side: Path) -> None:
    side.symlink_to("/dev/zero")


def _dangling(side: Path) -> None:
    side.symlink_to(side.parent / "nowhere" / "x.graph")


UNUSABLE: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo,
    "folder": _folder,
    "dev-zero": _dev_zero,
    "dangling": _dangling,
}


@pytest.mark.parametrize("kind", UNUSABLE)
def test_an_unusable_side_file_is_a_warning_for_duplicates_and_an_error_for_graph_and_check(
    saved: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    truth, _ = _groups(saved, capsys)
    side = Path(graph_file_for(saved))
    side.unlink()
    UNUSABLE[kind](side)
    found, err = _groups(saved, capsys)
    assert found == truth
    assert "s.safetensors.graph" in err and ("cannot be written" in err or "unusable" in err), err
    assert main(["graph", str(saved), "--k", str(K), "--sample", "0"]) == 2
    assert "s.safetensors.graph" in capsys.readouterr().err
    assert main(["check", str(saved)]) == 2
    assert "FAIL graph" in capsys.readouterr().out
    assert os.path.lexists(side) and not side.is_file()  # left as it was


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_store_folder_is_a_warning_for_duplicates(
    saved: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth, _ = _groups(saved, capsys)
    Path(graph_file_for(saved)).unlink()
    folder = saved.parent
    folder.chmod(0o555)
    try:
        with pytest.warns(GraphFileWarning, match="cannot be written"):
            graph_module.neighbor_graph(
                InMemoryImageEmbeddingStore.load_from_disk(saved), K, store_file=saved
            )
        found, err = _groups(saved, capsys)
        assert found == truth and "cannot be written" in err
        assert main(["graph", str(saved), "--k", str(K), "--sample", "0"]) == 2
    finally:
        folder.chmod(0o755)


def test_a_full_disk_is_a_warning_for_duplicates(
    saved: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    truth, _ = _groups(saved, capsys)
    Path(graph_file_for(saved)).unlink()

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(graph_file_module, "atomic_stream", full)
    found, err = _groups(saved, capsys)
    assert found == truth and "cannot be written" in err and "No space left" in err
    assert main(["graph", str(saved), "--k", str(K), "--sample", "0"]) == 2
    assert not os.path.lexists(graph_file_for(saved))
