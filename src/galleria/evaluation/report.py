"""Present evaluation results: a text table, ``metrics.json``, ``report.md``, ``pr_curve.png`` and HTML.

The JSON schema is documented in ``docs/report-schema.md``; :data:`SCHEMA` names its version.
Every file is written atomically (a temporary file in the output folder, then ``os.replace``).
"""

from __future__ import annotations

import hashlib
import html
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from galleria._files import atomic_write_bytes
from galleria._json import dumps as strict_dumps
from galleria.evaluation.per_query import FILE_NAME, QueryResults, query_results_bytes
from galleria.evaluation.pipeline import ConfigResult
from galleria.viewer.thumbnails import make_thumbnail

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "SCHEMA",
    "ContactSheet",
    "ReportFiles",
    "contact_sheets",
    "format_table",
    "markdown_table",
    "pr_curve_figure",
    "report_html",
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
    html: Path | None = None
    queries: Path | None = None


#: Results shown per list on a contact sheet, and contact sheets in a report.
SHEET_DEPTH = 10
SHEET_COUNT = 20
#: Longest side of a contact sheet thumbnail, in pixels.
SHEET_THUMBNAIL = 96


@dataclass(frozen=True)
class ContactSheet:
    """One query of the HTML report: its image and label, and two ranked lists of gallery paths.

    ``before`` and ``after`` are the first results of the two configurations compared (plain and
    re-ranked); ``labels`` gives the label of every path shown, so relevant results are marked.
    """

    query: str
    query_label: str
    before: list[str]
    after: list[str]
    labels: Mapping[str, str] = field(default_factory=dict)


