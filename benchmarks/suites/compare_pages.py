"""Show the suites' figures before and after a rerun, side by side: ``docs/benchmarks/before-after.md``.

Run the suites (``make bench``, or one suite at a time), then
``python benchmarks/suites/compare_pages.py --before REV`` (or ``--before DIR`` for the pages another
checkout wrote, ``--after DIR`` likewise): for every page a suite writes
(``docs/benchmarks/<area>.md``), the tables of the page as committed at ``REV`` are matched with the
tables of the page now — a table by its header row, a row by its first cell, a column by its header —
and every cell holding a number in both is listed with its ratio after / before. Pages that did not
change are named, not listed. Each page gets a summary: how many figures, how many equal, the
median ratio, how many lie outside the noise band (``--band``, default 0.8–1.25), and which of those
are worse (a time or a size up, a rate down, as far as the column's or row's header tells).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
from pathlib import Path

from collect_report import ROOT, SECTIONS

NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?", re.IGNORECASE)
PIPE = re.compile(r"(?<!\\)\|")  # a cell border, not an escaped pipe inside a cell
Table = dict[tuple[str, str], str]


def first_number(cell: str) -> float | None:
    """The first number written in a table cell (thousands commas allowed), or None."""
    match = NUMBER.search(cell.replace("**", ""))
    if match is None:
        return None
    try:
        return float(match.group(0).replace(",", ""))
    except ValueError:
        return None


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in PIPE.split(line.strip().strip("|"))]


def tables(text: str) -> dict[tuple[str, ...], Table]:
    """Every markdown table of ``text``: header row -> {(row label, column header): cell}."""
    found: dict[tuple[str, ...], Table] = {}
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if not lines[index].startswith("|"):
            index += 1
            continue
        header = tuple(_cells(lines[index]))
        body: Table = found.setdefault(header, {})
        index += 1
        while index < len(lines) and lines[index].startswith("|"):
            row = _cells(lines[index])
            index += 1
            if set("".join(row)) <= set("-: "):
                continue  # the separator row
            for column, cell in zip(header[1:], row[1:], strict=False):
                body.setdefault((row[0], column), cell)
    return found


def compare(before: str, after: str) -> list[tuple[str, str, float, float]]:
    """(row, column, before, after) for every cell with a number in both versions of a page."""
    pairs = []
    old_tables = tables(before)
    for header, new_body in tables(after).items():
        old_body = old_tables.get(header, {})
        for (row, column), cell in new_body.items():
            new_value = first_number(cell)
            old_cell = old_body.get((row, column))
            old_value = None if old_cell is None else first_number(old_cell)
            if new_value is not None and old_value is not None:
                pairs.append((row, column, old_value, new_value))
    return pairs


RATE = re.compile(r"/s\b|per second|qps|speed-?up|×|÷|\bvs\b", re.IGNORECASE)
COST = re.compile(r"\b(ms|s|seconds?|time|min|minutes?|mb|mib|gb|gib|peak|rss|memory)\b", re.IGNORECASE)


def better_when(column: str) -> int:
    """+1 when a larger figure in ``column`` is better (a rate), -1 when smaller is (a time, a size),
    0 when the header does not say (counts, accuracies, settings)."""
    if RATE.search(column):
        return 1
    if COST.search(column):
        return -1
    return 0


def worse(row: str, column: str, old: float, new: float, band: tuple[float, float]) -> bool:
    """Whether ``new`` is worse than ``old`` beyond the noise band, as far as the headers tell."""
    ratio = _ratio(old, new)
    direction = better_when(column) or better_when(row)
    if ratio is None or direction == 0:
        return False
    return ratio < band[0] if direction > 0 else ratio > band[1]


def _ratio(old: float, new: float) -> float | None:
    return None if old == 0 else new / old


def page_section(name: str, pairs: list[tuple[str, str, float, float]], band: tuple[float, float]) -> str:
    """The markdown section of one page: its summary line, then every figure side by side."""
    ratios = [r for old, new in ((p[2], p[3]) for p in pairs) if (r := _ratio(old, new)) is not None]
    equal = sum(1 for pair in pairs if pair[2] == pair[3])
    outside = sum(1 for r in ratios if not band[0] <= r <= band[1])
    median = f"{statistics.median(ratios):.3f}" if ratios else "—"
    worst = [f"{row} / {column}" for row, column, old, new in pairs if worse(row, column, old, new, band)]
    lines = [
        f"## {name}\n",
        f"{len(pairs)} figures, {equal} equal, median after / before {median}, "
        f"{outside} outside {band[0]}–{band[1]}; worse beyond it (a time or size up, a rate down): "
        + (f"{len(worst)}: " + "; ".join(worst) if worst else "none")
        + ".\n",
        "| row | column | before | after | after / before |",
        "|---|---|---|---|---|",
    ]
    for row, column, old, new in pairs:
        ratio = _ratio(old, new)
        shown = "—" if ratio is None else f"{ratio:.3f}"
        mark = " **worse**" if worse(row, column, old, new, band) else ""
        lines.append(f"| {row} | {column} | {old:g} | {new:g} | {shown}{mark} |")
    return "\n".join(lines) + "\n"


def _before_page(before: str, path: Path) -> str | None:
    """The page ``path`` as committed at the git revision ``before``, or read from the folder
    ``before`` (a page of another checkout); None when it has no such page."""
    folder = Path(before)
    if folder.is_dir():
        page = folder / path.name
        return page.read_text(encoding="utf-8") if page.exists() else None
    shown = subprocess.run(
        ["git", "show", f"{before}:{path.as_posix()}"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return shown.stdout if shown.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--before", required=True, help="the git revision of the 'before' pages, or a folder holding them"
    )
    parser.add_argument(
        "--after", default=None, help="a folder holding the 'after' pages (default: docs/benchmarks)"
    )
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "before-after.md"))
    parser.add_argument("--band", type=float, nargs=2, default=(0.8, 1.25))
    parser.add_argument("pages", nargs="*", default=list(SECTIONS))
    args = parser.parse_args()
    band = (args.band[0], args.band[1])
    parts = [
        "# Benchmarks before and after\n",
        f"Each suite's page at `{args.before}` against its rerun; written by "
        "`benchmarks/suites/compare_pages.py`. Absolute times on this shared 2-core machine move "
        "with the load; same-run ratios are the figures to trust.\n",
    ]
    unchanged = []
    for name in args.pages:
        path = Path("docs") / "benchmarks" / f"{name}.md"
        before = _before_page(args.before, path)
        current = Path(args.after) / f"{name}.md" if args.after else ROOT / path
        if before is None or not current.exists():
            continue
        after = current.read_text(encoding="utf-8")
        if after == before:
            unchanged.append(name)
            continue
        parts.append(page_section(name, compare(before, after), band))
    if unchanged:
        parts.append("Not rerun (page unchanged): " + ", ".join(unchanged) + ".\n")
    Path(args.output).write_text("\n".join(parts), encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
