"""Re-ranking parameters read from the gallery itself: no labels, no paper constants.

The paper values of every re-ranker (k-reciprocal's k1 = 20, k2 = 6, λ = 0.3; αQE's n = 50...)
assume a gallery where each image has a few dozen same-class neighbours. A gallery of clip art with
five images per class, or one dominated by a single class, pulls the expanded queries and the
reciprocal neighbourhoods into the wrong class. This module estimates, from the gallery's vectors
alone, how large and how trustworthy a neighbourhood is, and turns the estimate into parameters:

1. :func:`gallery_statistics` samples up to :data:`SAMPLE` gallery items (seeded), queries each
   against the rest, and counts its *mutual* neighbours among its first k (j is in i's first k and
   i is in j's first k), for k in :data:`PROBE_KS`. Same-class images tend to be mutual neighbours;
   a stray match from a dominant class or a hub rarely is. Per k it keeps the mean share of mutual
   neighbours (how reliable a neighbourhood of size k is) and the median count (how many same-class
   images a query can lean on).
2. :func:`params_from_statistics` maps the statistics to every method's parameters; the rules and
   their reasoning are in its docstring and in ``docs/reranking.md``. In short: every method has
   one parameter that mixes its re-ranking with the original order (λ, the diffusions' α, the
   expansion weights' exponent); it is set from the mutual share, neighbourhood sizes from the
   mutual count, methods that move vectors (DBA, the GNN's aggregation) act only where a majority
   of neighbours are mutual, and a gallery without reciprocal structure gets (nearly) the plain
   order back. The targets, measured on real galleries without labels reaching the rules
   (``benchmarks/suites/bench_real.py``): Recall@1 not lower by more than 0.01, mAP@100 not lower.

Both are pure functions on arrays and records; :func:`default_rerank_params` is the shell that reads
(or computes and caches) the statistics of a store. A store records its statistics when it is built
and writes them into its file; :meth:`GalleryStatistics.from_record` checks such a record (bounded,
every field typed) before anything uses it.
"""

from __future__ import annotations

from typing import Any

from galleria._validation import check_choice
from galleria.expansion import EXPANSION, adaptive_expansion
from galleria.rerank.base import PRESETS, resolved_params
from galleria.rerank.dba import DBA_ALPHA, DBA_OFF_ALPHA  # the rules' constants live with their rules
from galleria.rerank.diffusion import DIFFUSION_ALPHA
from galleria.rerank.gnn import GNN_MINORITY_LAMBDA
from galleria.rerank.registry import reranker_component, reranker_components
from galleria.statistics import (  # moved there (galleria 0.3); re-exported
    MAJORITY,
    MIN_MUTUAL,
    MIN_SHARE,
    PROBE_KS,
    RECORD_VERSION,
    ROOM_SHARE,
    SAMPLE,
    GalleryStatistics,
    Reading,
    clip_round,
    gallery_statistics,
    read_statistics,
)
from galleria.store import store_statistics  # moved there (galleria 0.3); re-exported

__all__ = [
    "AQE_PAPER_PARAMS",
    "DBA_ALPHA",
    "DBA_OFF_ALPHA",
    "DIFFUSION_ALPHA",
    "GNN_MINORITY_LAMBDA",
    "MAJORITY",
    "MIN_MUTUAL",
    "MIN_SHARE",
    "PAPER_PARAMS",
    "PRESETS",
    "PROBE_KS",
    "RECORD_VERSION",
    "ROOM_SHARE",
    "SAMPLE",
    "GalleryStatistics",
    "Reading",
    "clip_round",
    "default_rerank_params",
    "gallery_statistics",
    "paper_params",
    "params_from_statistics",
    "read_statistics",
    "store_statistics",
]

#: The published parameters of αQE and every re-ranker (derived from the declarations on first use).
PAPER_PARAMS: dict[str, dict[str, Any]]
#: αQE's published parameters (from its declaration, :data:`galleria.expansion.EXPANSION`).
AQE_PAPER_PARAMS: dict[str, Any] = EXPANSION.paper_params()


