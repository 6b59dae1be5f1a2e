"""Tests of the diffusion, GNN and DBA + αQE re-rankers against literal, slow transcriptions of the formulas.

Every oracle below is written element by element with Python loops and ``sorted`` (ties broken by
position, as pinned), from the formulas in each module's docstring; hypothesis draws similarities on a
coarse grid so that ties are frequent.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _support.extras import need
from galleria.rerank import (
    RERANK_METHODS,
    DBAReranker,
    DiffusionReranker,
    GnnReranker,
    KReciprocalReranker,
    Reranker,
    augment_store,
    database_augmentation,
    dba_aqe_rerank_features,
    diffusion_rerank_features,
    gnn_rerank_features,
    make_reranker,
)
from galleria.rerank.dba import aqe_pools
from galleria.rerank.diffusion import conjugate_gradient, diffusion_pools
from galleria.rerank.gnn import gnn_pools
from galleria.store import Candidate, InMemoryImageEmbeddingStore

# --------------------------------------------------------------------------------------------- oracles


def _ranked(row: list[float], exclude: int | None = None) -> list[int]:
    """Positions by descending value, ties to the lower position."""
    return sorted((j for j in range(len(row)) if j != exclude), key=lambda j: (-row[j], j))


def _knn_lists(among: list[list[float]], k: int, count_self: bool) -> list[set[int]]:
    """Each item's k nearest as the authors count them: the item itself first, then the others
    (ties to the lower position); the item is then dropped (no self-loops). ``count_self=False``:
    k others."""
    n = len(among)
    lists = []
    for i in range(n):
        ranked = [i, *_ranked(among[i], exclude=i)] if count_self else _ranked(among[i], exclude=i)
        lists.append(set(ranked[:k]) - {i})
    return lists


def oracle_affinity(among: list[list[float]], near: list[set[int]], gamma: float) -> list[list[float]]:
    n = len(among)
    a = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j and j in near[i] and i in near[j]:
                a[i][j] = max(among[i][j], 0.0) ** gamma
    return a


def oracle_solve(probe: list[float], a: list[list[float]], query_k: int, alpha: float, gamma: float):
    n = len(probe)
    degree = [sum(row) for row in a]
    s = [
        [
            a[i][j] / math.sqrt(degree[i] * degree[j]) if degree[i] > 0 and degree[j] > 0 else 0.0
            for j in range(n)
        ]
        for i in range(n)
    ]
    y = [0.0] * n
    for j in _ranked(probe)[: min(query_k, n)]:
        y[j] = max(probe[j], 0.0) ** gamma
    system = np.array([[(1.0 if i == j else 0.0) - alpha * s[i][j] for j in range(n)] for i in range(n)])
    return np.linalg.solve(system, np.array(y))


def oracle_diffusion(
    probe: list[float],
    among: list[list[float]],
    k: int,
    query_k: int,
    alpha: float,
    gamma: float,
    count_self: bool = True,
):
    a = oracle_affinity(among, _knn_lists(among, k, count_self), gamma)
    return oracle_solve(probe, a, query_k, alpha, gamma)


def oracle_gnn(sims: list[list[float]], k1: int, k2: int) -> np.ndarray:
    n = len(sims)
    k1, k2 = min(k1, n), min(k2, min(k1, n))
    ranks = [_ranked(sims[i]) for i in range(n)]
    a = [[1.0 if j in ranks[i][:k1] else 0.0 for j in range(n)] for i in range(n)]
    if k2 == 1:
        return np.array(a)
    w = [[sims[i][j] ** 2 if j in ranks[i][:k2] else 0.0 for j in range(n)] for i in range(n)]
    for _ in range(2):
        a = [[a[i][j] + a[j][i] for j in range(n)] for i in range(n)]
        a = [[sum(w[i][m] * a[m][j] for m in range(n)) for j in range(n)] for i in range(n)]
        norms = [math.sqrt(sum(v * v for v in row)) for row in a]
        a = [[v / norms[i] if norms[i] > 0 else v for v in row] for i, row in enumerate(a)]
    return np.array(a)


def _unit(v: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v] if norm > 0 else list(v)


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def oracle_dba(vectors: list[list[float]], neighbors: int, alpha: float) -> np.ndarray:
    unit = [_unit(v) for v in vectors]
    out = []
    for i, x in enumerate(unit):
        cosines = [_dot(x, other) for other in unit]
        acc = list(x)
        for j in _ranked(cosines, exclude=i)[:neighbors]:
            if cosines[j] > 0:
                weight = cosines[j] ** alpha
                acc = [p + weight * q for p, q in zip(acc, unit[j], strict=True)]
        out.append(_unit(acc))
    return np.array(out)


# --------------------------------------------------------------------------------------------- strategies


@st.composite
def symmetric_pools(draw: Any, max_size: int = 9) -> tuple[np.ndarray, np.ndarray]:
    """A probe row and a symmetric candidate matrix on a grid of eighths (many ties)."""
    n = draw(st.integers(1, max_size))
    grid = st.integers(-8, 8)
    upper = np.array(draw(st.lists(grid, min_size=n * n, max_size=n * n)), dtype=np.float64).reshape(n, n) / 8
    among = np.triu(upper) + np.triu(upper, 1).T
    np.fill_diagonal(among, 1.0)
    probe = np.array(draw(st.lists(grid, min_size=n, max_size=n)), dtype=np.float64) / 8
    return probe, among


# --------------------------------------------------------------------------------------------- diffusion


@given(
    symmetric_pools(),
    st.integers(1, 6),
    st.integers(1, 6),
    st.sampled_from([0.0, 0.5, 0.9, 0.99]),
    st.sampled_from([1.0, 3.0]),
    st.booleans(),
)
def test_diffusion_pools_equal_the_dense_transcription(
    pool: Any, k: int, query_k: int, alpha: float, gamma: float, count_self: bool
) -> None:
    probe, among = pool
    expected = oracle_diffusion(probe.tolist(), among.tolist(), k, query_k, alpha, gamma, count_self)
    got = diffusion_pools(
        probe[None],
        among[None],
        k=k,
        query_k=query_k,
        alpha=alpha,
        gamma=gamma,
        tol=1e-14,
        maxiter=400,
        count_self=count_self,
    )[0]
    np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-9)


def test_diffusion_k_counts_the_item_itself() -> None:
    rng = np.random.default_rng(8)
    gallery, probes = rng.normal(size=(60, 6)), rng.normal(size=(4, 6))
    authors = diffusion_rerank_features(probes, gallery, k=7, query_k=3)
    other_reading = diffusion_rerank_features(probes, gallery, k=6, query_k=3, count_self=False)
    np.testing.assert_array_equal(authors, other_reading)
    assert not np.array_equal(authors, diffusion_rerank_features(probes, gallery, k=7, count_self=False))
    assert DiffusionReranker(_store(), k=1).params()["count_self"] is True
    with pytest.raises(TypeError, match="count_self"):
        DiffusionReranker(_store(), count_self="yes")
    with pytest.raises(ValueError, match="graph"):
        DiffusionReranker(_store(), graph="local")


def oracle_pcg(matrix: np.ndarray, b: np.ndarray, tol: float, maxiter: int) -> tuple[np.ndarray, int]:
    """MATLAB's pcg without a preconditioner, one right-hand side, x0 = 0: the converged iterate, or
    else the iterate of smallest residual norm (x0 included) and its iteration number."""
    n = len(b)
    x = [0.0] * n
    r = [float(v) for v in b]
    normb = math.sqrt(sum(v * v for v in r))
    if normb == 0:
        return np.zeros(n), 0
    xmin, normrmin, imin = list(x), normb, 0
    rho_old, p = None, None
    for it in range(1, maxiter + 1):
        rho = sum(v * v for v in r)
        if p is None:
            p = list(r)
        else:
            beta = rho / rho_old
            p = [r[i] + beta * p[i] for i in range(n)]
        q = [sum(matrix[i][j] * p[j] for j in range(n)) for i in range(n)]
        pq = sum(p[i] * q[i] for i in range(n))
        step = rho / pq
        x = [x[i] + step * p[i] for i in range(n)]
        r = [r[i] - step * q[i] for i in range(n)]
        normr = math.sqrt(sum(v * v for v in r))
        if normr <= tol * normb:
            return np.array(x), it
        if normr < normrmin:
            xmin, normrmin, imin = list(x), normr, it
        rho_old = rho
    return np.array(xmin), imin


def test_conjugate_gradient_answers_the_smallest_residual_iterate_like_pcg() -> None:
    from galleria.rerank.diffusion import solve_conjugate_gradient

    rng = np.random.default_rng(2)
    # An ill-conditioned system (eigenvalues over three decades): CG's residual is not monotone.
    basis, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    matrix = basis @ np.diag(np.logspace(-3, 0, 12)) @ basis.T
    rhs = rng.normal(size=(5, 12))
    rhs[3] = 0.0
    found_non_last = False
    for maxiter in (1, 2, 3, 5, 7, 8):
        result = solve_conjugate_gradient(lambda v: v @ matrix, rhs, tol=1e-10, maxiter=maxiter)
        for row in range(5):
            expected, iteration = oracle_pcg(matrix, rhs[row], 1e-10, maxiter)
            np.testing.assert_allclose(result.solution[row], expected, rtol=1e-6, atol=1e-9)
            assert result.iterations[row] == iteration
            found_non_last |= 0 < iteration < maxiter and not result.converged[row]
        residual = np.linalg.norm(rhs - result.solution @ matrix, axis=1)
        norms = np.linalg.norm(rhs, axis=1)
        np.testing.assert_allclose(
            result.relative_residual[norms > 0], (residual / np.maximum(norms, 1e-300))[norms > 0], rtol=1e-4
        )
    assert found_non_last  # the best iterate was not the last one at least once
    assert not result.solution[3].any() and result.converged[3]


def test_conjugate_gradient_rows_are_independent_and_stop_at_maxiter() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(size=(6, 6))
    matrix = base @ base.T + 6 * np.eye(6)
    rhs = rng.normal(size=(3, 6))
    rhs[1] = 0.0  # a zero right-hand side stays zero
    exact = np.linalg.solve(matrix, rhs.T).T
    got = conjugate_gradient(lambda v: v @ matrix, rhs, tol=1e-12, maxiter=100)
    np.testing.assert_allclose(got, exact, atol=1e-9)
    assert not got[1].any()
    one = conjugate_gradient(lambda v: v @ matrix, rhs, tol=0.0, maxiter=1)
    step = (rhs[0] @ rhs[0]) / (rhs[0] @ matrix @ rhs[0])
    np.testing.assert_allclose(one[0], step * rhs[0])


def test_pool_diffusion_truncates_the_gallery_graph() -> None:
    rng = np.random.default_rng(4)
    gallery = rng.normal(size=(50, 5))
    unit = gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
    store = InMemoryImageEmbeddingStore.from_embeddings([f"g{i}" for i in range(50)], gallery)
    sims = (unit @ unit.T).tolist()
    params = {"k": 6, "query_k": 3, "alpha": 0.9, "gamma": 3.0, "tol": 1e-13, "maxiter": 400}
    near = _knn_lists(sims, 6, True)  # the gallery's graph, once
    reranker = DiffusionReranker(store, **params)
    for seed in range(3):
        probe = rng.normal(size=(1, 5))
        candidates = store.retrieve_by_vector(probe, k=15 + 5 * seed)[0]
        pool = [int(c.path[1:]) for c in candidates]
        # The authors' truncation: the gallery graph's rows and columns of the pool, normalised anew.
        truncated = [{pool.index(j) for j in near[i] if j in pool} for i in pool]
        among = [[sims[i][j] for j in pool] for i in pool]
        probe_sims = [1.0 - c.score for c in candidates]
        expected = oracle_solve(probe_sims, oracle_affinity(among, truncated, 3.0), 3, 0.9, 3.0)
        got = {c.path: -c.score for c in reranker.rerank(candidates, top_k=len(pool))}
        np.testing.assert_allclose([got[f"g{i}"] for i in pool], expected, rtol=1e-5, atol=1e-7)
        # graph="pool": the candidates' own k-NN graph, as before.
        local = DiffusionReranker(store, **params, graph="pool").rerank(candidates, top_k=len(pool))
        own = oracle_diffusion(probe_sims, among, 6, 3, 0.9, 3.0)
        by_path = {c.path: -c.score for c in local}
        np.testing.assert_allclose([by_path[f"g{i}"] for i in pool], own, rtol=1e-5, atol=1e-7)


def test_the_gallery_graph_is_built_once_per_store_state() -> None:
    from galleria.rerank.diffusion import gallery_graph

    rng = np.random.default_rng(6)
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"g{i}" for i in range(30)], rng.normal(size=(30, 4))
    )
    first = gallery_graph(store, 5)
    assert gallery_graph(store, 5) is first and first.neighbours.shape == (30, 5)
    reranker = DiffusionReranker(store, k=6)
    candidates = store.retrieve_by_vector(rng.normal(size=(1, 4)), k=10)[0]
    reranker.rerank(candidates, top_k=3)
    assert gallery_graph(store, 5) is first  # the re-ranker used the kept graph
    store.remove_images(["g29"])
    second = gallery_graph(store, 5)
    assert second is not first and second.neighbours.shape == (29, 5)
    fresh = InMemoryImageEmbeddingStore.from_embeddings(store.paths, store.embeddings)
    np.testing.assert_array_equal(second.neighbours, gallery_graph(fresh, 5).neighbours)
    kept = [Candidate(c.path, c.score) for c in candidates if c.path != "g29"]
    assert [c.path for c in reranker.rerank(kept, top_k=5)] == [
        c.path for c in DiffusionReranker(fresh, k=6).rerank(kept, top_k=5)
    ]


def test_diffusion_full_equals_the_pool_over_the_whole_gallery() -> None:
    rng = np.random.default_rng(3)
    gallery = rng.normal(size=(40, 8))
    probe = rng.normal(size=(1, 8))
    store = InMemoryImageEmbeddingStore.from_embeddings([f"g{i}" for i in range(40)], gallery)
    params = {"k": 6, "query_k": 4, "alpha": 0.9, "gamma": 3.0, "tol": 1e-12, "maxiter": 300}
    full = diffusion_rerank_features(probe, gallery, **params)[0]
    candidates = store.retrieve_by_vector(probe, k=40)[0]
    reranked = DiffusionReranker(store, **params).rerank(candidates, top_k=40)
    by_path = {c.path: c.score for c in reranked}
    np.testing.assert_allclose([by_path[f"g{i}"] for i in range(40)], full, atol=1e-5)
    assert reranked[0].path == f"g{int(np.argmin(full))}"


# --------------------------------------------------------------------------------------------- GNN


@given(symmetric_pools(max_size=7), st.integers(1, 7), st.integers(1, 7))
def test_gnn_pools_equal_the_dense_transcription(pool: Any, k1: int, k2: int) -> None:
    _, among = pool
    k2 = min(k1, k2)
    expected = oracle_gnn(among.tolist(), k1, k2)
    result = gnn_pools(among[None], k1=k1, k2=k2)[0]
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, expected, atol=1e-6)


def oracle_gnn_distances(probes: np.ndarray, gallery: np.ndarray, k1: int, k2: int, lam: float) -> np.ndarray:
    """The authors' current form, element by element: 1 - ((1 - λ) · A_q · A_g + λ · cos(q, g))."""
    unit = [_unit(list(map(float, v))) for v in np.concatenate([probes, gallery])]
    sims = [[_dot(a, b) for b in unit] for a in unit]
    a = oracle_gnn(sims, k1, k2)
    p = len(probes)
    out = np.empty((p, len(gallery)))
    for q in range(p):
        for g in range(len(gallery)):
            propagated = sum(a[q][m] * a[p + g][m] for m in range(len(unit)))
            out[q, g] = 1.0 - ((1.0 - lam) * propagated + lam * sims[q][p + g])
    return out


