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
from typing import Any

import numpy as np

from galleria._validation import check_choice, check_positive_int, is_int
from galleria.rerank.registry import (
    RERANK_METHODS,
    reranker_component,
)
from galleria.retrieval import RetrievalConfig
from galleria.store import InMemoryImageEmbeddingStore
from galleria.tune._constants import (
    _AUGMENTED,
    _FIRST_CHECKED,
    _STEADY_SHARE,
    _WITH_AQE,
    GUARD_MARGIN,
    GUARDS,
    MAX_CHECKED,
    METRICS,
    SEARCH_METHODS,
)
from galleria.tune._space import (
    _adaptive_trial,
    _choices,
    _paper_trial,
    _suggest,
)
from galleria.tune._space import _suggest_preparation as _suggest_preparation
from galleria.tune._space import _trial_key as _trial_key
from galleria.tune._splits import _labels_of, _make_split, score_lists

# Moved to the modules above (galleria 0.3); importable from here as before.
from galleria.tune._splits import _Split as _Split
from galleria.tune._stop import stopping_on_interrupt
from galleria.tune.result import TuneResult

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
    measuring = [False]  # a Ctrl-C then ends the trial at once (galleria.tune._stop)

    def objective(trial: Any) -> float:
        try:
            measuring[0] = True
            config, value = measure(_suggest(trial, families, choices))
        except KeyboardInterrupt as error:
            # Optuna would log the interrupted trial with a traceback: end the trial as pruned
            # (logged at INFO, not shown), stop the study and raise the interrupt once it is out.
            interrupted.append(error)
            trial.study.stop()
            raise optuna.TrialPruned() from None
        finally:
            measuring[0] = False
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
        with stopping_on_interrupt(study, measuring, interrupted):
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
