"""The verdict of :func:`galleria.tune_gallery`: the settings that beat plain retrieval, checked on every
validation split, and the one recommended (or plain retrieval, with the reason)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from galleria.retrieval import RetrievalConfig
from galleria.tune._constants import _FIRST_CHECKED, _STEADY_SHARE, GUARD_MARGIN, MAX_CHECKED
from galleria.tune._study import Trials

__all__ = ["Checked", "check_on_splits", "ranked_keys", "recommendation"]


def ranked_keys(trials: Trials, plain_key: str, plain_value: float) -> list[str]:
    """The settings that beat plain on the tuning split, in the order they are checked on every split."""
    short_of_guard, seen = trials.short_of_guard, trials.seen
    ranked = sorted(  # those that kept the guard on the tuning split first, then the best value
        (key for key in seen if key != plain_key and seen[key] > plain_value),
        key=lambda key: (short_of_guard(key) > 0, -seen[key]),  # stable: ties keep the trial order
    )
    if trials.guard_metric:  # after the best few that kept it: the best that keep the first places
        kept = [key for key in ranked if short_of_guard(key) <= 0]
        leading = kept[:_FIRST_CHECKED]
        steady = [key for key in kept[_FIRST_CHECKED:] if trials.moved[key] <= _STEADY_SHARE]
        ranked = leading + steady + [key for key in ranked if key not in leading and key not in steady]
    return ranked


@dataclass
class Checked:
    """The settings checked on every split, and the best of them (plain retrieval when none beat it)."""

    best_config: RetrievalConfig
    best_value: float
    lifts: list[float]
    guard_diffs: list[float]
    beats: bool = False
    checked: list[dict[str, Any]] = field(default_factory=list)


def _differences(runs: list[Any], plain_runs: list[Any], metric: str) -> list[float]:
    return [round(r[metric] - p[metric], 6) for r, p in zip(runs, plain_runs, strict=True)]


def check_on_splits(
    trials: Trials,
    ranked: list[str],
    every: list[Any],
    plain_runs: list[Any],
    plain: tuple[RetrievalConfig, float],
) -> Checked:
    """Run the ranked settings (at most :data:`MAX_CHECKED`) on every split until one is eligible."""
    metric, guard_metric = trials.metric, trials.guard_metric
    splits = len(every)
    result = Checked(plain[0], plain[1], [0.0] * splits, [0.0] * splits if guard_metric else [])
    for key in ranked[:MAX_CHECKED]:
        config = trials.configs[key]
        runs = [split.run(config) for split in every]
        split_lifts = _differences(runs, plain_runs, metric)
        diffs = _differences(runs, plain_runs, guard_metric) if guard_metric else []
        low = float(np.mean(diffs) - np.std(diffs)) if diffs else 0.0
        eligible = float(np.mean(split_lifts)) > 0 and (not diffs or low >= -GUARD_MARGIN - 1e-12)
        result.checked.append(
            {
                "title": config.title,
                "settings": config.settings(),
                "value": round(trials.seen[key], 6),
                "lifts": split_lifts,
                "guard": diffs,
                "guard_low": round(low, 6),
                "eligible": eligible,
            }
        )
        if not result.checked[1:] or eligible:  # the best found is reported even when it is refused
            result.best_config, result.best_value = config, trials.seen[key]
            result.lifts, result.guard_diffs = split_lifts, diffs
        if eligible:
            result.beats = True
            break
    return result


def recommendation(result: Checked, metric: str, guard_metric: str | None) -> tuple[RetrievalConfig, str]:
    """The recommended configuration and the sentence that says why."""
    if result.beats:
        mean_lift = float(np.mean(result.lifts))
        return RetrievalConfig.from_settings(result.best_config.settings(), name="tuned"), (
            f"recommended: {result.best_config.title} (mean lift {mean_lift:+.4f} {metric} over plain "
            f"retrieval on {len(result.lifts)} validation split(s))"
        )
    if result.checked and guard_metric and any(float(np.mean(c["lifts"])) > 0 for c in result.checked):
        return RetrievalConfig("tuned"), (
            f"every setting that beat plain retrieval on {metric} lowered {guard_metric} on the "
            f"validation splits (by more than {GUARD_MARGIN} at the lower end); recommended: plain "
            "retrieval, without αQE or re-ranking"
        )
    return RetrievalConfig("tuned"), (
        f"no method beat plain retrieval on this gallery's validation splits ({metric}); "
        "recommended: plain retrieval, without αQE or re-ranking"
    )
