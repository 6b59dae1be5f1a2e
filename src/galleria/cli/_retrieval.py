"""The command line's retrieval options as one :class:`~galleria.retrieval.RetrievalConfig`.

``--expand`` (``--alpha``, ``--neighbors``), ``--rerank`` (``--rerank-method``, ``--rerank-preset``,
``--k1``, ``--k2``, ``--lambda``, ``--pool``) and ``--settings FILE`` become the configuration the
:class:`~galleria.retrieval.Searcher` answers with, so ``search`` and ``evaluate`` read them alike.
Values not given are the preset's: the gallery's adaptive rules by default, the paper's with
``--rerank-preset paper`` (αQE's α 3, n 50 included).
"""

from __future__ import annotations

import argparse
from typing import Any

from galleria.cli._common import CliError
from galleria.cli._rerank_options import expand_settings, rerank_settings, settings_config
from galleria.retrieval import RetrievalConfig

__all__ = ["config_from_args", "used_settings"]


def config_from_args(args: argparse.Namespace, name: str = "search") -> RetrievalConfig:
    """The configuration of the retrieval options (or of ``--settings FILE``), checked."""
    tuned: RetrievalConfig | None = settings_config(args)
    if tuned is not None:
        return tuned
    rerank = rerank_settings(args)
    expand = expand_settings(args) or {}
    preset = getattr(args, "rerank_preset", None) or "adaptive"
    options: dict[str, Any] = {
        "query_expansion": bool(getattr(args, "expand", False)),
        "expansion_alpha": expand.get("expansion_alpha"),
        "expansion_neighbors": expand.get("expansion_neighbors"),
        "rerank_preset": preset,
    }
    if rerank is not None:
        method = rerank.get("rerank_method", "k-reciprocal")
        if "rerank_params" in rerank:
            params = dict(rerank["rerank_params"])
        else:
            params = {key: rerank[key] for key in ("k1", "k2", "lambda_value") if key in rerank}
        options.update(rerank=True, rerank_method=method, rerank_params=params, pool=rerank["pool"])
    try:
        return RetrievalConfig(name, **options)
    except (TypeError, ValueError) as error:
        raise CliError(str(error)) from None


def used_settings(
    config: RetrievalConfig, given: RetrievalConfig | None = None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The αQE and re-ranking values a resolved ``config`` used, as ``search --json`` prints them
    (with ``"rerank_preset": "adaptive"`` when ``given``, the configuration asked for, left the
    method's values to the gallery)."""
    expand = (
        {"expansion_alpha": config.expansion_alpha, "expansion_neighbors": config.expansion_neighbors}
        if config.query_expansion
        else None
    )
    if not config.rerank:
        return expand, None
    rerank: dict[str, Any] = {}
    if given is not None and given.adaptive and given.rerank_preset == "adaptive" and not given.rerank_params:
        rerank["rerank_preset"] = "adaptive"
    if config.rerank_method != "k-reciprocal":
        rerank["rerank_method"] = config.rerank_method
    rerank.update(config.rerank_params, pool=config.pool)
    return expand, rerank