@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
def test_gnn_full_and_pool_equal_the_authors_lambda_blend(lam: float) -> None:
    rng = np.random.default_rng(7)
    gallery = rng.normal(size=(25, 5))
    probes = rng.normal(size=(3, 5))
    expected = oracle_gnn_distances(probes, gallery, 6, 3, lam)
    full = gnn_rerank_features(probes, gallery, k1=6, k2=3, lambda_value=lam)
    np.testing.assert_allclose(full, expected, atol=1e-5)
    # The pool: the probe followed by the whole gallery is the same set for one probe.
    store = InMemoryImageEmbeddingStore.from_embeddings([f"g{i}" for i in range(25)], gallery)
    candidates = store.retrieve_by_vector(probes[:1], k=25)[0]
    reranked = GnnReranker(store, k1=6, k2=3, lambda_value=lam).rerank(candidates, top_k=25)
    single = oracle_gnn_distances(probes[:1], gallery, 6, 3, lam)[0]
    by_path = {c.path: c.score for c in reranked}
    np.testing.assert_allclose([by_path[f"g{i}"] for i in range(25)], single, atol=1e-5)


def test_gnn_lambda_orders_the_items_outside_the_two_hop_neighbourhood() -> None:
    rng = np.random.default_rng(3)
    gallery = rng.normal(size=(200, 8))
    probe = rng.normal(size=(1, 8))
    paper = gnn_rerank_features(probe, gallery, k1=5, k2=2, lambda_value=0.0)[0]
    blended = gnn_rerank_features(probe, gallery, k1=5, k2=2)[0]
    untouched = paper == 1.0  # zero propagated similarity: no order among them in the 2020 form
    assert untouched.sum() > 100
    cosines = (probe / np.linalg.norm(probe)) @ (gallery / np.linalg.norm(gallery, axis=1, keepdims=True)).T
    # With the blend those items keep the original order among themselves.
    order = np.argsort(blended[untouched], kind="stable")
    np.testing.assert_array_equal(order, np.argsort(-cosines[0][untouched], kind="stable"))
    with pytest.raises(ValueError, match="lambda_value"):
        GnnReranker(_store(), lambda_value=1.5)
    with pytest.raises(ValueError, match="lambda_value"):
        gnn_rerank_features(probe, gallery, lambda_value=-0.1)


