"""Present evaluation results: a text table, ``metrics.json``, ``report.md``, ``pr_curve.png`` and HTML.

The JSON schema is documented in ``docs/report-schema.md``; :data:`SCHEMA` names its version.
Every file is written atomically (a temporary file in the output folder, then ``os.replace``).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from galleria._files import atomic_write_bytes
from galleria._json import dumps as strict_dumps
from galleria._moved import moved_names
from galleria.evaluation._html import (
    _thumbnail_name as _thumbnail_name,
)
from galleria.evaluation._html import (
    report_html as report_html,
)
from galleria.evaluation._query_types import FILE_NAME, QueryResults
from galleria.evaluation._tables import (
    _report_markdown as _report_markdown,
)
from galleria.evaluation._tables import (
    results_payload as results_payload,
)
from galleria.evaluation.per_query import query_results_bytes
from galleria.evaluation.pipeline import ConfigResult
from galleria.evaluation.sheets import (
    SHEET_THUMBNAIL as SHEET_THUMBNAIL,
)
from galleria.evaluation.sheets import (  # moved there; importable from here as before
    ContactSheet as ContactSheet,
)
from galleria.viewer.thumbnails import make_thumbnail

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["ContactSheet", "ReportFiles", "pr_curve_figure", "report_html", "results_payload", "write_report"]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(
    __name__,
    {
        "SCHEMA": "galleria.evaluation",
        "SHEET_COUNT": "galleria.evaluation.sheets",
        "SHEET_DEPTH": "galleria.evaluation.sheets",
        "contact_sheets": "galleria.evaluation.sheets",
        "format_table": "galleria.evaluation",
        "markdown_table": "galleria.evaluation",
    },
)


@dataclass(frozen=True)
class ReportFiles:
    """Paths of the files :func:`write_report` wrote."""

    report: Path
    metrics: Path
    pr_curve: Path
    html: Path | None = None
    queries: Path | None = None


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
            "the precision-recall plot needs matplotlib; install the demo extra: pip install -e '.[demo]'"
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


def _sheet_thumbnails(sheets: Sequence[ContactSheet]) -> dict[str, bytes]:
    """Each image of the sheets as thumbnail bytes (empty for one that cannot be read: shown by name)."""
    thumbnails: dict[str, bytes] = {}
    for sheet in sheets:
        for path in [sheet.query, *sheet.before, *sheet.after]:
            if path not in thumbnails:
                try:
                    thumbnails[path] = make_thumbnail(path, SHEET_THUMBNAIL)
                except OSError:
                    thumbnails[path] = b""  # shown by name
    return thumbnails


def write_report(
    out_dir: str | os.PathLike[str],
    results: Sequence[ConfigResult],
    meta: Mapping[str, Any],
    *,
    title: str = "galleria evaluation",
    sheets: Sequence[ContactSheet] = (),
    compared: tuple[str, str] = ("plain", "re-ranked"),
    per_query: QueryResults | None = None,
) -> ReportFiles:
    """Write ``report.md``, ``metrics.json``, ``pr_curve.png`` and ``report.html`` into ``out_dir``.

    The folder is created if missing. ``report.html`` holds the summary table, the settings, the PR
    curves and the contact ``sheets`` (see :func:`contact_sheets`), whose thumbnails are written
    beside it in ``thumbs/``, so the folder is self-contained.

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
    sheets : sequence of ContactSheet
        The queries to show in ``report.html``, with the two lists compared.
    compared : (str, str)
        Names of the two configurations the sheets compare.
    per_query : QueryResults, optional
        Per-query results, written as ``queries.json`` (what ``galleria serve --eval`` reads).

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
    metrics_bytes = (strict_dumps(payload, indent=2, sort_keys=True) + "\n").encode("utf-8")
    queries_bytes = None if per_query is None else query_results_bytes(per_query)
    report_bytes = _report_markdown(results, meta, title).encode("utf-8")
    png_bytes = _pr_curve_png(results, title)
    thumbnails = _sheet_thumbnails(sheets)
    images = {path: _thumbnail_name(path) for path, data in thumbnails.items() if data}
    html_bytes = report_html(results, meta, title, sheets, compared=compared, images=images).encode("utf-8")
    folder.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(
        folder / "report.md",
        folder / "metrics.json",
        folder / "pr_curve.png",
        folder / "report.html",
        None if per_query is None else folder / FILE_NAME,
    )
    if images:
        (folder / "thumbs").mkdir(exist_ok=True)
    for path, name in images.items():
        atomic_write_bytes(folder / name, thumbnails[path])
    atomic_write_bytes(files.metrics, metrics_bytes)
    if files.queries is not None and queries_bytes is not None:
        atomic_write_bytes(files.queries, queries_bytes)
    atomic_write_bytes(files.pr_curve, png_bytes)
    atomic_write_bytes(files.report, report_bytes)
    assert files.html is not None
    atomic_write_bytes(files.html, html_bytes)
    return files
