"""Deprecated location of :class:`~galleria.retrieval.RetrievalConfig` and :func:`standard_configs`.

They moved to :mod:`galleria.retrieval` (galleria 0.2.0); these names stay importable from here.
"""

from __future__ import annotations

from galleria.retrieval.config import DEFAULT_POOL, RetrievalConfig, standard_configs

__all__ = ["DEFAULT_POOL", "RetrievalConfig", "standard_configs"]