def test_gnn_full_sparse_torch_and_pool_agree() -> None:
    torch = need("torch")
    from galleria.rerank.gnn import _sparse_features, _torch_features

    rng = np.random.default_rng(5)
    gallery = rng.normal(size=(30, 6))
    probes = rng.normal(size=(3, 6))
    sparse = gnn_rerank_features(probes, gallery, k1=8, k2=3)
    on_cpu = gnn_rerank_features(probes, gallery, k1=8, k2=3, device="cpu")  # routed to scipy
    np.testing.assert_array_equal(on_cpu, sparse)
    # The torch (GPU) algorithm itself, run on CPU tensors: the same propagated features.
    features = np.concatenate([probes, gallery]).astype(np.float32)
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    for k1, k2 in ((8, 3), (8, 1), (33, 33)):
        dense = _torch_features(torch.from_numpy(features), k1, k2).numpy()
        expected = _sparse_features(features, k1, k2).toarray()
        np.testing.assert_allclose(dense, expected, atol=1e-5)
    # One probe: the pool re-ranker with the whole gallery as candidates is the same set.
    store = InMemoryImageEmbeddingStore.from_embeddings([f"g{i}" for i in range(30)], gallery)
    candidates = store.retrieve_by_vector(probes[:1], k=30)[0]
    reranked = GnnReranker(store, k1=8, k2=3).rerank(candidates, top_k=30)
    single = gnn_rerank_features(probes[:1], gallery, k1=8, k2=3)[0]
    by_path = {c.path: c.score for c in reranked}
    np.testing.assert_allclose([by_path[f"g{i}"] for i in range(30)], single, atol=1e-5)