def params_from_statistics(stats: GalleryStatistics) -> dict[str, dict[str, Any]]:
    """Every method's parameters for a gallery with these statistics (keys as :data:`PAPER_PARAMS`).

    With ``m`` the median number of mutual neighbours among a sampled item's first 20 (first 10 or 5
    in a gallery of fewer than 200 or 100 items, where 20 would span more than a tenth of it; every
    neighbourhood size below is then also capped at a tenth of the gallery) (an estimate,
    capped at 20, of how many same-class images a query finds near it) and ``s`` their mean share
    (how far its neighbourhood can be trusted). Each method has one *mixing* parameter that sets how
    much of the original ranking it keeps — k-reciprocal's and the GNN's ``λ``, the diffusions' ``α``,
    DBA's and αQE's weight exponent and neighbour count — and the rules set it from ``s``; the
    neighbourhood sizes follow ``m``. The three guarantees the rules aim at, in order: do nothing
    where the gallery shows no structure; never move the first result on the strength of one
    neighbourhood; spend the rest of the lift only where neighbourhoods are reciprocal.

    * k-reciprocal: ``k1 = clip(2m, 4, 20)`` — the reciprocal sets must be able to hold the
      same-class images but no more: with ``k1`` far above the class size the sets fill with other
      classes, and a dominant class wins (the paper's 20 is reached from ``m = 10``);
      ``k2 = clip(m·s / 2, 2, 6)`` — the local expansion averages ``k2`` neighbours' encodings, so it
      may reach only as far as the *reliable* part of the neighbourhood (``k2 = 1``, no expansion,
      was measured to be worse than 2 on unreliable galleries) — and past the first neighbour only
      where the mutual share rises by :data:`~galleria.statistics.EXPAND_RISE` from the first five to
      the first 20 (large, coherent classes) or is at least :data:`~galleria.statistics.EXPAND_SHARE`;
      elsewhere ``k2 = 2``: the 2nd to 5th neighbours are as
      often of a look-alike class (glyphs: ``o`` and ``O``), and averaging them in moved the first result;
      ``λ = clip(1.45 − 1.4·s, 0.55, 0.9)`` — the less reciprocal the neighbourhoods, the more of the
      original distance is kept; below 0.55 the Jaccard term decides the first result on its own
      (galleria 0.2's floor of 0.3 lost 0.01–0.03 Recall@1 on galleries of small or loose classes).
    * αQE: ``n = 2``, ``α = 3`` where a majority of an item's first five neighbours are mutual, else
      one match at ``α = 1000`` (the query stays where it is unless its match is a near copy); before
      a re-ranker one match (:func:`galleria.expansion.adaptive_expansion`). With at most two matches
      the first result cannot be overtaken by the second (its weight is no smaller).
    * diffusion and decoupled diffusion: ``query_k = 1`` — the query is represented by its best
      match alone; the walk starts there with weight 1 and passes less than that to any other item
      unless it is a hub, so the first result (nearly always) stays where it was and the rest are
      re-ordered by how well they connect to it (the paper's
      ``query_k = 10`` mixes ten sources, and a hub reached from several of them overtakes the
      best match: −0.10 to −0.25 Recall@1 on the stamps and the Lite0 digits);
      ``k = clip(2m, 10, 30)`` graph neighbours (enough to connect a class of ``m`` mutual
      neighbours, few enough not to join classes); ``α = 0.9`` (``0.99`` spreads the walk to the
      graph's hubs; ``0.9`` keeps it near its source), ``γ = 3``; truncation as the paper (1000).
    * GNN: ``k1 = clip(2m, 4, 26)``; at a majority of mutual neighbours (``s ≥`` :data:`MAJORITY`)
      k-reciprocal's ``λ`` and ``k2 = clip(m·s / 2, 1, 7)`` where the share rises as for k-reciprocal's
      ``k2`` (else 2); below a majority the aggregation averages
      neighbours that are mostly not mutual, so it only corrects the original similarity:
      ``k2 = 2``, ``λ =`` :data:`GNN_MINORITY_LAMBDA`.
    * DBA + αQE rewrites the gallery itself, so a wrong neighbourhood moves an item for every query:
      it augments only at a majority of mutual neighbours where αQE trusts the first matches,
      ``neighbors = clip(m·s / 3, 1, 10)`` where the share rises as for k-reciprocal's ``k2`` (else 1)
      with ``α =`` :data:`DBA_ALPHA` (weights ``cos ** 10``: a tenth of a neighbour at cos 0.8), and
      αQE's own expansion (two matches at ``α = 3``); else one neighbour with ``α =``
      :data:`DBA_OFF_ALPHA`, whose weight is negligible unless the neighbour is a near copy, and αQE's
      still expansion (one match at ``α = 1000``).

    Where the gallery shows no neighbourhood structure (fewer than 3 items, ``m <`` :data:`MIN_MUTUAL`
    or ``s <`` :data:`MIN_SHARE`), every method falls back to (nearly) the plain order: k-reciprocal
    and the GNN get ``λ = 1`` (the candidates in their original order), the diffusions ``α = 0``
    (the walk stays at the query's own similarities: the original order), αQE one match at
    ``α = 1000``, DBA the weights of :data:`DBA_OFF_ALPHA`. A default that does nothing is better
    than one that hurts.

    Examples
    --------
    >>> stats = GalleryStatistics(1000, 200, (5, 10, 20), (0.6, 0.62, 0.65), (3.0, 6.0, 14.0))
    >>> params_from_statistics(stats)["k-reciprocal"]
    {'k1': 20, 'k2': 2, 'lambda_value': 0.55}
    >>> rising = GalleryStatistics(1000, 200, (5, 10, 20), (0.55, 0.62, 0.65), (3.0, 6.0, 14.0))
    >>> params_from_statistics(rising)["k-reciprocal"]
    {'k1': 20, 'k2': 5, 'lambda_value': 0.55}
    >>> params_from_statistics(stats)["diffusion"]
    {'k': 28, 'query_k': 1, 'alpha': 0.9, 'gamma': 3.0}
    >>> params_from_statistics(GalleryStatistics(2, 0, (), (), ()))["k-reciprocal"]["lambda_value"]
    1.0
    """
    return {name: _rule(stats, name) for name in ("aqe", *(c.name for c in reranker_components()))}


