"""The trials of :func:`galleria.tune_gallery` on the tuning split, and the Optuna study that proposes them.

:class:`Trials` measures each distinct setting once on the tuning split and keeps its metric, its guard
metric and the share of first results it moved; :func:`run_study` enqueues each family's defaults and
lets the seeded TPE sampler propose the rest of the budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from galleria._plugin_guard import PluginError
from galleria.rerank.registry import RERANK_METHODS, reranker_component
from galleria.retrieval import DEFAULT_POOL, RetrievalConfig
from galleria.tune._constants import _AUGMENTED, _PREPARATION, _WITH_AQE, GUARD_MARGIN
from galleria.tune._space import _adaptive_trial, _choices, _paper_trial, _suggest
from galleria.tune._stop import stopping_on_interrupt

__all__ = ["Trials", "run_study"]


def setting_key(config: RetrievalConfig) -> str:
    """The key a setting's measurements are kept under (its settings, sorted)."""
    return repr(sorted(config.settings().items()))


class Trials:
    """The settings measured on the tuning split ``first``, each once, in the order they were tried."""

    def __init__(
        self,
        first: Any,
        metric: str,
        guard_metric: str | None,
        on_trial: Callable[[int, str, float], None] | None,
    ) -> None:
        self.first = first
        self.metric = metric
        self.guard_metric = guard_metric
        self.on_trial = on_trial
        self.trials: list[dict[str, Any]] = []
        self.seen: dict[str, float] = {}
        self.guarded: dict[str, float] = {}  # the guard metric on the tuning split
        self.moved: dict[str, float] = {}  # the share of first results that differ from plain's there
        self.configs: dict[str, RetrievalConfig] = {}
        self.plain_guard = 0.0

    def measure(self, options: dict[str, Any]) -> tuple[RetrievalConfig, float]:
        """Run the setting ``options`` on the tuning split (once) and return it, resolved, with its value."""
        # every value a trial leaves out is read from the tuning split's gallery, as the Searcher does
        config = RetrievalConfig("trial", **options).resolve(self.first.store)
        key = setting_key(config)
        if key not in self.seen:
            values = self.first.run(config)
            self.seen[key] = values[self.metric]
            self.guarded[key] = values[self.guard_metric] if self.guard_metric else 0.0
            self.moved[key] = values.get("first_changed", 0.0)
            self.configs[key] = config
            self.trials.append(
                {
                    "number": len(self.trials),
                    "title": config.title,
                    "settings": config.settings(),
                    "value": round(self.seen[key], 6),
                }
            )
            if self.on_trial is not None:
                self.on_trial(len(self.trials) - 1, config.title, self.seen[key])
        return config, self.seen[key]

    def measure_plain(self) -> tuple[RetrievalConfig, float]:
        """Measure plain retrieval (the first trial), whose guard metric the others are held to."""
        config, value = self.measure({})
        self.plain_guard = self.guarded[setting_key(config)]
        return config, value

    def short_of_guard(self, key: str) -> float:
        """How far ``key``'s guard metric fell below plain's on the tuning split, beyond the margin
        (≤ 0: within it)."""
        return self.plain_guard - self.guarded[key] - GUARD_MARGIN if self.guard_metric else 0.0


def _enqueue_defaults(
    study: Any, families: Sequence[str], adaptive_trials: dict[str, dict[str, Any]]
) -> None:
    """Each family's defaults first: the paper's, the gallery's, and the paper's on a prepared gallery."""
    for family in families:
        params: dict[str, Any] = {"method": family}
        if family in _WITH_AQE:
            params[f"{family}.aqe"] = False
        if family in _AUGMENTED:
            params[f"{family}.dba"] = False
            params.update(
                {f"{family}.{name}": _PREPARATION[name].default for name in ("vector_power", "centre")}
            )
        if family in RERANK_METHODS:
            params[f"{family}.pool"] = DEFAULT_POOL
        paper = _paper_trial(family)
        study.enqueue_trial({**params, **paper})
        adaptive = adaptive_trials[family]
        if adaptive:  # the defaults read from the (validation) gallery
            study.enqueue_trial({**params, **adaptive})
        if family in _AUGMENTED:  # the paper's values on the normalised gallery, with a deep pool
            deepest = max(reranker_component(family).pools)
            prepared = {f"{family}.pool": deepest, f"{family}.vector_power": 0.5, f"{family}.centre": True}
            study.enqueue_trial({**params, **paper, **prepared})


def run_study(
    optuna: Any,
    trials: Trials,
    families: Sequence[str],
    *,
    seed: int,
    remaining: int,
    timeout: float | None,
    started: float,
) -> None:
    """Measure the families' defaults, then TPE's proposals, until ``remaining`` trials or the timeout.

    A Ctrl-C ends the trial being measured at once and is raised again once the study has stopped.
    """
    guard_metric = trials.guard_metric
    adaptive_trials = {family: _adaptive_trial(family, trials.first.store) for family in families}
    choices = _choices({key: value for trial in adaptive_trials.values() for key, value in trial.items()})
    # Optuna 5 reads a trial's constraints from ``Trial.set_constraint``; older ones from a function.
    native = hasattr(optuna.trial.Trial, "set_constraint")

    interrupted: list[BaseException] = []
    measuring = [False]  # a Ctrl-C then ends the trial at once (galleria.tune._stop)

    def objective(trial: Any) -> float:
        try:
            measuring[0] = True
            config, value = trials.measure(_suggest(trial, families, choices))
        except KeyboardInterrupt as error:
            # Optuna would log the interrupted trial with a traceback: end the trial as pruned
            # (logged at INFO, not shown), stop the study and raise the interrupt once it is out.
            interrupted.append(error)
            trial.study.stop()
            raise optuna.TrialPruned() from None
        except PluginError as error:
            # A plugin's method failed: the same quiet end, then its one-line error.
            interrupted.append(error)
            trial.study.stop()
            raise optuna.TrialPruned() from None
        finally:
            measuring[0] = False
        short = trials.short_of_guard(setting_key(config))
        if native and guard_metric:
            trial.set_constraint("guard", short)
        trial.set_user_attr("short_of_guard", short)
        return value

    def constraints(trial: Any) -> tuple[float]:
        return (float(trial.user_attrs.get("short_of_guard", 0.0)),)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(
        seed=seed, constraints_func=constraints if guard_metric and not native else None
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    _enqueue_defaults(study, families, adaptive_trials)
    if remaining:
        left = None if timeout is None else max(0.0, float(timeout) - (time.perf_counter() - started))
        with stopping_on_interrupt(study, measuring, interrupted):
            study.optimize(objective, n_trials=remaining, timeout=left)
        if interrupted:
            if isinstance(interrupted[0], PluginError):
                raise interrupted[0]
            raise KeyboardInterrupt
