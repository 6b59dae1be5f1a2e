"""What the tuner found: :class:`TuneResult`, its trials, verdict and settings file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from galleria.retrieval import RetrievalConfig
from galleria.tune._constants import GUARD_MARGIN


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
