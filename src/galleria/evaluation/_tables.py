"""The report's tables: one row per configuration, as text, markdown and the results payload."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from galleria.evaluation.pipeline import ConfigResult

#: Identifier and version of the ``metrics.json`` / ``--json`` layout.
SCHEMA = "galleria.evaluation/1"


_COLUMNS: tuple[tuple[str, str], ...] = (
    ("recall@1", "Recall@1"),
    ("recall@5", "Recall@5"),
    ("map@100", "mAP@100"),
    ("mrr", "MRR"),
    ("ms_per_query", "ms/query"),
)


def results_payload(results: Sequence[ConfigResult], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON document of an evaluation: ``schema``, the ``meta`` entries, and ``configurations``.

    ``meta`` (dataset, embedder, index...) must be JSON-able and must not use the keys ``schema``
    or ``configurations``.
    """
    reserved = {"schema", "configurations"} & set(meta)
    if reserved:
        raise ValueError(f"meta must not use the reserved keys {sorted(reserved)!r}")
    return {"schema": SCHEMA, **meta, "configurations": [result.to_dict() for result in results]}


def _rows(results: Sequence[ConfigResult]) -> list[list[str]]:
    rows = []
    for result in results:
        entry = result.to_dict()
        cells = [result.config.title]
        for key, _ in _COLUMNS:
            cells.append(f"{entry[key]:.2f}" if key == "ms_per_query" else f"{entry[key]:.4f}")
        rows.append(cells)
    return rows


def format_table(results: Sequence[ConfigResult]) -> str:
    """A plain-text table, one row per configuration, for the terminal.

    Examples
    --------
    >>> print(format_table([]))
    configuration  Recall@1  Recall@5  mAP@100  MRR  ms/query
    """
    header = ["configuration", *(title for _, title in _COLUMNS)]
    rows = _rows(results)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            row[0].ljust(widths[0]),
            *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)),
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def markdown_table(results: Sequence[ConfigResult]) -> str:
    """The same table in Markdown."""
    header = ["Configuration", *(title for _, title in _COLUMNS)]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * len(_COLUMNS)) + "|",
    ]
    lines.extend("| " + " | ".join(row) + " |" for row in _rows(results))
    return "\n".join(lines)


#: The key of an evaluation's ``meta`` whose lines (a list of str) the reports show as warnings.
WARNINGS_KEY = "warnings"


def _describe(value: Any) -> str:
    """``value`` as report text: a mapping as ``key=value, ...``, a list as its items (``none`` when
    empty), never a Python repr of a list."""
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return ", ".join(f"{key}={_describe(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_describe(item) for item in value) if value else "none"
    return str(value)


def report_warnings(meta: Mapping[str, Any]) -> list[str]:
    """The warning lines an evaluation's ``meta`` holds (under :data:`WARNINGS_KEY`), as text."""
    found = meta.get(WARNINGS_KEY)
    if found is None:
        return []
    if isinstance(found, str):
        return [found]
    return [str(line) for line in found]


def _settings(meta: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The ``meta`` entries the reports list under Settings (the warnings have their own section)."""
    return [(str(key), value) for key, value in meta.items() if key != WARNINGS_KEY]


def _report_markdown(results: Sequence[ConfigResult], meta: Mapping[str, Any], title: str) -> str:
    lines = [f"# {title}", "", markdown_table(results), ""]
    lines.append(
        "Recall@K: share of queries with a relevant result (same label) among the first K. "
        "mAP@100: AP@100 normalised by min(R, 100), R the relevant gallery images. "
        "MRR: reciprocal rank of the first relevant result within the first 100. "
        "ms/query: wall time per query, reading and embedding the query included."
    )
    warned = report_warnings(meta)
    if warned:
        lines += ["", "## Warnings", ""]
        lines.extend(f"- {line}" for line in warned)
    lines += ["", "## Settings", ""]
    lines.extend(f"- **{key}**: {_describe(value)}" for key, value in _settings(meta))
    lines += ["", "## Configurations", ""]
    for result in results:
        lines.append(
            f"- `{result.config.name}` — {result.config.title}: {_describe(result.config.settings())}"
        )
    lines += ["", "![Interpolated precision-recall curves](pr_curve.png)", ""]
    return "\n".join(lines)
