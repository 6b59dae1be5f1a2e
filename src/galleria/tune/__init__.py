"""Settings chosen on the user's own data: ``galleria.tune_gallery(store, labels)`` and the settings file.

- :func:`tune_gallery` searches plain retrieval, αQE and every re-ranking method with Optuna (seeded TPE) on
  validation splits of a labelled gallery store, and returns a :class:`TuneResult` (extra
  ``galleria[tune]``).
- :func:`read_settings` reads a settings file back as a :class:`~galleria.evaluation.RetrievalConfig`
  (``evaluate --settings``, ``search --settings``, ``serve --settings``); :func:`write_settings`
  writes one. Neither needs optuna.

``galleria.tune`` is this package; the function is ``tune_gallery``. Before galleria 0.3 the function
was also called ``galleria.tune``: calling the package still runs it, with a DeprecationWarning, and
``galleria.tune.tune`` stays an alias of :func:`tune_gallery`. Both go in a later release.
"""

from __future__ import annotations

import sys
import types
import warnings
from typing import Any

from galleria.tune._constants import METRICS, SEARCH_METHODS
from galleria.tune._splits import score_lists
from galleria.tune.result import TuneResult
from galleria.tune.search import tune, tune_gallery
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
    "tune_gallery",
    "write_settings",
]


class _CallableModule(types.ModuleType):
    """Deprecated: ``galleria.tune(...)`` calls :func:`tune_gallery` with a DeprecationWarning."""

    def __call__(self, *args: Any, **kwargs: Any) -> TuneResult:
        warnings.warn(
            "calling galleria.tune(...) is deprecated (galleria 0.3); call galleria.tune_gallery(...)",
            DeprecationWarning,
            stacklevel=2,
        )
        return tune_gallery(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
