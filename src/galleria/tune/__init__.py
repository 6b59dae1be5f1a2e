"""Settings chosen on the user's own data: ``galleria.tune(store, labels)`` and the settings file.

- :func:`tune` searches plain retrieval, αQE and every re-ranking method with Optuna (seeded TPE) on
  validation splits of a labelled gallery store, and returns a :class:`TuneResult` (extra
  ``galleria[tune]``).
- :func:`read_settings` reads a settings file back as a :class:`~galleria.evaluation.RetrievalConfig`
  (``evaluate --settings``, ``search --settings``, ``serve --settings``); :func:`write_settings`
  writes one. Neither needs optuna.

The module itself is callable, so ``import galleria; galleria.tune(store, labels)`` works whether or
not ``galleria.tune`` has been imported as a package.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from galleria.tune.search import METRICS, SEARCH_METHODS, TuneResult, score_lists, tune
from galleria.tune.settings import config_from_settings, read_settings, read_settings_file, write_settings

__all__ = [
    "METRICS",
    "SEARCH_METHODS",
    "TuneResult",
    "config_from_settings",
    "read_settings",
    "read_settings_file",
    "score_lists",
    "tune",
    "write_settings",
]


class _CallableModule(types.ModuleType):
    """``galleria.tune(...)`` calls :func:`galleria.tune.search.tune`."""

    def __call__(self, *args: Any, **kwargs: Any) -> TuneResult:
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
