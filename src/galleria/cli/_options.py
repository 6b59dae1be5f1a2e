"""Options shared by ``build``, ``search``, ``evaluate`` and ``demo``, and their checks.

Numbers are taken as text by argparse and converted here, so a bad value is reported as one line
naming the option (a :class:`CliError`, exit code 2) rather than argparse's usage dump.
"""

from __future__ import annotations

from galleria.cli._embedder_options import (
    EMBEDDER_HELP,
    add_embedder_options,
    embedder_settings,
    make_embedder,
    parse_embedder_spec,
    say,
)
from galleria.cli._parse import (
    add_deprecated_alias,
    check_existing_file,
    check_existing_folder,
    parse_float,
    parse_int,
)
from galleria.cli._rerank_options import (
    PRECOMPUTE_RERANK_CHOICES,
    RERANK_METHOD_CHOICES,
    add_expand_options,
    add_report_options,
    add_rerank_options,
    add_settings_option,
    expand_settings,
    rerank_settings,
    settings_config,
)
from galleria.cli._store_options import (
    add_index_param_option,
    add_load_options,
    add_store_options,
    index_params,
    load_store,
    parse_index_param,
)
from galleria.retrieval.config import DEFAULT_POOL
from galleria.viewer.text import shorten_middle

__all__ = [
    "DEFAULT_POOL",
    "EMBEDDER_HELP",
    "PRECOMPUTE_RERANK_CHOICES",
    "RERANK_METHOD_CHOICES",
    "add_deprecated_alias",
    "add_embedder_options",
    "add_expand_options",
    "add_index_param_option",
    "add_load_options",
    "add_report_options",
    "add_rerank_options",
    "add_settings_option",
    "add_store_options",
    "check_existing_file",
    "check_existing_folder",
    "embedder_settings",
    "expand_settings",
    "index_params",
    "load_store",
    "make_embedder",
    "parse_embedder_spec",
    "parse_float",
    "parse_index_param",
    "parse_int",
    "rerank_settings",
    "say",
    "settings_config",
    "shorten_middle",
]
