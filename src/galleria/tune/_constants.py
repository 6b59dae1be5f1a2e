"""The tuner's names and limits: metrics, methods, guard margin, how many trials are checked."""

from __future__ import annotations

from galleria._plugins import LazyNames
from galleria.rerank.normalise import PREPARATION_PARAMS
from galleria.rerank.registry import (
    AUGMENTABLE_METHODS,
    RERANK_METHODS,
    reranker_components,
)

#: Metrics the tuner can maximise.
METRICS: tuple[str, ...] = ("map@100", "recall@1", "recall@5", "mrr", "map@r")
#: The settings families searched: plain retrieval, αQE alone, and every re-ranking method.
#: (Plugins included: a view computed on first use, so importing the tuner discovers nothing.)
SEARCH_METHODS: LazyNames[str] = LazyNames(lambda: ("plain", "aqe", *RERANK_METHODS))
_DEPTH = 100
#: Largest DBA neighbourhood searched (the neighbour lists are found once per split for it).
_DBA_MAX = 50
#: The families also searched on the DBA-augmented gallery (and over pools up to 1,000).
_AUGMENTED = AUGMENTABLE_METHODS
#: The families that can run after αQE (the expanded query's candidates re-ranked): declared.
_WITH_AQE: LazyNames[str] = LazyNames(
    lambda: tuple(component.name for component in reranker_components() if component.with_aqe)
)
#: The gallery-preparation parameters, by name (their tuner spaces are declared with them).
_PREPARATION = {param.name: param for param in PREPARATION_PARAMS}
#: Guard metrics: a recommended setting may not lower it (``None``: no guard).
GUARDS: tuple[str, ...] = ("recall@1",)
#: How far the lower end of the guard difference (mean − spread over the splits) may fall below 0.
GUARD_MARGIN = 0.005
#: Settings checked on every split, best first, before plain retrieval is recommended.
MAX_CHECKED = 8
#: With the guard on, how many of the best settings that kept it on the tuning split are checked
#: before the best *steady* ones: those that changed the first result of at most
#: :data:`_STEADY_SHARE` of the tuning split's queries.
_FIRST_CHECKED = 5
_STEADY_SHARE = 0.01
