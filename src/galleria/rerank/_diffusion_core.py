"""The numeric core of diffusion re-ranking: parameter checks, the conjugate-gradient solver, the
pool walk and the full probe×gallery walk (pure functions on arrays)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from galleria._deadline import check_deadline
from galleria._params import Param, Space
from galleria._validation import (
    check_fraction,
    check_nonnegative_float,
    check_positive_int,
)
from galleria.vectors import stable_smallest

#: The most conjugate-gradient iterations a setting may ask for (decoupled diffusion's bound too).
MAX_ITERATIONS = 1 << 20
#: The diffusion parameters shared with decoupled diffusion (declared once, here).
WALK_PARAMS: dict[str, Param] = {
    "k": Param(
        "k",
        int,
        50,
        1,
        10_000,
        paper=50,
        cost=True,
        space=Space("int", 3, 100, log=True),
        help="neighbors per item in the kNN graph",
    ),
    "query_k": Param(
        "query_k",
        int,
        10,
        1,
        10_000,
        paper=10,
        cost=True,
        space=Space("int", 1, 30, log=True),
        help="the query's neighbors that start the walk",
    ),
    "alpha": Param(
        "alpha",
        float,
        0.99,
        0.0,
        1.0,
        high_open=True,
        paper=0.99,
        space=Space("float", 0.0, 0.99),  # 0: the adaptive rule's "keep the original order"
        help="weight of the walk against the query's own similarities",
    ),
    "gamma": Param(
        "gamma",
        float,
        3.0,
        0.0,
        1000.0,
        paper=3.0,
        space=Space("float", 1.0, 5.0),
        help="exponent of the edge similarities",
    ),
    "tol": Param("tol", float, 1e-6, 0.0, 1.0, help="conjugate gradient's relative tolerance"),
    "maxiter": Param("maxiter", int, 20, 1, 10_000, cost=True, help="conjugate gradient's iterations"),
}

#: Whether ``k`` counts the item itself (diffusion's; decoupled diffusion's graph always does).
COUNT_SELF = Param("count_self", bool, True, help="whether k counts the item itself")
#: Probes diffused together in the full setting (their CG arrays are (block, G) float64).
PROBE_BLOCK = 256


def check_diffusion_params(
    k: Any, query_k: Any, alpha: Any, gamma: Any, tol: Any, maxiter: Any
) -> tuple[int, int, float, float, float, int]:
    """Validate the diffusion parameters; errors name the parameter and the value.

    ``k``, ``query_k``, ``maxiter`` positive ints (``maxiter`` at most :data:`MAX_ITERATIONS`, as
    decoupled diffusion's: with ``tol`` 0 it is the number of iterations run); ``alpha`` in [0, 1);
    ``gamma`` finite and ≥ 0; ``tol`` finite and ≥ 0.
    """
    neighbours = check_positive_int("k", k)
    query_neighbours = check_positive_int("query_k", query_k)
    weight = check_fraction("alpha", alpha)
    if weight >= 1.0:
        raise ValueError(f"alpha must lie in [0, 1) for the system to be solvable, got {alpha!r}")
    power = check_nonnegative_float("gamma", gamma)
    tolerance = check_nonnegative_float("tol", tol)
    iterations = check_positive_int("maxiter", maxiter)
    if iterations > MAX_ITERATIONS:
        raise ValueError(f"maxiter must be at most {MAX_ITERATIONS}, got {maxiter!r}")
    return neighbours, query_neighbours, weight, power, tolerance, iterations


def graph_neighbors(k: int, count_self: bool) -> int:
    """How many *other* items each item links to for ``k`` (``k - 1`` when ``k`` counts the item)."""
    return k - 1 if count_self else k


class ConjugateGradientResult(NamedTuple):
    """What :func:`solve_conjugate_gradient` answers, one entry per right-hand side (row)."""

    #: (m, n) solutions: each row's iterate with the smallest residual norm.
    solution: np.ndarray
    #: (m,) the iteration that iterate came from (0: the starting zero vector).
    iterations: np.ndarray
    #: (m,) its residual norm relative to ``‖b_i‖`` (0 for a zero right-hand side).
    relative_residual: np.ndarray
    #: (m,) whether the row reached ``tol``.
    converged: np.ndarray


def solve_conjugate_gradient(
    matvec: Callable[[np.ndarray], np.ndarray], b: np.ndarray, *, tol: float, maxiter: int
) -> ConjugateGradientResult:
    """Solve many symmetric positive definite systems at once; row ``i`` of ``b`` is one right-hand side.

    ``matvec`` maps an (m, n) array of row vectors to their products with the system's matrix (each
    row with its own matrix, or all with one). Every row runs plain conjugate gradient from zero with
    its own step sizes, and stops once its residual norm is at most ``tol · ‖b_i‖`` (a zero
    right-hand side gives zero) or after ``maxiter`` iterations. As MATLAB's ``pcg``, each row's
    answer is its iterate with the smallest (recurrence) residual norm — the converged one when it
    converged, else the best seen, which need not be the last: CG's residual is not monotone.

    Examples
    --------
    >>> matrix = np.array([[4.0, 1.0], [1.0, 3.0]])
    >>> result = solve_conjugate_gradient(lambda v: v @ matrix, np.array([[1.0, 2.0]]), tol=1e-12, maxiter=10)
    >>> np.round(result.solution, 6).tolist(), result.iterations.tolist(), result.converged.tolist()
    ([[0.090909, 0.636364]], [2], [True])
    """
    x = np.zeros_like(b)
    residual = b.copy()
    direction = residual.copy()
    squared = np.einsum("ij,ij->i", residual, residual)
    start = squared.copy()
    bound = (tol**2) * squared
    active = squared > bound
    best = x.copy()
    best_squared = squared.copy()
    best_iteration = np.zeros(b.shape[0], dtype=np.int64)
    for iteration in range(1, maxiter + 1):
        if not active.any():
            break
        check_deadline()  # a request of galleria serve past its time limit stops here
        product = matvec(direction)
        curvature = np.einsum("ij,ij->i", direction, product)
        step = np.zeros_like(squared)
        usable = active & (curvature > 0)
        step[usable] = squared[usable] / curvature[usable]
        x += step[:, None] * direction
        residual -= step[:, None] * product
        updated = np.einsum("ij,ij->i", residual, residual)
        improved = usable & (updated < best_squared)
        if improved.any():
            best[improved] = x[improved]
            best_squared[improved] = updated[improved]
            best_iteration[improved] = iteration
        active &= updated > bound
        ratio = np.zeros_like(squared)
        moving = squared > 0
        ratio[moving] = updated[moving] / squared[moving]
        direction = residual + ratio[:, None] * direction
        squared = updated
    relative = np.zeros_like(start)
    np.divide(np.sqrt(best_squared), np.sqrt(start), out=relative, where=start > 0)
    return ConjugateGradientResult(best, best_iteration, relative, best_squared <= bound)


def conjugate_gradient(
    matvec: Callable[[np.ndarray], np.ndarray], b: np.ndarray, *, tol: float, maxiter: int
) -> np.ndarray:
    """:func:`solve_conjugate_gradient`'s solutions alone (each row's smallest-residual iterate).

    Examples
    --------
    >>> matrix = np.array([[4.0, 1.0], [1.0, 3.0]])
    >>> x = conjugate_gradient(lambda v: v @ matrix, np.array([[1.0, 2.0]]), tol=1e-12, maxiter=10)
    >>> np.round(x, 6).tolist()
    [[0.090909, 0.636364]]
    """
    return solve_conjugate_gradient(matvec, b, tol=tol, maxiter=maxiter).solution


def _top_positions(similarities: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest entries along the last axis, ties to the lower position."""
    return stable_smallest(-similarities, k)


