"""Alpha query expansion (αQE): move a query towards its best matches.

With ``q̂`` and ``v̂ᵢ`` the L2-normalised query and matches, every match is weighted by
``wᵢ = cos(q, vᵢ) ** alpha`` when that cosine is positive and 0 otherwise, and the new query is

    ``normalise(q̂ + Σᵢ wᵢ v̂ᵢ)``

so the query itself weighs 1, ``alpha = 0`` gives every positively similar match weight 1, and a
large ``alpha`` keeps only the closest matches. This is a pure function on vectors; the store
searches once, reads back the matches' vectors, calls it, and searches again with the result.

The expanded query has unit norm (``docs/reranking.md``, "Alpha query expansion"). In the ``cosine``
and ``ip`` spaces of unit vectors that is the natural scale; in an ``l2`` store of vectors with other
norms the second search compares a unit vector with raw vectors, so αQE there is meaningful only for
normalised embeddings.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import numpy as np

from galleria._declare import STAGE, Component
from galleria._params import Param, Space
from galleria.distances import normalize_rows
from galleria.statistics import FIRST_RISE, FIRST_SHARE, GalleryStatistics, read_statistics

__all__ = [
    "EXPANSION",
    "MAX_EXPANSION_ALPHA",
    "STILL_ALPHA",
    "adaptive_expansion",
    "alpha_query_expansion",
    "check_expansion_alpha",
    "fill_expansion",
    "trusts_first_matches",
]

#: Largest αQE exponent accepted. The weights ``cos ** alpha`` are float32: far above this every
#: match but exact duplicates weighs 0 (an α of 1000 already gives a match at cos 0.99 a weight of
#: 4e-5), and an α past float32's range (3.4e38) became infinite and broke every score.
MAX_EXPANSION_ALPHA = 1000.0


#: αQE's exponent, declared once (its range is the one check of :func:`check_expansion_alpha`).
_ALPHA = Param(
    "expansion_alpha",
    float,
    None,
    0.0,
    MAX_EXPANSION_ALPHA,
    paper=3.0,
    optional=True,  # None: the adaptive rule's, read from the gallery
    space=Space("float", 1.0, MAX_EXPANSION_ALPHA, log=True),  # holds the adaptive 3 and 1000
    help="exponent of the match weights (similarity ** alpha)",
    flag="--alpha",
    key="alpha",
    trial="alpha",
)
#: The matches αQE averages into the query, declared once.
_NEIGHBORS = Param(
    "expansion_neighbors",
    int,
    None,
    1,
    10_000,
    paper=50,
    optional=True,  # None: the adaptive rule's, read from the gallery
    cost=True,
    space=Space("int", 1, 50, log=True),
    help="matches averaged into the query",
    flag="--neighbors",
    key="neighbors",
    trial="n",
)


def check_expansion_alpha(name: str, value: Any) -> float:
    """Return ``value`` as a float in ``[0, MAX_EXPANSION_ALPHA]``, else raise naming ``name``.

    The one check of the αQE exponent: the store, :class:`~galleria.evaluation.RetrievalConfig`
    (settings files, the web page) and the command line all call it.

    Examples
    --------
    >>> check_expansion_alpha("alpha", 3)
    3.0
    """
    result: float = _alpha_named(name).check(value)
    return result


@functools.lru_cache(maxsize=64)
def _alpha_named(name: str) -> Param:
    """The declared exponent under the name a caller checks it by (``alpha``, ``aqe_alpha``)."""
    return replace(_ALPHA, name=name, default=_ALPHA.paper, optional=False)


def _as_float_array(name: str, value: Any, ndim: int) -> np.ndarray:
    """``value`` as a float32 array of ``ndim`` dimensions (not checked finite); errors name ``name``."""
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a numeric array, got dtype {array.dtype}")
    if array.ndim != ndim:
        dims = {2: "(q, d)", 3: "(q, m, d)"}[ndim]
        raise ValueError(f"{name} must be a {ndim}-D array {dims}, got shape {array.shape}")
    return array.astype(np.float32, copy=False)


def _check_finite(name: str, array: np.ndarray) -> None:
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must contain only finite values")


def _unit_rows(array: np.ndarray) -> np.ndarray:
    """L2-normalise along the last axis, scaling by the largest entry first so tiny rows don't underflow."""
    scale = np.max(np.abs(array), axis=-1, keepdims=True)
    scaled = np.divide(array, scale, out=np.zeros_like(array), where=scale > 0)
    return normalize_rows(scaled)