def test_gnn_k2_one_skips_propagation() -> None:
    sims = np.array([[[1.0, 0.5, 0.0], [0.5, 1.0, 0.25], [0.0, 0.25, 1.0]]])
    np.testing.assert_array_equal(gnn_pools(sims, k1=2, k2=1)[0], [[1, 1, 0], [1, 1, 0], [0, 1, 1]])


# --------------------------------------------------------------------------------------------- DBA + αQE


#: Base vectors for DBA: distinct ones never tie; repeated rows tie exactly (in float32 and float64 alike).
_BASES = np.random.default_rng(11).normal(size=(5, 4))


@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=9), st.integers(1, 9), st.sampled_from([0.0, 1.0, 3.0])
)
def test_dba_equals_the_transcription_with_ties(rows: list[int], neighbors: int, alpha: float) -> None:
    vectors = _BASES[rows]
    expected = oracle_dba(vectors.tolist(), neighbors, alpha)
    got = database_augmentation(vectors, neighbors=neighbors, alpha=alpha)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_dba_pool_rescoring_equals_a_second_search_of_the_augmented_store() -> None:
    rng = np.random.default_rng(7)
    gallery = rng.normal(size=(50, 10))
    paths = [f"g{i}" for i in range(50)]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, gallery)
    reranker = DBAReranker(store, neighbors=4, alpha=2.0, aqe_neighbors=5, aqe_alpha=1.0)
    augmented = reranker.store
    assert augmented.augmentation == {"method": "dba", "neighbors": 4, "alpha": 2.0}
    assert store.augmentation is None  # the original is untouched
    np.testing.assert_allclose(
        augmented.embeddings, database_augmentation(gallery, neighbors=4, alpha=2.0), atol=1e-6
    )
    queries = rng.normal(size=(4, 10))
    pools = augmented.retrieve_by_vector(queries, k=50)
    reranked = reranker.rerank_batch(pools, top_k=50)
    second = augmented.retrieve_by_vector(
        queries, k=50, query_expansion=True, expansion_alpha=1.0, expansion_neighbors=5
    )
    for got, want in zip(reranked, second, strict=True):
        assert [c.path for c in got] == [c.path for c in want]
        np.testing.assert_allclose([c.score for c in got], [c.score for c in want], atol=1e-5)
    full = dba_aqe_rerank_features(queries, gallery, neighbors=4, alpha=2.0, aqe_neighbors=5, aqe_alpha=1.0)
    for row, want in zip(full, second, strict=True):
        np.testing.assert_allclose(row[[int(c.path[1:]) for c in want]], [c.score for c in want], atol=1e-5)


