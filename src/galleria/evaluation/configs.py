"""Deprecated alias of :mod:`galleria.retrieval.config` (moved in galleria 0.2.0); removed in 0.4.0."""

from __future__ import annotations

import warnings

from galleria.retrieval.config import DEFAULT_POOL, RetrievalConfig, standard_configs

__all__ = ["DEFAULT_POOL", "RetrievalConfig", "standard_configs"]

warnings.warn(
    "galleria.evaluation.configs is deprecated and is removed in galleria 0.4.0: "
    "import from galleria.retrieval",
    DeprecationWarning,
    stacklevel=2,
)
