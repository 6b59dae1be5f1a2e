"""The IVF-PQ build's bounded training: exact 1-D k-means codebooks, the plateau stop of the probe
search, and a faster build that trains codes no worse than faiss's own settings."""

from __future__ import annotations

import numpy as np
import pytest

from galleria.index import IvfPqIndex
from galleria.index._ivfpq_build import tune_probes
from galleria.index._ivfpq_train import FAISS_DEFAULT_BUDGET, TrainingBudget, scalar_codebooks


def lloyd_1d_oracle(values: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, float]:
    """One literal Lloyd step in one dimension: nearest centroid by brute force, then the means."""
    nearest = np.abs(values[:, None] - centres[None, :]).argmin(axis=1)
    moved = centres.copy()
    for number in range(centres.size):
        if (nearest == number).any():
            moved[number] = values[nearest == number].mean()
    error = float(((values - centres[nearest]) ** 2).mean())
    return moved, error


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scalar_codebooks_are_lloyd_fixed_points_better_than_quantiles(seed: int) -> None:
    rng = np.random.default_rng(seed)
    columns = np.stack(
        [rng.normal(size=600), rng.standard_t(3, size=600), rng.integers(0, 5, size=600) * 1.0], axis=1
    ).astype(np.float32)
    books = scalar_codebooks(columns, 16, 1_000)
    assert books.shape == (3, 16) and books.dtype == np.float32
    for column, book in zip(columns.T.astype(np.float64), books.astype(np.float64), strict=True):
        assert (np.diff(book) >= 0).all()
        moved, error = lloyd_1d_oracle(column, book)
        np.testing.assert_allclose(moved, book, rtol=0, atol=1e-5)  # converged: a fixed point
        start = np.quantile(column, (np.arange(16) + 0.5) / 16)
        assert error <= lloyd_1d_oracle(column, start)[1] + 1e-9
    # Five distinct values and 16 levels: every value gets a centroid of its own (error 0).
    assert lloyd_1d_oracle(columns[:, 2].astype(np.float64), books[2].astype(np.float64))[1] == 0


def test_empty_intervals_are_split_into_the_widest_cluster() -> None:
    column = np.array([[0.0], [0.1], [0.2], [5.0], [5.2], [9.0]], dtype=np.float32)
    np.testing.assert_allclose(scalar_codebooks(column, 3, 10)[0], [0.1, 5.1, 9.0], atol=1e-6)


def test_probe_search_stops_on_the_recall_plateau() -> None:
    curve = {1: 0.6, 2: 0.8, 4: 0.85, 8: 0.8505, 16: 0.851, 32: 0.99, 64: 0.99}
    calls: list[int] = []

    def recall(probes: int) -> float:
        calls.append(probes)
        return curve[probes]

    assert tune_probes(recall, 64, 0.9) == (4, 0.85) and calls == [1, 2, 4, 8]
    calls.clear()
    # Without the stop every power of two is tried (and the target found past the flat stretch).
    assert tune_probes(recall, 64, 0.9, stop_at_plateau=False) == (32, 0.99)
    assert calls == [1, 2, 4, 8, 16, 32]
    assert tune_probes(curve.__getitem__, 64, 0.7) == (2, 0.8)


def reconstruction_error(index: IvfPqIndex, data: np.ndarray) -> float:
    return float(((index.reconstruct(np.arange(len(data))) - data) ** 2).sum(axis=1).mean())


@pytest.mark.parametrize("subquantizers", [16, 8])
def test_bounded_training_codes_are_no_worse_than_faiss_defaults(subquantizers: int) -> None:
    rng = np.random.default_rng(3)
    data = rng.normal(size=(40, 16))[rng.integers(0, 40, 8_000)] + 0.3 * rng.normal(size=(8_000, 16))
    data = data.astype(np.float32)
    errors = {}
    for name, budget in {"faiss": FAISS_DEFAULT_BUDGET, "bounded": TrainingBudget()}.items():
        index = IvfPqIndex("l2", lists=64, subquantizers=subquantizers, probe_lists=8, num_threads=1)
        index.training_budget = budget
        index.add(data)
        assert set(index.build_seconds) >= {"coarse k-means", "PQ codebooks", "encoding"}
        errors[name] = reconstruction_error(index, data)
    assert errors["bounded"] <= 1.05 * errors["faiss"]


def test_an_index_read_back_encodes_new_rows_like_the_trained_one() -> None:
    from galleria.index import index_from_bytes

    rng = np.random.default_rng(4)
    data = rng.normal(size=(3_000, 8)).astype(np.float32)
    index = IvfPqIndex("l2", lists=16, probe_lists=16, num_threads=1)  # 8 one-dimensional sub-vectors
    index.add(data[:2_000])
    copy = index_from_bytes("ivfpq", index.to_bytes())
    assert isinstance(copy, IvfPqIndex)
    index.add(data[2_000:])
    copy.add(data[2_000:])
    np.testing.assert_array_equal(copy.reconstruct(np.arange(3_000)), index.reconstruct(np.arange(3_000)))


def test_a_large_add_encodes_the_same_shards_on_every_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of two shards and a tail is encoded, in this process, as the shards the Ray tasks and the
    worker processes take (one OpenMP thread each); the bytes do not depend on the thread count."""
    import faiss

    from galleria.index import _ivfpq_build

    count = 2 * _ivfpq_build.SHARD_ROWS + 10_000
    vectors = np.random.default_rng(3).normal(size=(count, 16)).astype(np.float32)
    encoded: list[tuple[int, int]] = []
    original = _ivfpq_build._add_shard

    def spy(trained: bytes, part: np.ndarray, first_id: int) -> bytes:
        encoded.append((first_id, first_id + part.shape[0]))
        return original(trained, part, first_id)

    monkeypatch.setattr(_ivfpq_build, "_add_shard", spy)
    built = {}
    for threads in (1, 2):
        index = IvfPqIndex("l2", lists=32, subquantizers=4, bits=8, probe_lists=8, num_threads=threads)
        index.add(vectors)
        built[threads] = bytes(faiss.serialize_index(index.faiss_index))
    shards = _ivfpq_build.shard_bounds(count, _ivfpq_build.SHARD_ROWS)
    assert len(shards) == 2 and sorted(encoded) == sorted(shards * 2)
    assert built[1] == built[2]
    whole = IvfPqIndex("l2", lists=32, subquantizers=4, bits=8, probe_lists=8, num_threads=2)
    whole.add(vectors[:1000])  # below a shard's threshold: one faiss add on the index's threads
    assert len(encoded) == 4