def alpha_query_expansion(
    queries: np.ndarray,
    neighbor_vectors: np.ndarray,
    *,
    alpha: float,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """Expand a batch of queries with their retrieved neighbours (αQE).

    Parameters
    ----------
    queries : array of shape (q, d)
        The query vectors (any scale; they are L2-normalised here).
    neighbor_vectors : array of shape (q, m, d)
        For every query, the vectors of its ``m`` best matches (any scale; normalised here).
        Queries with fewer matches than others are padded up to ``m`` and the padding is
        marked as invalid in ``mask``.
    alpha : float
        The exponent, finite and ≥ 0.
    mask : bool array of shape (q, m), optional
        True where ``neighbor_vectors[i, j]`` is a real match, False for padding (whose values
        are ignored, whatever they are). By default every entry is a real match.

    Returns
    -------
    numpy.ndarray
        The (q, d) float32 expanded queries, each of unit L2 norm (a query that is zero and has no
        positively similar match stays zero).

    Raises
    ------
    TypeError
        If an array is not numeric or ``alpha`` is not a real number.
    ValueError
        If shapes disagree, values are not finite, or ``alpha`` is negative or not finite.

    Examples
    --------
    >>> import numpy as np
    >>> q = np.array([[1.0, 0.0]])
    >>> matches = np.array([[[1.0, 1.0], [-1.0, 0.0]]])   # one at 45 degrees, one opposite
    >>> out = alpha_query_expansion(q, matches, alpha=0.0)
    >>> [round(float(x), 4) for x in out[0]]                # the opposite match weighs 0
    [0.9239, 0.3827]
    """
    alpha_value = check_expansion_alpha("alpha", alpha)
    query_array = _as_float_array("queries", queries, 2)
    _check_finite("queries", query_array)
    neighbors = _as_float_array("neighbor_vectors", neighbor_vectors, 3)
    q, m, d = neighbors.shape
    if q != query_array.shape[0] or d != query_array.shape[1]:
        raise ValueError(
            f"neighbor_vectors of shape {neighbors.shape} do not match queries of shape {query_array.shape}"
        )
    if mask is None:
        valid = np.ones((q, m), dtype=bool)
    else:
        valid = np.asarray(mask)
        if valid.dtype != np.bool_:
            raise TypeError(f"mask must be a boolean array, got dtype {valid.dtype}")
        if valid.shape != (q, m):
            raise ValueError(f"mask must have shape {(q, m)}, got {valid.shape}")
    # Padding may hold any number (even NaN); zero it before checking the real matches.
    neighbor_array = np.where(valid[:, :, None], neighbors, np.float32(0))
    _check_finite("neighbor_vectors", neighbor_array)

    unit_queries = _unit_rows(query_array)
    unit_neighbors = _unit_rows(neighbor_array)
    cosines = np.einsum("qd,qmd->qm", unit_queries, unit_neighbors)
    positive = valid & (cosines > 0)
    weights = np.zeros_like(cosines)
    # Rounding can put a cosine a hair above 1; clipped, no weight exceeds the query's own.
    weights[positive] = np.power(np.minimum(cosines[positive], 1.0), np.float32(alpha_value))
    expanded = unit_queries + np.einsum("qm,qmd->qd", weights, unit_neighbors)
    return _unit_rows(expanded)


#: αQE's exponent where a gallery's nearest matches cannot be trusted: a match then weighs
#: ``cos ** 1000`` (0.37 at cos 0.999, 4e-5 at 0.99), so only a near copy moves the query.
STILL_ALPHA = MAX_EXPANSION_ALPHA


def adaptive_expansion(stats: GalleryStatistics, *, reranked: bool = False) -> dict[str, Any]:
    """αQE's parameters read from a gallery's statistics: ``α = 3`` and two matches where an item's
    first neighbours are mostly reciprocal; else one match at ``α =`` :data:`STILL_ALPHA`, which keeps
    the query where it is unless its match is a near copy.

    Two matches at ``α = 3``: the first result cannot be overtaken by the second (its weight is no
    smaller). Where fewer than :data:`~galleria.statistics.FIRST_SHARE` of an item's first five
    neighbours are mutual (or the gallery shows no structure at all), the first match is too often of
    another class: pulling the query towards it lowered mAP@100 on the corpus's fitting galleries
    (Lite0 on the digits, pixels on the stamps; ``benchmarks/suites/bench_defaults.py``).

    ``reranked``: a re-ranker follows (``--expand --rerank``). It reads the expanded query's own
    neighbourhood, so the query expands by its first match alone (``n = 1``): with two, the second
    match's class pulled the re-ranked first result away (Recall@1 −0.014 on the pixel digits and
    −0.019 on the Lite0 stamps, where one match kept it and nearly all of the lift).

    Examples
    --------
    >>> from galleria.statistics import GalleryStatistics
    >>> adaptive_expansion(GalleryStatistics(2, 0, (), (), ()))
    {'expansion_alpha': 1000.0, 'expansion_neighbors': 1}
    >>> adaptive_expansion(GalleryStatistics(1000, 200, (5, 10, 20), (0.5, 0.55, 0.6), (3, 6, 13)))
    {'expansion_alpha': 3.0, 'expansion_neighbors': 2}
    >>> stats = GalleryStatistics(1000, 200, (5, 10, 20), (0.5, 0.55, 0.6), (3, 6, 13))
    >>> adaptive_expansion(stats, reranked=True)["expansion_neighbors"]
    1
    """
    if trusts_first_matches(stats):
        return {"expansion_alpha": 3.0, "expansion_neighbors": 1 if reranked else 2}
    return {"expansion_alpha": STILL_ALPHA, "expansion_neighbors": 1}


def fill_expansion(rule: dict[str, Any], alpha: float | None, neighbors: int | None) -> tuple[float, int]:
    """αQE's values with those left out (None) taken from ``rule`` (:func:`adaptive_expansion`'s).

    A neighbour count given without an exponent asks for an expansion: where the rule keeps the query
    still (α :data:`STILL_ALPHA`), the exponent is then the rule's expanding one, 3.

    Examples
    --------
    >>> fill_expansion({"expansion_alpha": STILL_ALPHA, "expansion_neighbors": 1}, None, 3)
    (3.0, 3)
    >>> fill_expansion({"expansion_alpha": 3.0, "expansion_neighbors": 2}, None, None)
    (3.0, 2)
    """
    if alpha is None:
        alpha = rule["expansion_alpha"]
        if neighbors is not None and alpha == STILL_ALPHA:
            alpha = 3.0
    return float(alpha), int(rule["expansion_neighbors"] if neighbors is None else neighbors)


def trusts_first_matches(stats: GalleryStatistics) -> bool:
    """Whether a gallery's nearest matches may pull a query (or a gallery item) towards them: it shows
    neighbourhood structure, at least :data:`~galleria.statistics.FIRST_SHARE` of an item's first
    five neighbours are mutual, and the share grows by :data:`~galleria.statistics.FIRST_RISE` from the
    first five to the first 20 (classes larger than a few images).

    Examples
    --------
    >>> from galleria.statistics import GalleryStatistics
    >>> trusts_first_matches(GalleryStatistics(1000, 200, (5, 10, 20), (0.55, 0.6, 0.62), (3, 6, 13)))
    True
    >>> trusts_first_matches(GalleryStatistics(1000, 200, (5, 10, 20), (0.57, 0.57, 0.57), (3, 6, 11)))
    False
    """
    reading = read_statistics(stats)
    return not reading.flat and reading.first >= FIRST_SHARE and reading.rise >= FIRST_RISE


#: αQE as a stage of the retrieval path, declared as a method is: its parameters (ranges, the paper
#: preset α 3, n 50 of Radenović et al., the tuner's spaces) and its adaptive rule
#: (:func:`adaptive_expansion`). :meth:`~galleria._declare.Component.resolve` gives its values.
EXPANSION = Component(
    kind=STAGE,
    name="aqe",
    label="αQE",
    summary="alpha query expansion (Radenović et al.): the query averaged with its first matches",
    params=(_ALPHA, _NEIGHBORS),
    build=alpha_query_expansion,
    adaptive=adaptive_expansion,
)
