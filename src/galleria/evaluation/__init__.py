"""Evaluate retrieval on labelled queries: the pipeline behind ``galleria demo`` and ``galleria evaluate``.

- :class:`RetrievalConfig` / :func:`standard_configs`: plain retrieval, αQE, and αQE + k-reciprocal
  re-ranking on a pool of candidates (the README's benchmark table).
- :func:`evaluate_retrieval`: runs the configurations on a built store and returns one
  :class:`ConfigResult` each (Recall@1, Recall@5, mAP@100, MRR, ms/query, PR curve).
- :func:`write_report`, :func:`format_table`, :func:`results_payload`: ``report.md``,
  ``metrics.json`` (schema in ``docs/report-schema.md``) and ``pr_curve.png``.
"""

from __future__ import annotations

from galleria.evaluation._query_reading import read_query_results
from galleria.evaluation._query_types import FILE_NAME
from galleria.evaluation._tables import SCHEMA, format_table, markdown_table, results_payload
from galleria.evaluation.pipeline import METRIC_DEPTH, ConfigResult, evaluate_retrieval
from galleria.evaluation.report import ReportFiles, write_report
from galleria.retrieval.config import RetrievalConfig, standard_configs

__all__ = [
    "FILE_NAME",
    "METRIC_DEPTH",
    "SCHEMA",
    "ConfigResult",
    "ReportFiles",
    "RetrievalConfig",
    "evaluate_retrieval",
    "format_table",
    "markdown_table",
    "read_query_results",
    "results_payload",
    "standard_configs",
    "write_report",
]
