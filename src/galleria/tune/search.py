"""Choose retrieval settings on a validation split of the user's own labelled gallery (Optuna, seeded TPE).

The gallery's images (never any test query) are split, stratified by label and seeded, into
validation queries and a validation gallery; both reuse the vectors the store already holds, so
nothing is embedded again. Every trial runs one setting — plain retrieval, αQE, or a re-ranking
method (k-reciprocal, diffusion, decoupled diffusion, GNN, DBA + αQE) with its parameters, with or
without αQE before it — on those queries and scores it. Each method's defaults are tried first,
then Optuna's TPE sampler (seeded) proposes more until the trial budget or the timeout is spent.
Decoupled diffusion is searched over its online ``query_k`` and a few graph sizes and walk weights
(each pair is one offline part, kept per split while the trials reuse it), alone or after αQE. Both
diffusions are also searched on a prepared gallery — power-normalised and/or centred
(``vector_power``, ``centre``), then DBA-augmented (``dba_neighbors``, ``dba_alpha``); a few values
each, the prepared copies kept per split — and over pools up to 1,000 candidates: a class of
thousands of images needs a pool that reaches past the first hundreds.

With the guard on, the sampler is told which trials lowered Recall@1 on the tuning split by more
than :data:`GUARD_MARGIN` (Optuna's constrained TPE), so that it proposes more where the guard
holds; those trials are checked on the other splits after the ones that kept it.

Each method's defaults are tried twice: the paper's values and the values read from the gallery
(:mod:`galleria.rerank.adaptive`); the diffusions' paper values a third time, on the gallery after
the usual normalisation of non-negative features (signed square root and centring) with a pool of
1,000 — the starting point that lifted Fashion-MNIST most (docs/reranking.md).

The settings that beat plain retrieval on the tuning split are then checked (at most
:data:`MAX_CHECKED` of them) on ``n_splits`` validation splits (the tuning split and
``n_splits - 1`` more drawn with other seeds): with the guard on, the five best that kept Recall@1 within the
margin on the tuning split, then the best of the others that changed the first result of at most 1 %
of its queries (whose Recall@1 cannot move much on any split), then the rest. Per split, the *lift*
is the metric of the setting minus that of plain retrieval and the *guard difference* its Recall@1
minus plain's. A setting is eligible when its mean lift is positive and, with the guard on
(``guard="recall@1"``, the default), the lower end of its guard difference — mean minus standard
deviation over the splits — is at least ``-``:data:`GUARD_MARGIN`: it may not buy mAP with Recall@1.
(Mean minus one spread rather than a bootstrap bound: the splits share the gallery, so their spread
is the honest measure of how much a difference moves; a per-query bootstrap of 0/1 Recall@1 changes
would refuse nearly everything at a few hundred queries.) The first eligible setting is recommended;
when none is, the result says so and recommends plain retrieval. ``guard=None`` drops the Recall@1
condition.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from galleria._validation import check_choice, check_positive_int, is_int
from galleria.datasets.folder import stratified_split
from galleria.metrics import hit_rate, mean_average_precision, mean_reciprocal_rank, ranked_relevance
from galleria.rerank.adaptive import AQE_PAPER_PARAMS
from galleria.rerank.normalise import PREPARATION_PARAMS
from galleria.rerank.registry import (
    AUGMENTABLE_METHODS,
    DEFAULT_METHOD,
    RERANK_METHODS,
    reranker_component,
    reranker_components,
)
from galleria.retrieval import RetrievalConfig, Searcher
from galleria.store import Candidate, InMemoryImageEmbeddingStore

__all__ = [
    "GUARDS",
    "GUARD_MARGIN",
    "MAX_CHECKED",
    "METRICS",
    "SEARCH_METHODS",
    "TuneResult",
    "score_lists",
    "tune",
    "tune_gallery",
]

#: Metrics the tuner can maximise.
METRICS: tuple[str, ...] = ("map@100", "recall@1", "recall@5", "mrr", "map@r")
#: The settings families searched: plain retrieval, αQE alone, and every re-ranking method.
SEARCH_METHODS: tuple[str, ...] = ("plain", "aqe", *RERANK_METHODS)
_DEPTH = 100
#: Largest DBA neighbourhood searched (the neighbour lists are found once per split for it).
_DBA_MAX = 50
#: The families also searched on the DBA-augmented gallery (and over pools up to 1,000).
_AUGMENTED = AUGMENTABLE_METHODS
#: The families that can run after αQE (the expanded query's candidates re-ranked): declared.
_WITH_AQE = tuple(component.name for component in reranker_components() if component.with_aqe)
#: The gallery-preparation parameters, by name (their tuner spaces are declared with them).
_PREPARATION = {param.name: param for param in PREPARATION_PARAMS}
#: Trial keys that keep their old spelling (``k-reciprocal.lambda``).
_TRIAL_NAMES = {"lambda_value": "lambda"}
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


def score_lists(
    lists: Sequence[Sequence[Candidate]],
    query_labels: Sequence[Hashable],
    gallery_labels: Mapping[str, Hashable],
) -> dict[str, float]:
    """Recall@1, Recall@5, mAP@100, MRR (within 100) and mAP@R of ranked lists, against labels.

    mAP@R averages, over queries, ``Σ_{j ≤ R} P@j · rel_j / R`` with ``R`` the query's relevant
    gallery items; lists shorter than ``R`` count the missing positions as misses.
    """
    relevance = ranked_relevance(lists, query_labels, gallery_labels)
    hits = np.asarray(relevance.hits, dtype=bool)
    relevant = np.asarray(relevance.n_relevant, dtype=np.int64)
    top = hits[:, :_DEPTH]
    recall_1, recall_5 = hit_rate(top, [1, 5])
    positions = np.arange(1, hits.shape[1] + 1)
    precision = np.cumsum(hits, axis=1) / positions
    within = positions[None, :] <= relevant[:, None]
    map_r = float(np.mean((precision * hits * within).sum(axis=1) / np.maximum(relevant, 1)))
    return {
        "recall@1": float(recall_1),
        "recall@5": float(recall_5),
        "map@100": float(mean_average_precision(top, relevant, _DEPTH)),
        "mrr": float(mean_reciprocal_rank(top)),
        "map@r": map_r,
    }


@dataclass
class _Split:
    """One validation split: a store over the validation gallery and the validation queries' vectors."""

    seed: int
    store: InMemoryImageEmbeddingStore
    queries: np.ndarray
    query_labels: list[Hashable]
    gallery_labels: dict[str, Hashable]
    depth: int
    #: Prepared copies of the validation gallery, by (vector_power, centre[, neighbors, alpha]).
    normalised: dict[tuple[Any, ...], InMemoryImageEmbeddingStore] = field(default_factory=dict)
    augmented: dict[tuple[Any, ...], InMemoryImageEmbeddingStore] = field(default_factory=dict)
    neighbour_lists: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict)
    searches: dict[tuple[Any, ...], list[list[Candidate]]] = field(default_factory=dict)
    #: Plain retrieval's first result per validation query (set by its run).
    plain_firsts: list[str | None] | None = None

    def _prepared(
        self, power: float = 1.0, centre: bool = False, neighbors: int = 0, alpha: float = 3.0
    ) -> InMemoryImageEmbeddingStore:
        """The validation gallery normalised and/or DBA-augmented (a few copies kept for later trials)."""
        from galleria.rerank.base import top_similar
        from galleria.rerank.dba import augment_store
        from galleria.rerank.normalise import normalised_store

        base_key: tuple[Any, ...] = (power, centre)
        base = self.store
        if base_key != (1.0, False):
            if base_key not in self.normalised:
                _make_room(self.normalised, 2)
                self.normalised[base_key] = normalised_store(self.store, vector_power=power, centre=centre)
            base = self.normalised[base_key]
        if not neighbors:
            return base
        key = (*base_key, neighbors, alpha)
        if key not in self.augmented:
            if base_key not in self.neighbour_lists:  # once per gallery, for the largest neighbourhood
                unit = base.embeddings
                _make_room(self.neighbour_lists, 2)
                self.neighbour_lists[base_key] = top_similar(
                    unit, unit, min(_DBA_MAX, len(unit) - 1), exclude_self=True
                )[0]
            _make_room(self.augmented, 2)
            self.augmented[key] = augment_store(
                base, neighbors=neighbors, alpha=alpha, neighbor_lists=self.neighbour_lists[base_key]
            )
        return self.augmented[key]

    def run(self, config: RetrievalConfig) -> dict[str, float]:
        prepared = None
        config = config.resolve(self.store)  # what the Searcher reads from this split's gallery
        if config.rerank:
            params = config.rerank_params
            if config.rerank_method == "dba":
                neighbors, alpha = int(params.get("neighbors", 10)), float(params.get("alpha", 3.0))
                prepared = self._prepared(neighbors=neighbors, alpha=alpha)
            elif config.rerank_method in _AUGMENTED:  # a diffusion on a prepared gallery
                prepared = self._prepared(
                    float(params.get("vector_power", 1.0)),
                    bool(params.get("centre", False)),
                    int(params.get("dba_neighbors", 0)),
                    float(params.get("dba_alpha", 3.0)),
                )
        # The one path (the prepared copies kept here, so trials share them)
        searcher = Searcher(self.store, config, prepared=prepared)
        config, store = searcher.config, searcher.searched
        k = min(searcher.depth(self.depth), len(store))
        key = (id(store), k, config.query_expansion, config.expansion_alpha, config.expansion_neighbors)
        lists = self.searches.get(key) if not config.query_expansion else None
        if lists is None:
            lists = searcher.candidates(self.queries, k)
            if not config.query_expansion and store is self.store:
                self.searches[key] = lists
        lists = searcher.finish(lists, k)
        scores = score_lists(lists, self.query_labels, self.gallery_labels)
        firsts = [candidates[0].path if candidates else None for candidates in lists]
        if not config.rerank and not config.query_expansion:
            self.plain_firsts = firsts
        if self.plain_firsts is not None:  # the share of queries whose first result is not plain's
            moved = sum(a != b for a, b in zip(firsts, self.plain_firsts, strict=True))
            scores["first_changed"] = moved / max(1, len(firsts))
        return scores