@pytest.mark.parametrize("method", ["diffusion", "decoupled-diffusion"])
def test_a_diffusion_on_the_augmented_gallery_equals_one_run_on_augment_store(method: str) -> None:
    from galleria.rerank.registry import check_method_params

    rng = np.random.default_rng(11)
    centres = rng.normal(size=(4, 12))
    gallery = np.repeat(centres, 15, axis=0) + 0.6 * rng.normal(size=(60, 12))
    paths = [f"g{i:02d}" for i in range(60)]
    store = InMemoryImageEmbeddingStore.from_embeddings(paths, gallery)
    params = {"k": 6, "query_k": 3, **({"truncation": 30} if method == "decoupled-diffusion" else {})}
    reranker = make_reranker(method, store, **params, dba_neighbors=4, dba_alpha=2.0)
    assert reranker.store.augmentation == {"method": "dba", "neighbors": 4, "alpha": 2.0}
    assert store.augmentation is None  # the original is untouched
    by_hand = make_reranker(method, augment_store(store, neighbors=4, alpha=2.0), **params)
    queries = rng.normal(size=(5, 12))
    pools = reranker.store.retrieve_by_vector(queries, k=40)
    got = reranker.rerank_batch(pools, top_k=40)
    want = by_hand.rerank_batch(by_hand.store.retrieve_by_vector(queries, k=40), top_k=40)
    assert [[(c.path, c.score) for c in pool] for pool in got] == [
        [(c.path, c.score) for c in pool] for pool in want
    ]
    plain = make_reranker(method, store, **params).rerank_batch(store.retrieve_by_vector(queries, k=40), 40)
    assert [[c.path for c in pool] for pool in plain] != [[c.path for c in pool] for pool in got]
    # An augmented store is used as it is when its settings match, refused when they do not.
    assert (
        make_reranker(method, reranker.store, **params, dba_neighbors=4, dba_alpha=2.0).store
        is reranker.store
    )
    with pytest.raises(ValueError, match="augmented with"):
        make_reranker(method, reranker.store, **params, dba_neighbors=3, dba_alpha=2.0)
    # Settings: off (0) is left out, so a setting without DBA reads as it did; bad values are named.
    assert "dba_neighbors" not in check_method_params(method, {"dba_neighbors": 0})
    checked = check_method_params(method, {"dba_neighbors": 5})
    assert (checked["dba_neighbors"], checked["dba_alpha"]) == (5, 3.0)
    with pytest.raises(ValueError, match="dba_neighbors"):
        check_method_params(method, {"dba_neighbors": -1})
    with pytest.raises(TypeError, match="dba_neighbors"):
        check_method_params(method, {"dba_neighbors": "5"})
    with pytest.raises(ValueError, match="dba_alpha"):
        check_method_params(method, {"dba_neighbors": 5, "dba_alpha": -1.0})
    with pytest.raises(TypeError, match="dba_neighbors"):
        make_reranker(method, store, dba_neighbors=2.5)
    l2 = InMemoryImageEmbeddingStore.from_embeddings(paths, gallery, space="l2")
    with pytest.raises(ValueError, match="cosine"):
        make_reranker(method, l2, **params, dba_neighbors=4)
    assert make_reranker(method, l2, **params).store is l2


