"""Every relative link in the repository's markdown (README, docs/, examples/) points at a file that exists,
and a ``#fragment`` at a heading of it (issue 35 §4)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The markdown that users read: the README, the docs and the examples.
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("*.md")],
)
#: ``[text](target)`` and ``![alt](target "title")``; a reference definition ``[name]: target``.
INLINE = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.replace("`", "")).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a markdown page: one per heading (repeats numbered, as GitHub does), and HTML ids."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found.update(re.findall(r"""<a\s+(?:name|id)=["']([^"']+)["']""", text))
    return found


def links(page: Path) -> list[str]:
    """The link targets of a page, code blocks and code spans left out."""
    text = CODE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    return INLINE.findall(text) + REFERENCE.findall(text)


def broken(page: Path) -> list[str]:
    problems = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):  # https:, mailto:, …
            continue
        path_part, _, fragment = target.partition("#")
        resolved = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not resolved.exists():
            problems.append(f"{target}: no such file")
            continue
        if fragment and resolved.suffix == ".md" and unquote(fragment).lower() not in anchors(resolved):
            where = resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved.name
            problems.append(f"{target}: no heading #{fragment} in {where}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    problems = broken(page)
    assert not problems, f"broken links in {page.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_the_checker_finds_missing_files_and_headings(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# The `b` page: αQE\n\n## Usage\n\n## Usage\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md) [ok](b.md#the-b-page-αqe) [ok](b.md#usage-1) [ok](https://x.org/y) [ok](#top)\n"
        "# Top\n`[skipped](nowhere.md)`\n```\n[skipped](nowhere.md)\n```\n"
        "[gone](c.md) [gone](b.md#nothing) ![gone](img/x.png)\n[ref]: d.md\n"
    )
    assert broken(page) == [
        "c.md: no such file",
        "b.md#nothing: no heading #nothing in b.md",
        "img/x.png: no such file",
        "d.md: no such file",
    ]
