"""One retrieval path between the re-rankers and everything that answers queries.

- :class:`RetrievalConfig`: a re-ranking method by name with its parameters, αQE, pool and tail;
  :meth:`RetrievalConfig.from_settings` / :meth:`RetrievalConfig.settings` read and write settings.
- :class:`Searcher`: search → αQE → pool → re-rank → tail on one store, adaptive values read from
  that store's gallery; every caller (API, CLI, evaluation, page, tuner) answers through it.
"""

from __future__ import annotations

from galleria.rerank.base import PRESETS
from galleria.retrieval.config import DEFAULT_POOL, RetrievalConfig, standard_configs
from galleria.retrieval.searcher import QUERY_KINDS, Searcher

__all__ = ["DEFAULT_POOL", "PRESETS", "QUERY_KINDS", "RetrievalConfig", "Searcher", "standard_configs"]