def _make_room(kept: dict[Any, Any], most: int) -> None:
    """Drop the oldest entries of ``kept`` until one more fits within ``most``."""
    while len(kept) >= most:
        kept.pop(next(iter(kept)))


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune_gallery` found: the recommended configuration and the evidence for it."""

    #: The setting to use: the best one, or plain retrieval when nothing beat it.
    config: RetrievalConfig
    #: The best setting found (may be plain retrieval).
    best: RetrievalConfig
    metric: str
    #: The metric of ``best`` and of plain retrieval on the tuning split.
    best_value: float
    plain_value: float
    #: ``best`` minus plain, one entry per validation split (the tuning split first).
    lifts: list[float]
    beats_plain: bool
    message: str
    #: Every trial: its number, settings and value.
    trials: list[dict[str, Any]]
    #: How the validation splits were drawn.
    validation: dict[str, Any]
    sampler: dict[str, Any]
    seconds: float
    #: The guard metric (``None``: no guard) and, per split, ``best``'s guard metric minus plain's.
    guard: str | None = None
    guard_diffs: list[float] = field(default_factory=list)
    #: Every setting checked on all splits, best first: title, settings, lifts, guard, eligible.
    checked: list[dict[str, Any]] = field(default_factory=list)

    @property
    def guard_low(self) -> float:
        """Lower end of the guard difference: its mean minus its spread over the splits (0 unguarded)."""
        if not self.guard_diffs:
            return 0.0
        return float(np.mean(self.guard_diffs) - np.std(self.guard_diffs))

    @property
    def lift(self) -> float:
        """Mean lift over the validation splits."""
        return float(np.mean(self.lifts))

    @property
    def spread(self) -> float:
        """Standard deviation of the lift over the validation splits (0 with one split)."""
        return float(np.std(self.lifts))

    def record(self) -> dict[str, Any]:
        """The JSON-able record written beside the settings in a settings file."""
        return {
            "metric": self.metric,
            "beats_plain": self.beats_plain,
            "message": self.message,
            "best": {"title": self.best.title, "settings": self.best.settings(), "value": self.best_value},
            "plain": {"value": self.plain_value},
            "lift": {"mean": round(self.lift, 6), "std": round(self.spread, 6), "per_split": self.lifts},
            "guard": {
                "metric": self.guard,
                "margin": GUARD_MARGIN,
                "rule": "eligible when mean - std over the splits of (setting - plain) >= -margin",
                "per_split": self.guard_diffs,
                "low": round(self.guard_low, 6),
            },
            "checked": self.checked,
            "validation": self.validation,
            "sampler": self.sampler,
            "n_trials": len(self.trials),
            "seconds": round(self.seconds, 3),
            "trials": self.trials,
        }

    def save(self, path: Any) -> None:
        """Write the settings file (``config`` plus :meth:`record`)."""
        from galleria.tune.settings import write_settings

        write_settings(path, self.config, self.record())

    def summary(self) -> str:
        """A few human-readable lines: the best setting, its lift and spread, and the recommendation."""
        spread = f" ± {self.spread:.4f}" if len(self.lifts) > 1 else ""
        lines = [
            f"metric: {self.metric} on {self.validation['n_queries']} validation queries × "
            f"{self.validation['n_gallery']} validation gallery images, {len(self.trials)} distinct "
            "settings tried",
            f"plain retrieval: {self.plain_value:.4f}",
            f"best: {self.best.title}: {self.best_value:.4f}",
            f"lift over plain on {len(self.lifts)} split(s): {self.lift:+.4f}{spread} "
            f"(per split: {', '.join(f'{value:+.4f}' for value in self.lifts)})",
        ]
        if self.guard is not None and self.guard_diffs:
            lines.append(
                f"guard {self.guard}: change {np.mean(self.guard_diffs):+.4f}, "
                f"lower end {self.guard_low:+.4f} (allowed: ≥ {-GUARD_MARGIN:+.4f}); "
                f"{len(self.checked)} setting(s) checked"
            )
        lines += [
            self.message,
        ]
        return "\n".join(lines)


def _trial_key(method: str, name: str) -> str:
    """Optuna's name of ``method``'s parameter ``name`` (``gnn.k1``; λ keeps its old ``.lambda``)."""
    return f"{method}.{_TRIAL_NAMES.get(name, name)}"


def _adaptive_trial(family: str, store: InMemoryImageEmbeddingStore) -> dict[str, Any]:
    """Optuna's parameters for ``family``'s adaptive defaults on ``store`` (empty for plain retrieval)."""
    from galleria.rerank.adaptive import default_rerank_params

    if family == "plain":
        return {}
    params = default_rerank_params(store, family)
    if family == "aqe":
        return {"aqe.alpha": params["expansion_alpha"], "aqe.n": params["expansion_neighbors"]}
    return {_trial_key(family, key): value for key, value in params.items()}


def _paper_trial(family: str) -> dict[str, Any]:
    """Optuna's parameters for ``family``'s paper values (those the search covers), from the declaration."""
    if family == "aqe":
        return {
            "aqe.alpha": AQE_PAPER_PARAMS["expansion_alpha"],
            "aqe.n": AQE_PAPER_PARAMS["expansion_neighbors"],
        }
    if family == "plain":
        return {}
    component = reranker_component(family)
    return {
        _trial_key(family, param.name): param.paper
        for param in component.params
        if param.has_paper and param.space is not None and param.name not in _PREPARATION
    }


def _choices(adaptive: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
    """The categorical choices of the search: each declared categorical space plus the adaptive
    trial's value for it (so that the adaptive trial is a point of the space)."""
    result: dict[str, tuple[Any, ...]] = {}
    for component in reranker_components():
        for param in component.params:
            if param.space is None or param.space.kind != "categorical" or param.name in _PREPARATION:
                continue
            key = _trial_key(component.name, param.name)
            values = set(param.space.choices)
            if key in adaptive:
                values.add(adaptive[key])
            result[key] = tuple(sorted(values))
    return result


def _suggest(
    trial: Any, methods: Sequence[str], choices: Mapping[str, tuple[Any, ...]] | None = None
) -> dict[str, Any]:
    """Optuna's proposal for one trial, as ``RetrievalConfig`` keyword arguments.

    The space of each method is its declaration's: every parameter with a tuner ``space`` (a
    categorical one widened by ``choices``), a parameter declared ``at_most`` another clipped to it,
    the declared pools, αQE before it when declared ``with_aqe``, and the preparation parameters
    for a ``prepared`` method.
    """
    choices = _choices({}) if choices is None else choices
    method = trial.suggest_categorical("method", list(methods))
    component = None if method in ("plain", "aqe") else reranker_component(method)
    options: dict[str, Any] = {}
    if method == "aqe" or (
        component is not None
        and component.with_aqe
        and trial.suggest_categorical(f"{method}.aqe", [False, True])
    ):
        options["query_expansion"] = True
        options["expansion_alpha"] = trial.suggest_float("aqe.alpha", 0.0, 5.0)
        options["expansion_neighbors"] = trial.suggest_int("aqe.n", 1, 50, log=True)
    if component is None:
        return options
    options["rerank"] = True
    options["rerank_method"] = method
    options["pool"] = trial.suggest_categorical(f"{method}.pool", list(component.pools))
    params: dict[str, Any] = {}
    for param in component.params:
        if param.space is None or param.name in _PREPARATION:
            continue
        key = _trial_key(method, param.name)
        space = param.space
        if space.kind == "categorical" and key in choices:
            space = replace(space, choices=tuple(choices[key]))
        value = space.suggest(trial, key)
        params[param.name] = min(params[param.at_most], value) if param.at_most else value
    if component.prepared:
        params.update(_suggest_preparation(trial, method))
    if method == DEFAULT_METHOD:
        options.update(params)
    else:
        options["rerank_params"] = params
    return options


def _suggest_preparation(trial: Any, method: str) -> dict[str, Any]:
    """The preparation steps proposed before ``method``: power, centring, then DBA or not."""
    params: dict[str, Any] = {}
    for name in ("vector_power", "centre"):
        space = _PREPARATION[name].space
        assert space is not None
        value = space.suggest(trial, f"{method}.{name}")
        if value != _PREPARATION[name].default:
            params[name] = value
    if trial.suggest_categorical(f"{method}.dba", [False, True]):
        for name in ("dba_neighbors", "dba_alpha"):
            space = _PREPARATION[name].space
            assert space is not None
            params[name] = space.suggest(trial, f"{method}.{name}")
    return params


def _labels_of(store: InMemoryImageEmbeddingStore, labels: Any) -> list[Hashable]:
    paths = store.paths
    if isinstance(labels, Mapping):
        missing = [path for path in paths if path not in labels]
        if missing:
            raise ValueError(f"labels has no label for {len(missing)} store path(s), e.g. {missing[0]!r}")
        return [labels[path] for path in paths]
    if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence):
        raise TypeError(f"labels must be a mapping path → label or a sequence, got {type(labels).__name__}")
    if len(labels) != len(paths):
        raise ValueError(f"labels must hold one label per store path ({len(paths)}), got {len(labels)}")
    return list(labels)


def _make_split(
    store: InMemoryImageEmbeddingStore,
    vectors: np.ndarray,
    labels: list[Hashable],
    seed: int,
    n_queries: int,
    metric: str,
) -> _Split:
    query_rows, gallery_rows = stratified_split(labels, n_queries=n_queries, seed=seed)
    paths = store.paths
    gallery_paths = [paths[row] for row in gallery_rows.tolist()]
    gallery = InMemoryImageEmbeddingStore.from_embeddings(
        gallery_paths, vectors[gallery_rows], search_index="exact", space=store.space
    )
    gallery_labels = {paths[row]: labels[row] for row in gallery_rows.tolist()}
    query_labels = [labels[row] for row in query_rows.tolist()]
    depth = _DEPTH
    if metric == "map@r":
        counts: dict[Hashable, int] = {}
        for label in gallery_labels.values():
            counts[label] = counts.get(label, 0) + 1
        depth = max(_DEPTH, max(counts[label] for label in query_labels))
    return _Split(seed, gallery, vectors[query_rows], query_labels, gallery_labels, min(depth, len(gallery)))


def tune_gallery(
    store: InMemoryImageEmbeddingStore,
    labels: Mapping[str, Hashable] | Sequence[Hashable],
    *,
    metric: str = "map@100",
    n_trials: int = 40,
    timeout: float | None = None,
    methods: Sequence[str] | None = None,
    validation_queries: int | float = 0.1,
    n_splits: int = 3,
    seed: int = 0,
    on_trial: Callable[[int, str, float], None] | None = None,
    guard: str | None = "recall@1",
) -> TuneResult:
    """Search retrieval settings on validation splits of a labelled gallery store; see the module docstring.

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        A built store over the labelled gallery (not on an ``ExternalSearchIndex``). Only its vectors
        are used; hold the test queries out of it.
    labels : mapping path → label, or one label per ``store.paths`` entry
    metric : {"map@100", "recall@1", "recall@5", "mrr", "map@r"}
        What to maximise.
    n_trials : int
        Trial budget (the methods' default settings count as the first trials).
    timeout : float, optional
        Stop proposing new trials after this many seconds.
    methods : sequence of str, optional
        The families to search, from :data:`SEARCH_METHODS` (default: all). Plain retrieval is always
        measured.
    validation_queries : int or float
        Validation queries per split: a count, or a share of the gallery in (0, 1).
    n_splits : int
        Validation splits the lift is measured on (1 to 10; the first is the tuning split).
    seed : int
        Seeds the first split (split ``i`` uses ``seed + i``) and the TPE sampler.
    on_trial : callable, optional
        Called with ``(number, title, value)`` after each trial (progress reporting).
    guard : {"recall@1", None}
        The metric a recommended setting may not lower (see the module docstring); ``None`` (or
        ``"none"``) maximises ``metric`` alone.

    Returns
    -------
    TuneResult

    Raises
    ------
    ImportError
        Optuna is not installed (``pip install -e '.[tune]'``).
    TypeError, ValueError
        For bad arguments; a gallery too small to split.
    RuntimeError
        The store is not built.
    """
    try:
        import optuna
    except ImportError as error:
        raise ImportError("galleria.tune needs optuna; install it with: pip install -e '.[tune]'") from error
    if not isinstance(store, InMemoryImageEmbeddingStore):
        raise TypeError(f"store must be an InMemoryImageEmbeddingStore, got {type(store).__name__}")
    if not store.is_built:
        raise RuntimeError("the store is not built yet; call build_store() first")
    chosen_metric = check_choice("metric", metric, METRICS)
    guard_metric = None if guard is None or guard == "none" else check_choice("guard", guard, GUARDS)
    budget = check_positive_int("n_trials", n_trials)
    splits = check_positive_int("n_splits", n_splits)
    if splits > 10:
        raise ValueError(f"n_splits must be at most 10, got {n_splits}")
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
    ):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    families = list(SEARCH_METHODS if methods is None else methods)
    if not families:
        raise ValueError("methods must not be empty")
    for family in families:
        check_choice("methods[i]", family, SEARCH_METHODS)
    label_list = _labels_of(store, labels)
    if isinstance(validation_queries, float) and not isinstance(validation_queries, bool):
        if not 0.0 < validation_queries < 1.0:
            raise ValueError(f"validation_queries as a share must lie in (0, 1), got {validation_queries!r}")
        n_queries = max(1, round(validation_queries * len(label_list)))
    else:
        n_queries = check_positive_int("validation_queries", validation_queries)
    vectors = store.embeddings
    started = time.perf_counter()
    first = _make_split(store, vectors, label_list, int(seed), n_queries, chosen_metric)

    trials: list[dict[str, Any]] = []
    seen: dict[str, float] = {}
    guarded: dict[str, float] = {}  # the guard metric on the tuning split
    moved: dict[str, float] = {}  # the share of first results that differ from plain's there
    configs: dict[str, RetrievalConfig] = {}

    def measure(options: dict[str, Any]) -> tuple[RetrievalConfig, float]:
        # every value a trial leaves out is read from the tuning split's gallery, as the Searcher does
        config = RetrievalConfig("trial", **options).resolve(first.store)
        key = repr(sorted(config.settings().items()))
        if key not in seen:
            values = first.run(config)
            seen[key] = values[chosen_metric]
            guarded[key] = values[guard_metric] if guard_metric else 0.0
            moved[key] = values.get("first_changed", 0.0)
            configs[key] = config
            trials.append(
                {
                    "number": len(trials),
                    "title": config.title,
                    "settings": config.settings(),
                    "value": round(seen[key], 6),
                }
            )
            if on_trial is not None:
                on_trial(len(trials) - 1, config.title, seen[key])
        return config, seen[key]

    plain_config, plain_value = measure({})
    plain_guard = guarded[repr(sorted(plain_config.settings().items()))]

    def short_of_guard(key: str) -> float:
        """How far ``key``'s guard metric fell below plain's on the tuning split, beyond the margin
        (≤ 0: within it)."""
        return plain_guard - guarded[key] - GUARD_MARGIN if guard_metric else 0.0

    adaptive_trials = {family: _adaptive_trial(family, first.store) for family in families}
    choices = _choices({key: value for trial in adaptive_trials.values() for key, value in trial.items()})

    # Optuna 5 reads a trial's constraints from ``Trial.set_constraint``; older ones from a function.
    native = hasattr(optuna.trial.Trial, "set_constraint")

    interrupted: list[BaseException] = []

    def objective(trial: Any) -> float:
        try:
            config, value = measure(_suggest(trial, families, choices))
        except KeyboardInterrupt as error:
            # Optuna would log the interrupted trial with a traceback: end the trial as pruned
            # (logged at INFO, not shown), stop the study and raise the interrupt once it is out.
            interrupted.append(error)
            trial.study.stop()
            raise optuna.TrialPruned() from None
        short = short_of_guard(repr(sorted(config.settings().items())))
        if native and guard_metric:
            trial.set_constraint("guard", short)
        trial.set_user_attr("short_of_guard", short)
        return value

    def constraints(trial: Any) -> tuple[float]:
        return (float(trial.user_attrs.get("short_of_guard", 0.0)),)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(
        seed=int(seed), constraints_func=constraints if guard_metric and not native else None
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for family in families:  # each family's defaults first
        params: dict[str, Any] = {"method": family}
        if family in _WITH_AQE:
            params[f"{family}.aqe"] = False
        if family in _AUGMENTED:
            params.update({f"{family}.dba": False, f"{family}.vector_power": 1.0, f"{family}.centre": False})
        if family in RERANK_METHODS:
            params[f"{family}.pool"] = 200
        paper = _paper_trial(family)
        study.enqueue_trial({**params, **paper})
        adaptive = adaptive_trials[family]
        if adaptive:  # the defaults read from the (validation) gallery
            study.enqueue_trial({**params, **adaptive})
        if family in _AUGMENTED:  # the paper's values on the normalised gallery, with a deep pool
            deepest = max(reranker_component(family).pools)
            prepared = {f"{family}.pool": deepest, f"{family}.vector_power": 0.5, f"{family}.centre": True}
            study.enqueue_trial({**params, **paper, **prepared})
    remaining = max(0, budget - 1)  # plain retrieval was the first trial
    if remaining:
        left = None if timeout is None else max(0.0, float(timeout) - (time.perf_counter() - started))
        study.optimize(objective, n_trials=remaining, timeout=left)
        if interrupted:
            raise KeyboardInterrupt

    others = [
        _make_split(store, vectors, label_list, int(seed) + number, n_queries, chosen_metric)
        for number in range(1, splits)
    ]
    every = [first, *others]
    plain_runs = [split.run(plain_config) for split in every]
    plain_key = repr(sorted(plain_config.settings().items()))
    ranked = sorted(  # those that kept the guard on the tuning split first, then the best value
        (key for key in seen if key != plain_key and seen[key] > plain_value),
        key=lambda key: (short_of_guard(key) > 0, -seen[key]),  # stable: ties keep the trial order
    )
    if guard_metric:  # after the best few that kept it: the best that keep the first places
        kept = [key for key in ranked if short_of_guard(key) <= 0]
        leading = kept[:_FIRST_CHECKED]
        steady = [key for key in kept[_FIRST_CHECKED:] if moved[key] <= _STEADY_SHARE]
        ranked = leading + steady + [key for key in ranked if key not in leading and key not in steady]
    checked: list[dict[str, Any]] = []
    best_config, best_value = plain_config, plain_value
    lifts, guard_diffs = [0.0] * splits, [0.0] * splits if guard_metric else []
    beats = False
    for key in ranked[:MAX_CHECKED]:
        config = configs[key]
        runs = [split.run(config) for split in every]
        split_lifts = [
            round(r[chosen_metric] - p[chosen_metric], 6) for r, p in zip(runs, plain_runs, strict=True)
        ]
        diffs = (
            [round(r[guard_metric] - p[guard_metric], 6) for r, p in zip(runs, plain_runs, strict=True)]
            if guard_metric
            else []
        )
        low = float(np.mean(diffs) - np.std(diffs)) if diffs else 0.0
        eligible = float(np.mean(split_lifts)) > 0 and (not diffs or low >= -GUARD_MARGIN - 1e-12)
        checked.append(
            {
                "title": config.title,
                "settings": config.settings(),
                "value": round(seen[key], 6),
                "lifts": split_lifts,
                "guard": diffs,
                "guard_low": round(low, 6),
                "eligible": eligible,
            }
        )
        if not checked[1:] or eligible:  # the best found is reported even when it is refused
            best_config, best_value, lifts, guard_diffs = config, seen[key], split_lifts, diffs
        if eligible:
            beats = True
            break
    mean_lift = float(np.mean(lifts))
    if beats:
        recommended = RetrievalConfig.from_settings(best_config.settings(), name="tuned")
        message = (
            f"recommended: {best_config.title} (mean lift {mean_lift:+.4f} {chosen_metric} over plain "
            f"retrieval on {len(lifts)} validation split(s))"
        )
    elif checked and guard_metric and any(float(np.mean(c["lifts"])) > 0 for c in checked):
        recommended = RetrievalConfig("tuned")
        message = (
            f"every setting that beat plain retrieval on {chosen_metric} lowered {guard_metric} on the "
            f"validation splits (by more than {GUARD_MARGIN} at the lower end); recommended: plain "
            "retrieval, without αQE or re-ranking"
        )
    else:
        recommended = RetrievalConfig("tuned")
        message = (
            f"no method beat plain retrieval on this gallery's validation splits ({chosen_metric}); "
            "recommended: plain retrieval, without αQE or re-ranking"
        )
    validation = {
        "seed": int(seed),
        "seeds": [int(seed) + number for number in range(splits)],
        "n_queries": n_queries,
        "n_gallery": len(first.store),
        "stratified": True,
        "source": "the store's gallery (test queries are never in it)",
    }
    return TuneResult(
        config=recommended,
        best=RetrievalConfig.from_settings(best_config.settings(), name="best"),
        metric=chosen_metric,
        best_value=round(best_value, 6),
        plain_value=round(plain_value, 6),
        lifts=lifts,
        beats_plain=beats,
        message=message,
        trials=trials,
        validation=validation,
        sampler={"name": "TPESampler", "seed": int(seed), "n_trials": budget, "timeout": timeout},
        seconds=time.perf_counter() - started,
        guard=guard_metric,
        guard_diffs=guard_diffs,
        checked=checked,
    )


#: The function's name before galleria 0.3 (``from galleria.tune import tune``); kept as an alias.
tune = tune_gallery
