"""The report's HTML page: the table, the contact sheets and the precision-recall curve."""

from __future__ import annotations

import hashlib
import html
import os
from collections.abc import Mapping, Sequence
from typing import Any

from galleria.evaluation._tables import _COLUMNS, _describe, _rows, _settings, report_warnings
from galleria.evaluation.pipeline import ConfigResult
from galleria.evaluation.sheets import ContactSheet

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
.warnings { border-left: 4px solid #c80; background: #fff6e0; padding: 0.2rem 1rem; margin: 1rem 0; }
.warnings h2 { font-size: 1.1rem; margin: 0.4rem 0; }
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
    parts = _summary_parts(results, meta, title)
    parts += _sheet_parts(sheets, compared, images or {})
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)


def _summary_parts(results: Sequence[ConfigResult], meta: Mapping[str, Any], title: str) -> list[str]:
    """The page's head, the summary table, the settings and the PR curve."""
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
    ]
    warned = report_warnings(meta)
    if warned:
        parts += [
            '<section class="warnings" id="warnings">',
            "<h2>Warnings</h2>",
            "<ul>",
            *(f'<li class="warning">{esc(line)}</li>' for line in warned),
            "</ul>",
            "</section>",
        ]
    parts += [
        "<h2>Settings</h2>",
        "<ul>",
        *(f"<li><b>{esc(key)}</b>: {esc(_describe(value))}</li>" for key, value in _settings(meta)),
        *(
            f"<li><code>{esc(result.config.name)}</code> — {esc(result.config.title)}</li>"
            for result in results
        ),
        "</ul>",
        "<h2>Precision-recall</h2>",
        '<p><img src="pr_curve.png" alt="Interpolated precision-recall curves" width="640" height="480"></p>',
    ]
    return parts


def _picture(path: str, css: str, label: str, images: Mapping[str, str]) -> str:
    """An image of a sheet: its thumbnail, or its name when it has none."""
    esc = html.escape
    caption = f"{path} ({label})"
    if path in images:
        return f'<img class="{css}" src="{esc(images[path])}" alt="{esc(caption)}" title="{esc(caption)}">'
    return f'<span class="{css}" title="{esc(caption)}">{esc(os.path.basename(path))}</span>'


def _sheet_row(name: str, paths: Sequence[str], sheet: ContactSheet, images: Mapping[str, str]) -> str:
    """One ranked list of a sheet, each image framed as relevant (hit) or not (miss)."""
    cells = []
    for path in paths:
        label = sheet.labels.get(path, "?")
        cells.append(_picture(path, "hit" if label == sheet.query_label else "miss", label, images))
    hits = sum(1 for path in paths if sheet.labels.get(path) == sheet.query_label)
    title = f'<span class="name">{html.escape(name)} ({hits}/{len(paths)})</span>'
    return f'<div class="row">{title}{"".join(cells)}</div>'


def _sheet_parts(
    sheets: Sequence[ContactSheet], compared: tuple[str, str], images: Mapping[str, str]
) -> list[str]:
    """The contact sheets: per query, the query and its two lists compared."""
    esc = html.escape
    parts: list[str] = []
    if sheets:
        parts += [
            "<h2>Queries the re-ranking changed most</h2>",
            f'<p class="note">The {len(sheets)} queries whose first {len(sheets[0].before)} results changed '
            f"most from {esc(compared[0])} to {esc(compared[1])}. Green frame: same label as the query "
            "(relevant); red: another label.</p>",
        ]
    for number, sheet in enumerate(sheets, start=1):
        parts += [
            f'<div class="sheet" id="sheet-{number}">',
            f"<h3>{number}. query <code>{esc(sheet.query)}</code>, "
            f"label <b>{esc(sheet.query_label)}</b></h3>",
            '<div class="row"><span class="name">query</span>'
            + _picture(sheet.query, "query", sheet.query_label, images)
            + "</div>",
            _sheet_row(compared[0], sheet.before, sheet, images),
            _sheet_row(compared[1], sheet.after, sheet, images),
            "</div>",
        ]
    return parts
