"""Decoupled diffusion on features: the offline part over a gallery and the full probe×gallery setting.

See :mod:`galleria.rerank.decoupled` for the method (both are importable from there too).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from galleria.rerank._decoupled_core import (
    TRUNCATION,
    _offline_matrix,
    _query_weights,
    check_decoupled_params,
    offline_rows,
)
from galleria.rerank._diffusion_core import WALK_PARAMS
from galleria.rerank.base import check_features, top_similar

__all__ = ["decoupled_diffusion_rerank_features", "offline_diffusion"]


def offline_diffusion(
    gallery_features: Any,
    *,
    k: int = WALK_PARAMS["k"].default,
    truncation: int = TRUNCATION.default,
    alpha: float = WALK_PARAMS["alpha"].default,
    gamma: float = WALK_PARAMS["gamma"].default,
    tol: float = WALK_PARAMS["tol"].default,
    maxiter: int = WALK_PARAMS["maxiter"].default,
) -> tuple[np.ndarray, np.ndarray]:
    """The offline part of decoupled diffusion over a gallery (see :mod:`galleria.rerank.decoupled`).

    Parameters
    ----------
    gallery_features : array_like, shape (n, d)
        The gallery vectors (L2-normalised here; compared by cosine).
    k, truncation, alpha, gamma, tol, maxiter
        Graph neighbours (capped at ``n - 1``), truncation size (capped at ``n``), the diffusion's
        weight and exponent, conjugate gradient's relative tolerance and most iterations.

    Returns
    -------
    (positions, values) : (n, T) int32 and (n, T) float32 arrays
        Row i: item i's truncated list ``T(i)`` (i first) and its diffusion there.

    Raises
    ------
    TypeError, ValueError
        Bad features or a parameter out of range (naming it).

    Examples
    --------
    >>> positions, values = offline_diffusion(np.eye(3)[[0, 0, 1]] + 0.01, k=1, truncation=2)
    >>> positions.tolist()
    [[0, 1], [1, 0], [2, 0]]
    """
    neighbours, size, _, weight, power, tolerance, iterations = check_decoupled_params(
        k, truncation, 1, alpha, gamma, tol, maxiter
    )
    unit = check_features("gallery_features", gallery_features)
    return offline_rows(unit, neighbours, size, weight, power, tolerance, iterations)


def decoupled_diffusion_rerank_features(
    probe_features: Any,
    gallery_features: Any,
    *,
    k: int = WALK_PARAMS["k"].default,
    truncation: int = TRUNCATION.default,
    query_k: int = WALK_PARAMS["query_k"].default,
    alpha: float = WALK_PARAMS["alpha"].default,
    gamma: float = WALK_PARAMS["gamma"].default,
    tol: float = WALK_PARAMS["tol"].default,
    maxiter: int = WALK_PARAMS["maxiter"].default,
) -> np.ndarray:
    """Decoupled-diffusion distances ``-f`` of every probe to every gallery item (lower is closer).

    The offline part is :func:`offline_diffusion` of the gallery; each probe combines the offline
    rows of its ``query_k`` most similar gallery items (cosine, ties to the lower row).

    Returns
    -------
    numpy.ndarray
        (P, G) float64.

    Examples
    --------
    >>> gallery = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> distances = decoupled_diffusion_rerank_features([[1.0, 0.05]], gallery, k=1, query_k=1)
    >>> np.argsort(distances[0], kind="stable")[:2].tolist()
    [0, 1]
    """
    neighbours, size, query_neighbours, weight, power, tolerance, iterations = check_decoupled_params(
        k, truncation, query_k, alpha, gamma, tol, maxiter
    )
    probes = check_features("probe_features", probe_features)
    gallery = check_features("gallery_features", gallery_features, probes.shape[1])
    positions, values = offline_rows(gallery, neighbours, size, weight, power, tolerance, iterations)
    chosen, similarities = top_similar(probes, gallery, min(query_neighbours, gallery.shape[0]))
    rows = np.repeat(np.arange(probes.shape[0]), chosen.shape[1])
    query = sp.csr_matrix(
        (_query_weights(similarities, power).ravel(), (rows, chosen.ravel())),
        shape=(probes.shape[0], gallery.shape[0]),
    )
    offline = _offline_matrix(positions, values.astype(np.float64))
    result: np.ndarray = -np.asarray((query @ offline).toarray(), dtype=np.float64)
    return result