def test_dba_before_diffusion_round_trips_through_a_settings_file(tmp_path: Path) -> None:
    from galleria.evaluation import RetrievalConfig
    from galleria.tune.settings import read_settings, write_settings

    config = RetrievalConfig(
        "t", rerank=True, rerank_method="diffusion", rerank_params={"k": 9, "dba_neighbors": 5}, pool=1000
    )
    assert "dba_neighbors=5" in config.title and "dba_alpha=3" in config.title
    write_settings(tmp_path / "s.json", config)
    assert read_settings(tmp_path / "s.json").settings() == config.settings()


def test_aqe_pools_without_positive_matches_keeps_the_order() -> None:
    probe = np.array([[-0.5, -0.25]])
    among = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    np.testing.assert_allclose(aqe_pools(probe, among, neighbors=2, alpha=1.0), [[1.5, 1.25]])


def test_augmented_store_round_trips_through_its_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c", "d"], rng.normal(size=(4, 3)))
    augmented = augment_store(store, neighbors=2, alpha=1.5)
    path = tmp_path / "dba.safetensors"
    augmented.save_to_disk(path)
    loaded = InMemoryImageEmbeddingStore.load_from_disk(path)
    assert loaded.augmentation == {"method": "dba", "neighbors": 2, "alpha": 1.5}
    np.testing.assert_array_equal(loaded.embeddings, augmented.embeddings)
    assert DBAReranker(loaded, neighbors=2, alpha=1.5).store is loaded  # not augmented twice
    with pytest.raises(ValueError, match="augmented with"):
        DBAReranker(loaded, neighbors=3, alpha=1.5)
    with pytest.raises(ValueError, match="already augmented"):
        augment_store(loaded)
    store.save_to_disk(tmp_path / "plain.safetensors")
    assert InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "plain.safetensors").augmentation is None