def _rule(stats: GalleryStatistics, name: str, *, reranked: bool = False) -> dict[str, Any]:
    """The parameters ``name``'s rule (αQE's here, a re-ranker's in its declaration) gives ``stats``;
    a method without a rule keeps its paper values (or its defaults). ``reranked``: αQE before a
    re-ranker (:func:`galleria.expansion.adaptive_expansion`)."""
    if name == "aqe":
        return adaptive_expansion(stats, reranked=reranked)
    component = reranker_component(name)
    if component.adaptive is None:
        return component.paper_params() or component.defaults()
    return dict(component.adaptive(stats))


def default_rerank_params(
    store: Any, method: str = "k-reciprocal", preset: str = "adaptive", *, reranked: bool = False
) -> dict[str, Any]:
    """The default parameters of ``method`` on ``store``: read from its gallery, or the paper's by name.

    This is the one call behind ``search --rerank``, ``evaluate --rerank``, the page's re-rank box
    and ``KReciprocalReranker(store)`` without parameters.

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        A built store (its vectors are sampled once; the result is cached on the store).
    method : str
        ``"k-reciprocal"``, ``"diffusion"``, ``"decoupled-diffusion"``, ``"gnn"``, ``"dba"`` or
        ``"aqe"``.
    preset : {"adaptive", "paper"}
        ``"paper"`` returns :data:`PAPER_PARAMS` for the method.
    reranked : bool
        For ``"aqe"``: a re-ranker follows the expansion (``--expand --rerank``), which then expands
        by the first match alone (:func:`galleria.expansion.adaptive_expansion`).

    Examples
    --------
    >>> from galleria.store import InMemoryImageEmbeddingStore
    >>> import numpy as np
    >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2))
    >>> default_rerank_params(store, preset="paper")
    {'k1': 20, 'k2': 6, 'lambda_value': 0.3}
    """
    name = check_choice("method", method, tuple(paper_params()))
    chosen = check_choice("preset", preset, PRESETS)
    if name == "aqe":
        return EXPANSION.resolve(lambda: store_statistics(store), chosen, reranked=reranked)
    return resolved_params(reranker_component(name), store, chosen)  # this method's rule only


def paper_params() -> dict[str, dict[str, Any]]:
    """The published parameters of αQE and of every re-ranker, by name (from their declarations)."""
    result = {"aqe": dict(AQE_PAPER_PARAMS)}
    for component in reranker_components():
        result[component.name] = component.paper_params() or component.defaults()
    return result


def __getattr__(name: str) -> Any:
    # PAPER_PARAMS is derived from the declarations (plugins included): computed on each use.
    if name == "PAPER_PARAMS":
        return paper_params()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