def contact_sheets(
    queries: Sequence[str],
    query_labels: Sequence[str],
    before: Sequence[Sequence[str]],
    after: Sequence[Sequence[str]],
    gallery_labels: Mapping[str, str],
    *,
    count: int = SHEET_COUNT,
    depth: int = SHEET_DEPTH,
) -> list[ContactSheet]:
    """The ``count`` queries whose first ``depth`` results changed most from ``before`` to ``after``.

    Change is measured by :func:`galleria.viewer.rank_changes` (results new to the list first, then
    positions that changed); ties keep query order, and unchanged queries are left out.

    Examples
    --------
    >>> sheets = contact_sheets(["q1", "q2"], ["a", "b"], [["x", "y"], ["x", "y"]], [["x", "y"], ["y", "z"]],
    ...                         {"x": "a", "y": "b", "z": "b"})
    >>> [sheet.query for sheet in sheets], sheets[0].after
    (['q2'], ['y', 'z'])
    """
    from galleria.viewer.compare import rank_changes

    scored = []
    for position, (old, new) in enumerate(zip(before, after, strict=True)):
        change = rank_changes(list(old[:depth]), list(new[:depth]))
        if change != (0, 0):
            scored.append((-change[0], -change[1], position))
    scored.sort()
    sheets = []
    for _, _, position in scored[:count]:
        old, new = list(before[position][:depth]), list(after[position][:depth])
        sheets.append(
            ContactSheet(
                query=queries[position],
                query_label=str(query_labels[position]),
                before=old,
                after=new,
                labels={path: str(gallery_labels[path]) for path in old + new if path in gallery_labels},
            )
        )
    return sheets


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


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; }
th, td { border: 1px solid #ccc; padding: 0.3rem 0.6rem; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
.sheet { border-top: 1px solid #ddd; padding: 0.6rem 0; }
.sheet h3 { font-size: 0.95rem; margin: 0 0 0.3rem; font-weight: normal; }
.row { display: flex; gap: 4px; align-items: center; margin: 3px 0; }
.row .name { width: 6.5rem; font-size: 0.8rem; color: #555; }
.row img { width: 72px; height: 72px; object-fit: contain; background: #f2f2f2; border: 3px solid #d33; }
.row img.hit { border-color: #2e9e48; }
.row img.query { border-color: #333; }
.note { color: #555; font-size: 0.9rem; }
"""


def _thumbnail_name(path: str) -> str:
    return "thumbs/" + hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:20] + ".jpg"


def report_html(
    results: Sequence[ConfigResult],
    meta: Mapping[str, Any],
    title: str,
    sheets: Sequence[ContactSheet] = (),
    *,
    compared: tuple[str, str] = ("plain", "re-ranked"),
    images: Mapping[str, str] | None = None,
) -> str:
    """The HTML report: summary table, settings, PR curves (``pr_curve.png``) and contact sheets.

    ``images`` maps each image path of the sheets to the relative file name of its thumbnail (a
    path without one is shown by name only).
    """
    images = images or {}
    esc = html.escape
    header = ["Configuration", *(name for _, name in _COLUMNS)]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{esc(title)}</h1>",
        "<h2>Summary</h2>",
        '<table id="summary">',
        "<thead><tr>" + "".join(f"<th>{esc(cell)}</th>" for cell in header) + "</tr></thead>",
        "<tbody>",
    ]
    for row in _rows(results):
        cells = [f"<td>{esc(row[0])}</td>", *(f'<td class="number">{esc(cell)}</td>' for cell in row[1:])]
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts += [
        "</tbody>",
        "</table>",
        '<p class="note">Recall@K: share of queries with a relevant result (same label) among the first K. '
        "mAP@100: AP@100 normalised by min(R, 100), R the relevant gallery images. MRR: reciprocal rank "
        "of the first relevant result within the first 100. ms/query: wall time per query, reading and "
        "embedding the query included.</p>",
        "<h2>Settings</h2>",
        "<ul>",
        *(f"<li><b>{esc(str(key))}</b>: {esc(_describe(value))}</li>" for key, value in meta.items()),
        *(
            f"<li><code>{esc(result.config.name)}</code> — {esc(result.config.title)}</li>"
            for result in results
        ),
        "</ul>",
        "<h2>Precision-recall</h2>",
        '<p><img src="pr_curve.png" alt="Interpolated precision-recall curves" width="640" height="480"></p>',
    ]
    if sheets:
        parts += [
            "<h2>Queries the re-ranking changed most</h2>",
            f'<p class="note">The {len(sheets)} queries whose first {len(sheets[0].before)} results changed '
            f"most from {esc(compared[0])} to {esc(compared[1])}. Green frame: same label as the query "
            "(relevant); red: another label.</p>",
        ]

    def picture(path: str, css: str, label: str) -> str:
        caption = f"{path} ({label})"
        if path in images:
            return (
                f'<img class="{css}" src="{esc(images[path])}" alt="{esc(caption)}" title="{esc(caption)}">'
            )
        return f'<span class="{css}" title="{esc(caption)}">{esc(os.path.basename(path))}</span>'

    for number, sheet in enumerate(sheets, start=1):

        def sheet_row(name: str, paths: Sequence[str], sheet: ContactSheet = sheet) -> str:
            cells = []
            for path in paths:
                label = sheet.labels.get(path, "?")
                cells.append(picture(path, "hit" if label == sheet.query_label else "miss", label))
            hits = sum(1 for path in paths if sheet.labels.get(path) == sheet.query_label)
            title = f'<span class="name">{esc(name)} ({hits}/{len(paths)})</span>'
            return f'<div class="row">{title}{"".join(cells)}</div>'

        parts += [
            f'<div class="sheet" id="sheet-{number}">',
            f"<h3>{number}. query <code>{esc(sheet.query)}</code>, "
            f"label <b>{esc(sheet.query_label)}</b></h3>",
            '<div class="row"><span class="name">query</span>'
            + picture(sheet.query, "query", sheet.query_label)
            + "</div>",
            sheet_row(compared[0], sheet.before),
            sheet_row(compared[1], sheet.after),
            "</div>",
        ]
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)


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
    thumbnails: dict[str, bytes] = {}
    for sheet in sheets:
        for path in [sheet.query, *sheet.before, *sheet.after]:
            if path not in thumbnails:
                try:
                    thumbnails[path] = make_thumbnail(path, SHEET_THUMBNAIL)
                except OSError:
                    thumbnails[path] = b""  # shown by name
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