@pytest.mark.parametrize("old", [False, True], ids=["slot", "old-layout"])
def test_a_tampered_augmentation_record_is_refused(tmp_path: Path, old: bool) -> None:
    from _support.store_files import old_layout, read_parts, write_sealed

    store = augment_store(InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2)), neighbors=1)
    path = tmp_path / "s.safetensors"
    store.save_to_disk(path)
    header, tensors = read_parts(path)
    assert header["extensions"]["augmentation"] == store.augmentation and "augmentation" not in header
    if old:  # a file written before the extension slot: the record at the top of the header
        header, tensors = old_layout(header, tensors)
    label = "augmentation" if old else "extensions.augmentation"
    assert (
        InMemoryImageEmbeddingStore.load_from_disk(
            write_sealed(tmp_path / "good.safetensors", header, tensors)
        ).augmentation
        == store.augmentation
    )
    for bad in (
        {"method": "dba", "neighbors": 0, "alpha": 1.0},
        {"method": "x", "neighbors": 1, "alpha": 1.0},
        [1],
    ):
        (header if old else header["extensions"])["augmentation"] = bad  # the tamperer reseals it
        write_sealed(tmp_path / "bad.safetensors", header, tensors)
        with pytest.raises(ValueError, match=f"header key '{label}' must be"):
            InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "bad.safetensors")


def test_dba_needs_a_cosine_store() -> None:
    store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2), space="l2")
    with pytest.raises(ValueError, match="cosine store"):
        DBAReranker(store)


# --------------------------------------------------------------------------------------------- shells


def _store(n: int = 30, d: int = 6, seed: int = 0) -> InMemoryImageEmbeddingStore:
    vectors = np.random.default_rng(seed).normal(size=(n, d))
    return InMemoryImageEmbeddingStore.from_embeddings([f"p{i}" for i in range(n)], vectors)


@pytest.mark.parametrize("method", RERANK_METHODS)
def test_every_method_follows_the_protocol_and_batches_like_single_calls(method: str) -> None:
    store = _store()
    params = {
        "k-reciprocal": {"k1": 6, "k2": 3},
        "diffusion": {"k": 5},
        "gnn": {"k1": 6, "k2": 3},
        "dba": {"neighbors": 3},
        "decoupled-diffusion": {"k": 5, "truncation": 12},
    }.get(method, {})  # a method declared later: its defaults
    reranker = make_reranker(method, store, **params)
    assert isinstance(reranker, Reranker)
    search = reranker.store if isinstance(reranker, DBAReranker) else store
    queries = np.random.default_rng(1).normal(size=(3, 6))
    pools = [search.retrieve_by_vector(q, k=k)[0] for q, k in zip(queries, (12, 20, 12), strict=True)]
    batch = reranker.rerank_batch(pools, top_k=10)
    for pool, got in zip(pools, batch, strict=True):
        single = reranker.rerank(pool, top_k=10)
        assert [c.path for c in got] == [c.path for c in single]
        np.testing.assert_allclose([c.score for c in got], [c.score for c in single], atol=1e-12)
        assert {c.path for c in got} <= {c.path for c in pool} and len(got) == 10
    assert reranker.rerank(pools[0], top_k=100) and len(reranker.rerank(pools[0], top_k=100)) == 12
    assert reranker.rerank_batch([], top_k=3) == []


