"""Present evaluation results: a text table, the ``metrics.json`` payload, ``report.md`` and ``pr_curve.png``.

The JSON schema is documented in ``docs/report-schema.md``; :data:`SCHEMA` names its version.
Every file is written atomically (a temporary file in the output folder, then ``os.replace``).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from galleria._files import atomic_write_bytes
from galleria.evaluation.pipeline import ConfigResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "SCHEMA",
    "ReportFiles",
    "format_table",
    "markdown_table",
    "pr_curve_figure",
    "results_payload",
    "write_report",
]

#: Identifier and version of the ``metrics.json`` / ``--json`` layout.
SCHEMA = "galleria.evaluation/1"

_COLUMNS: tuple[tuple[str, str], ...] = (
    ("recall@1", "Recall@1"),
    ("recall@5", "Recall@5"),
    ("map@100", "mAP@100"),
    ("mrr", "MRR"),
    ("ms_per_query", "ms/query"),
)


@dataclass(frozen=True)
class ReportFiles:
    """Paths of the files :func:`write_report` wrote."""

    report: Path
    metrics: Path
    pr_curve: Path


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


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return ", ".join(f"{key}={_describe(item)}" for key, item in value.items())
    return str(value)


def _report_markdown(results: Sequence[ConfigResult], meta: Mapping[str, Any], title: str) -> str:
    lines = [f"# {title}", "", markdown_table(results), ""]
    lines.append(
        "Recall@K: share of queries with a relevant result (same label) among the first K. "
        "mAP@100: AP@100 normalised by min(R, 100), R the relevant gallery images. "
        "MRR: reciprocal rank of the first relevant result within the first 100. "
        "ms/query: wall time per query, reading and embedding the query included."
    )
    lines += ["", "## Settings", ""]
    lines.extend(f"- **{key}**: {_describe(value)}" for key, value in meta.items())
    lines += ["", "## Configurations", ""]
    for result in results:
        lines.append(
            f"- `{result.config.name}` — {result.config.title}: {_describe(result.config.settings())}"
        )
    lines += ["", "![Interpolated precision-recall curves](pr_curve.png)", ""]
    return "\n".join(lines)


def pr_curve_figure(results: Sequence[ConfigResult], title: str) -> Figure:
    """The interpolated precision-recall curves of ``results`` as a matplotlib figure (no pyplot).

    One line per configuration, labelled with its title in the legend; recall on x, interpolated
    precision on y.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - the demo extra is installed in tests
        raise ImportError(
            "the precision-recall plot needs matplotlib; install the demo extra: pip install 'galleria[demo]'"
        ) from error
    figure = Figure(figsize=(6.4, 4.8), dpi=100)
    FigureCanvasAgg(figure)  # attaches an Agg canvas without touching pyplot's global state
    axes = figure.add_subplot()
    for result in results:
        axes.plot(result.pr_recall, result.pr_precision, marker=".", label=result.config.title)
    axes.set_xlabel("Recall")
    axes.set_ylabel("Interpolated precision")
    axes.set_xlim(0.0, 1.0)
    axes.set_ylim(0.0, 1.02)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="lower left", fontsize="small")
    figure.tight_layout()
    return figure


def _pr_curve_png(results: Sequence[ConfigResult], title: str) -> bytes:
    buffer = io.BytesIO()
    pr_curve_figure(results, title).savefig(buffer, format="png")
    return buffer.getvalue()


def write_report(
    out_dir: str | os.PathLike[str],
    results: Sequence[ConfigResult],
    meta: Mapping[str, Any],
    *,
    title: str = "galleria evaluation",
) -> ReportFiles:
    """Write ``report.md``, ``metrics.json`` and ``pr_curve.png`` into ``out_dir`` (created if missing).

    Parameters
    ----------
    out_dir : str or os.PathLike
        The output folder.
    results : sequence of ConfigResult
        What :func:`~galleria.evaluation.evaluate_retrieval` returned.
    meta : mapping
        JSON-able context (dataset, embedder, index, ...) stored in ``metrics.json`` and listed in
        ``report.md``.
    title : str
        Heading of the report and the plot.

    Raises
    ------
    TypeError
        If ``out_dir`` is not a path.
    OSError
        If the folder cannot be created or written (for instance, a file is in the way).
    """
    if not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"out_dir must be a str or os.PathLike path, got {type(out_dir).__name__}")
    payload = results_payload(results, meta)
    folder = Path(os.fspath(out_dir))
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"output folder {str(folder)!r} is not a directory")
    # Render everything before writing anything, so a failure leaves the folder as it was.
    metrics_bytes = (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode("utf-8")
    report_bytes = _report_markdown(results, meta, title).encode("utf-8")
    png_bytes = _pr_curve_png(results, title)
    folder.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(folder / "report.md", folder / "metrics.json", folder / "pr_curve.png")
    atomic_write_bytes(files.metrics, metrics_bytes)
    atomic_write_bytes(files.pr_curve, png_bytes)
    atomic_write_bytes(files.report, report_bytes)
    return files
