"""The evaluation report's pages: warnings are shown as text in their own section, lists as items."""

from __future__ import annotations

import html
import re

import numpy as np

from galleria.cli._evaluation_run import lowering_warnings
from galleria.evaluation import ConfigResult, standard_configs
from galleria.evaluation._html import report_html
from galleria.evaluation._tables import _report_markdown


def _results(recalls: tuple[float, float, float]) -> list[ConfigResult]:
    levels = np.linspace(0.0, 1.0, 11)
    return [
        ConfigResult(
            config=config,
            n_queries=10,
            recall_at_1=recalls[number],
            recall_at_5=0.8,
            map_at_100=(0.4, 0.5, 0.6)[number],
            mrr=0.6,
            ms_per_query=1.0,
            pr_recall=levels,
            pr_precision=np.linspace(1.0, 0.2, 11),
        )
        for number, config in enumerate(standard_configs())
    ]


def _warning_items(page: str) -> list[str]:
    section = re.search(r'<section class="warnings" id="warnings">(.*?)</section>', page, re.S)
    assert section is not None, page
    return [html.unescape(item) for item in re.findall(r'<li class="warning">(.*?)</li>', section.group(1))]


def test_report_html_shows_each_warning_as_a_line_of_text() -> None:
    results = _results((0.9, 0.9, 0.8))  # the re-ranked configuration lowers Recall@1 by 0.1
    warnings = lowering_warnings(results)
    assert len(warnings) == 2 and "lowers Recall@1 from 0.9000" in warnings[0]
    meta = {"seed": 3, "skipped": [], "warnings": warnings}
    page = report_html(results, meta, "Toy")
    assert _warning_items(page) == warnings
    assert "[&#x27;" not in page and "['" not in page  # never a Python list's repr
    assert "<b>warnings</b>" not in page  # not repeated among the settings
    assert "<li><b>skipped</b>: none</li>" in page  # an empty list reads as text too
    assert page.index('id="warnings"') < page.index("<h2>Settings</h2>")  # near the table, seen first


def test_report_html_without_warnings_has_no_warning_section() -> None:
    page = report_html(_results((0.9, 0.9, 0.9)), {"skipped": ["/g/a.png", "/g/b.png"]}, "Toy")
    assert 'id="warnings"' not in page
    assert "<li><b>skipped</b>: /g/a.png, /g/b.png</li>" in page


def test_report_markdown_lists_warnings_as_text() -> None:
    results = _results((0.9, 0.7, 0.9))
    warnings = lowering_warnings(results, hint=False)
    assert len(warnings) == 1
    text = _report_markdown(results, {"warnings": warnings, "skipped": ["/g/x.png"]}, "Toy")
    assert f"## Warnings\n\n- {warnings[0]}\n" in text
    assert "['" not in text and "- **skipped**: /g/x.png" in text
    assert "**warnings**" not in text