def test_kreciprocal_satisfies_the_protocol() -> None:
    assert isinstance(KReciprocalReranker(_store()), Reranker)


@pytest.mark.parametrize(
    ("factory", "kwargs", "error", "match"),
    [
        (DiffusionReranker, {"k": 0}, ValueError, r"^DiffusionReranker: k must lie in \[1, 10000\], got 0$"),
        (DiffusionReranker, {"alpha": 1.0}, ValueError, r"alpha must lie in \[0, 1\)"),
        (DiffusionReranker, {"gamma": -1.0}, ValueError, "gamma"),
        (DiffusionReranker, {"query_k": 2.5}, TypeError, "query_k"),
        (DiffusionReranker, {"maxiter": True}, TypeError, "maxiter"),
        (GnnReranker, {"k1": 3, "k2": 4}, ValueError, "k2 must not exceed k1"),
        (GnnReranker, {"k1": "3"}, TypeError, "k1"),
        (DBAReranker, {"neighbors": 0}, ValueError, "neighbors"),
        (DBAReranker, {"aqe_alpha": float("nan")}, ValueError, "aqe_alpha"),
    ],
)
def test_constructor_errors_name_the_parameter(
    factory: Any, kwargs: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        factory(_store(), **kwargs)


@pytest.mark.parametrize("factory", [DiffusionReranker, GnnReranker, DBAReranker])
def test_candidate_errors(factory: Any) -> None:
    reranker = factory(_store())
    with pytest.raises(TypeError, match="InMemoryImageEmbeddingStore"):
        factory("not a store")
    with pytest.raises(ValueError, match="must not be empty"):
        reranker.rerank([], top_k=1)
    with pytest.raises(KeyError):
        reranker.rerank([Candidate("nope", 0.1)], top_k=1)
    with pytest.raises(ValueError, match="more than once"):
        reranker.rerank([Candidate("p1", 0.1), Candidate("p1", 0.2)], top_k=1)
    with pytest.raises(ValueError, match="finite"):
        reranker.rerank([Candidate("p1", float("nan"))], top_k=1)
    with pytest.raises(TypeError, match="top_k"):
        reranker.rerank([Candidate("p1", 0.1)], top_k=1.0)
    with pytest.raises(TypeError, match=r"candidate_lists\[0\]"):
        reranker.rerank_batch([["x"]], top_k=1)


def test_make_reranker_rejects_unknown_methods() -> None:
    with pytest.raises(ValueError, match="method must be one of"):
        make_reranker("magic", _store())


@pytest.mark.parametrize(
    "function", [diffusion_rerank_features, gnn_rerank_features, dba_aqe_rerank_features]
)
def test_full_functions_check_their_features(function: Any) -> None:
    with pytest.raises(ValueError, match="gallery_features has dimension 3"):
        function(np.ones((2, 4)), np.ones((5, 3)))
    with pytest.raises(ValueError, match="finite"):
        function(np.full((2, 4), np.nan), np.ones((5, 4)))
    with pytest.raises(TypeError, match="numeric"):
        function(np.array([["a"]]), np.ones((5, 4)))
    assert function(np.ones((1, 4)), np.eye(4)).shape == (1, 4)


def test_the_registry_sits_above_the_implementations() -> None:
    """No implementation module imports the registry (no import circle); the registry names them all.

    The adaptive rules' shell (adaptive.py) reads the declarations through the registry, inside its
    functions only: it is not an implementation the registry imports at import time."""
    import ast

    import galleria.rerank as package
    from galleria.rerank import registry

    folder = Path(package.__file__).parent
    for path in sorted(folder.glob("*.py")):
        if path.name in ("__init__.py", "registry.py", "adaptive.py"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module is not None
        } | {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        assert "galleria.rerank.registry" not in imported, path.name
    assert registry.RERANK_METHODS == RERANK_METHODS == tuple(registry.METHOD_PARAMS)
    assert package.make_reranker is registry.make_reranker
    assert package.DEFAULT_METHOD == registry.DEFAULT_METHOD == RERANK_METHODS[0]
    for method in RERANK_METHODS:
        defaults = registry.check_method_params(method, {})
        optional = registry._PREPARE_PARAMS if method in registry.AUGMENTABLE_METHODS else ()
        assert tuple(defaults) + optional == registry.METHOD_PARAMS[method]  # no DBA unless asked
        assert type(make_reranker(method, _store(), **defaults)).__name__.endswith("Reranker")
