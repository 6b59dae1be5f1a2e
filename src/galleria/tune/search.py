"""Choose retrieval settings on a validation split of the user's own labelled gallery (Optuna, seeded TPE).

The gallery's images (never any test query) are split, stratified by label and seeded, into
validation queries and a validation gallery; both reuse the vectors the store already holds, so
nothing is embedded again. Every trial runs one setting — plain retrieval, αQE, or a re-ranking
method (every method of :data:`galleria.rerank.RERANK_METHODS`) with its parameters, with or
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

import functools
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple

from galleria._moved import moved_names
from galleria._validation import check_choice, check_positive_int, is_int
from galleria.retrieval import RetrievalConfig
from galleria.store import InMemoryImageEmbeddingStore
from galleria.tune._constants import GUARDS, METRICS, SEARCH_METHODS
from galleria.tune._splits import _labels_of, _make_split

# Moved to the modules above (galleria 0.3); importable from here as before.
from galleria.tune._study import Trials, run_study, setting_key
from galleria.tune._verdict import check_on_splits, ranked_keys, recommendation
from galleria.tune.result import TuneResult

__all__ = ["GUARDS", "METRICS", "SEARCH_METHODS", "TuneResult", "tune", "tune_gallery"]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(
    __name__,
    {
        "GUARD_MARGIN": "galleria.tune._constants",
        "MAX_CHECKED": "galleria.tune._constants",
        "score_lists": "galleria.tune",
    },
)


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
    optuna = _import_optuna()
    checked = _checked_arguments(store, metric, guard, n_trials, n_splits, seed, timeout, methods)
    label_list = _labels_of(store, labels)
    n_queries = _query_count(validation_queries, len(label_list))
    started = time.perf_counter()
    split = functools.partial(_make_split, store, store.embeddings, label_list)
    first = split(int(seed), n_queries, checked.metric)
    trials = Trials(first, checked.metric, checked.guard_metric, on_trial)
    plain = trials.measure_plain()
    remaining = max(0, checked.budget - 1)  # plain retrieval was the first trial
    run_study(
        optuna, trials, checked.families,
        seed=checked.seed, remaining=remaining, timeout=timeout, started=started,
    )  # fmt: skip
    others = [split(int(seed) + number, n_queries, checked.metric) for number in range(1, checked.splits)]
    return _result(trials, [first, *others], plain, checked._replace(n_queries=n_queries), started, timeout)


def _import_optuna() -> Any:
    try:
        import optuna
    except ImportError as error:
        raise ImportError("galleria.tune needs optuna; install it with: pip install -e '.[tune]'") from error
    return optuna


class _Arguments(NamedTuple):
    metric: str
    guard_metric: str | None
    budget: int
    splits: int
    families: list[str]
    seed: int
    n_queries: int = 0


def _result(
    trials: Trials,
    every: list[Any],
    plain: tuple[RetrievalConfig, float],
    checked: _Arguments,
    started: float,
    timeout: float | None,
) -> TuneResult:
    """Check the settings that beat plain on every split and return the verdict as a :class:`TuneResult`."""
    plain_runs = [split.run(plain[0]) for split in every]
    ranked = ranked_keys(trials, setting_key(plain[0]), plain[1])
    result = check_on_splits(trials, ranked, every, plain_runs, plain)
    recommended, message = recommendation(result, checked.metric, checked.guard_metric)
    seed = checked.seed
    validation = {
        "seed": seed,
        "seeds": [seed + number for number in range(checked.splits)],
        "n_queries": checked.n_queries,
        "n_gallery": len(every[0].store),
        "stratified": True,
        "source": "the store's gallery (test queries are never in it)",
    }
    return TuneResult(
        config=recommended,
        best=RetrievalConfig.from_settings(result.best_config.settings(), name="best"),
        metric=checked.metric,
        best_value=round(result.best_value, 6),
        plain_value=round(plain[1], 6),
        lifts=result.lifts,
        beats_plain=result.beats,
        message=message,
        trials=trials.trials,
        validation=validation,
        sampler={"name": "TPESampler", "seed": seed, "n_trials": checked.budget, "timeout": timeout},
        seconds=time.perf_counter() - started,
        guard=checked.guard_metric,
        guard_diffs=result.guard_diffs,
        checked=result.checked,
    )


def _checked_arguments(
    store: Any,
    metric: str,
    guard: str | None,
    n_trials: int,
    n_splits: int,
    seed: int,
    timeout: float | None,
    methods: Sequence[str] | None,
) -> _Arguments:
    """The checked metric, guard metric, trial budget, split count, families and seed."""
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
    return _Arguments(chosen_metric, guard_metric, budget, splits, families, int(seed))


def _query_count(validation_queries: int | float, gallery: int) -> int:
    """Validation queries per split: a count, or a share of the gallery's ``gallery`` items in (0, 1)."""
    if isinstance(validation_queries, float) and not isinstance(validation_queries, bool):
        if not 0.0 < validation_queries < 1.0:
            raise ValueError(f"validation_queries as a share must lie in (0, 1), got {validation_queries!r}")
        return max(1, round(validation_queries * gallery))
    return check_positive_int("validation_queries", validation_queries)


#: The function's name before galleria 0.3 (``from galleria.tune import tune``); kept as an alias.
tune = tune_gallery