def diffusion_pools(
    probe: np.ndarray,
    among: np.ndarray,
    *,
    k: int,
    query_k: int,
    alpha: float,
    gamma: float,
    tol: float,
    maxiter: int,
    count_self: bool = True,
    neighbours: np.ndarray | None = None,
) -> np.ndarray:
    """Diffusion scores ``f`` of ``B`` pools of ``N`` candidates (higher is better).

    Parameters
    ----------
    probe : array (B, N)
        Similarity of each pool's probe to its candidates.
    among : array (B, N, N)
        Similarities among each pool's candidates (the diagonal is ignored).
    k, query_k, alpha, gamma, tol, maxiter, count_self
        As in the module docstring; the ``k - 1`` (or ``k``) other neighbours are capped at
        ``N - 1`` and ``query_k`` at ``N``.
    neighbours : bool array (B, N, N), optional
        ``neighbours[b, i, j]``: candidate ``j`` is among the nearest of ``i`` in a larger graph (the
        gallery's, truncated to the pool); replaces the pool's own k-NN lists (``k`` is then unused).

    Returns
    -------
    numpy.ndarray
        (B, N) float64 scores.
    """
    count, size = probe.shape
    sims = np.array(among, dtype=np.float64)
    diagonal = np.arange(size)
    sims[:, diagonal, diagonal] = -np.inf
    affinity = np.zeros((count, size, size), dtype=np.float64)
    if neighbours is None:
        others = min(graph_neighbors(k, count_self), size - 1)
        member = np.zeros((count, size, size), dtype=bool)
        if others > 0:
            top = _top_positions(sims, others)
            member[np.arange(count)[:, None, None], diagonal[None, :, None], top] = True
    else:
        member = np.array(neighbours, dtype=bool)
        member[:, diagonal, diagonal] = False
    mutual = member & member.transpose(0, 2, 1)
    if mutual.any():
        positive = np.maximum(np.where(mutual, sims, 0.0), 0.0)
        affinity = np.where(mutual, positive**gamma, 0.0)
    degree = affinity.sum(axis=2)
    scale = np.zeros_like(degree)
    np.divide(1.0, np.sqrt(degree), out=scale, where=degree > 0)
    normalised = affinity * scale[:, :, None] * scale[:, None, :]
    query = np.zeros((count, size), dtype=np.float64)
    chosen = _top_positions(np.asarray(probe, dtype=np.float64), min(query_k, size))
    values = np.maximum(np.take_along_axis(np.asarray(probe, dtype=np.float64), chosen, axis=1), 0.0)
    np.put_along_axis(query, chosen, values**gamma, axis=1)

    def matvec(vectors: np.ndarray) -> np.ndarray:
        product: np.ndarray = vectors - alpha * np.matmul(normalised, vectors[:, :, None])[:, :, 0]
        return product

    return conjugate_gradient(matvec, query, tol=tol, maxiter=maxiter)


