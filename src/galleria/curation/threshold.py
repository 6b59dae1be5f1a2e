"""The near-duplicate threshold of a store, calibrated on its own neighbour distances.

A fraction (:data:`CALIBRATION_FRACTION`) of a low quantile (:data:`CALIBRATION_QUANTILE`) of the
distances from every image to its :data:`DEFAULT_K` nearest neighbours — how far apart the gallery's
closest different images lie — held between the embedder's floor and cap (:data:`THRESHOLD_BOUNDS`).
A function of the store's vectors alone (no sampling): one store state, one threshold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "CALIBRATION_FRACTION",
    "CALIBRATION_QUANTILE",
    "DEFAULT_K",
    "FALLBACK_BOUNDS",
    "SEARCH_FACTOR",
    "THRESHOLD_BOUNDS",
    "calibrated_threshold",
    "calibration_of",
    "check_threshold",
    "store_threshold",
    "threshold_bounds",
]

#: Neighbours per image searched for near copies, and read for the calibration (a group larger than
#: this is still found whole: a representative whose k neighbours are all within the threshold is
#: searched exhaustively).
DEFAULT_K = 10
#: The quantile of the store's neighbour distances (every image to its ``DEFAULT_K`` nearest) the
#: threshold is read from; low, so it speaks of the gallery's closest different images, and pooled
#: over the k neighbours, so copies (one neighbour of each copied image) barely move it.
CALIBRATION_QUANTILE = 0.05
#: The threshold is this fraction of that quantile (then held between the embedder's bounds). Fitted
#: on planted copies in digits and Tux Paint's stamps (``benchmarks/experiments/bench_duplicates.py``;
#: docs/benchmarks/duplicates.md): the largest round fraction keeping pair precision ≥ 0.9 there.
CALIBRATION_FRACTION = 0.5
#: (floor, cap) of the threshold per embedder type (a cosine distance). The floor keeps resizes and
#: re-encodings of dense galleries (their copies lie within it); the cap keeps sparse galleries from
#: grouping look-alikes (the old fixed defaults, pixel 0.1 and Lite0 0.15, gave pair precision 0.71
#: and 0.37 on Tux Paint's stamps with planted copies). CLIP's are not measured (no CLIP weights
#: ship in a package): it takes the CNN's.
THRESHOLD_BOUNDS: dict[str, tuple[float, float]] = {
    "pixel": (0.005, 0.05),
    "timm": (0.005, 0.1),
    "clip": (0.005, 0.1),
}
#: Pairs within this many thresholds are candidates when the pictures are checked
#: (:mod:`galleria.curation.verify`): a copy the vectors place further (a crop, a half-size icon) is
#: still found, and the check, not the distance, tells it from a look-alike.
SEARCH_FACTOR = 8.0
#: The bounds of a store whose embedder is unknown (vectors imported from elsewhere).
FALLBACK_BOUNDS = (0.005, 0.05)


def check_threshold(value: Any) -> float:
    """A near-duplicate threshold: a number in [0, 2] (TypeError / ValueError naming it otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"threshold must be a number in [0, 2], got {value!r} ({type(value).__name__})")
    number = float(value)
    if not 0.0 <= number <= 2.0:  # NaN fails too
        raise ValueError(f"threshold must lie in [0, 2], got {value!r}")
    return number


def threshold_bounds(embedder_config: Any) -> tuple[float, float]:
    """The (floor, cap) of the embedder a store records (its config's ``type``), else the fallback."""
    kind = embedder_config.get("type") if isinstance(embedder_config, dict) else None
    return THRESHOLD_BOUNDS.get(kind, FALLBACK_BOUNDS) if isinstance(kind, str) else FALLBACK_BOUNDS


def calibrated_threshold(distances: np.ndarray, bounds: tuple[float, float]) -> tuple[float, dict[str, Any]]:
    """The threshold a gallery's neighbour ``distances`` (n, k) call for, and how it was read.

    ``CALIBRATION_FRACTION`` × the ``CALIBRATION_QUANTILE`` quantile of every distance, held in
    ``bounds`` (floor, cap). Deterministic: no sampling. With no distances (fewer than two images)
    the floor.

    Examples
    --------
    >>> value, basis = calibrated_threshold(np.array([[0.04, 0.3], [0.04, 0.5], [0.2, 0.3]]), (0.005, 0.05))
    >>> round(value, 4), basis["rule"]
    (0.02, 'fraction')
    """
    floor, cap = bounds
    values = np.asarray(distances, dtype=np.float64).ravel()
    values = values[np.isfinite(values)]
    basis: dict[str, Any] = {
        "quantile": CALIBRATION_QUANTILE,
        "fraction": CALIBRATION_FRACTION,
        "floor": floor,
        "cap": cap,
        "distances": int(values.size),
    }
    if values.size == 0:
        return floor, {**basis, "neighbour_quantile": None, "rule": "floor"}
    level = float(np.quantile(values, CALIBRATION_QUANTILE, method="lower"))
    raw = CALIBRATION_FRACTION * level
    rule = "floor" if raw < floor else "cap" if raw > cap else "fraction"
    return float(min(max(raw, floor), cap)), {**basis, "neighbour_quantile": level, "rule": rule}


_FROM_STORE: Any = object()  # the store's own embedder


def calibration_of(
    store: Any, distances: np.ndarray, config: Any = _FROM_STORE
) -> tuple[float, dict[str, Any]]:
    """:func:`calibrated_threshold` of a store's (n, k) neighbour ``distances``, its embedder's bounds."""
    if config is _FROM_STORE:
        from galleria.embedders import embedder_config

        embedder = getattr(store, "embedder", None)
        config = embedder_config(embedder) if embedder is not None else None
    value, basis = calibrated_threshold(distances[:, :DEFAULT_K], threshold_bounds(config))
    kind = config.get("type") if isinstance(config, dict) else None
    return value, {"source": "calibrated", "embedder": kind if isinstance(kind, str) else None, **basis}


def store_threshold(
    store: Any, *, store_file: Any = None, embedder_config: Any = _FROM_STORE
) -> tuple[float, dict[str, Any]]:
    """The near-copy threshold ``store`` calls for (calibrated on its neighbour graph) and its basis.

    ``embedder_config``: the embedder's saved config, when the store holds no embedder of its own
    (``galleria info`` describes a store without loading its model).
    """
    from galleria.store.graph import neighbor_graph

    if len(store.paths) < 2:
        return calibration_of(store, np.empty((0, 0)), embedder_config)
    _, distances = neighbor_graph(store, DEFAULT_K, store_file=store_file)
    return calibration_of(store, distances, embedder_config)