def gallery_system(
    size: int, neighbours: tuple[np.ndarray, np.ndarray] | None, alpha: float, gamma: float
) -> sp.csr_matrix:
    """``I - α S`` of a gallery of ``size`` items, ``S`` its symmetrically normalised mutual k-NN affinity.

    ``neighbours`` holds every item's nearest other items and their cosine similarities, shape
    (size, m) each (None: no neighbour, ``S = 0``). An edge ``i → j`` weighs ``max(s_ij, 0) ** γ``
    and counts when ``j → i`` is an edge too; the affinity is made exactly symmetric by averaging it
    with its transpose (rounding in the block products cannot break conjugate gradient).
    """
    if neighbours is not None:
        top, values = neighbours
        rows = np.repeat(np.arange(size), top.shape[1])
        weights = np.maximum(values.astype(np.float64).ravel(), 0.0) ** gamma
        directed = sp.csr_matrix((weights, (rows, top.ravel())), shape=(size, size))
        marks = sp.csr_matrix((np.ones(rows.size), (rows, top.ravel())), shape=(size, size))
        mutual = directed.multiply(marks.T).tocsr()
        affinity = ((mutual + mutual.T) * 0.5).tocsr()
    else:
        affinity = sp.csr_matrix((size, size), dtype=np.float64)
    degree = np.asarray(affinity.sum(axis=1)).ravel()
    scale = np.zeros_like(degree)
    np.divide(1.0, np.sqrt(degree), out=scale, where=degree > 0)
    normalised = (sp.diags(scale) @ affinity @ sp.diags(scale)).tocsr()
    return (sp.identity(size, format="csr") - alpha * normalised).tocsr()


def diffuse_probes(
    system: sp.csr_matrix,
    chosen: np.ndarray,
    similarities: np.ndarray,
    gamma: float,
    tol: float,
    maxiter: int,
) -> np.ndarray:
    """``-f`` of every probe (shape (P, G), float64): ``system · f = y`` solved by conjugate gradient.

    Probe ``p``'s ``y`` is ``max(s, 0) ** γ`` on its chosen gallery items ``chosen[p]`` (with their
    similarities ``similarities[p]``) and 0 elsewhere; :data:`PROBE_BLOCK` probes are solved together.
    """
    size = system.shape[0]

    def matvec(vectors: np.ndarray) -> np.ndarray:
        product: np.ndarray = np.ascontiguousarray(np.asarray(system @ vectors.T).T)
        return product

    count = chosen.shape[0]
    result = np.empty((count, size), dtype=np.float64)
    for begin in range(0, count, PROBE_BLOCK):  # bounds the (block, G) CG arrays
        stop = min(count, begin + PROBE_BLOCK)
        query = np.zeros((stop - begin, size), dtype=np.float64)
        values = np.maximum(similarities[begin:stop].astype(np.float64), 0.0) ** gamma
        np.put_along_axis(query, chosen[begin:stop], values, axis=1)
        result[begin:stop] = -conjugate_gradient(matvec, query, tol=tol, maxiter=maxiter)
    return result
