"""Write ``docs/benchmarks.md``: the index of the pages the benchmark suites write.

Each suite writes its latest figures to ``docs/benchmarks/<area>.md``; this script lists those pages,
in the order of the data path, with each page's first line of figures, under one introduction.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = (
    "metrics",
    "index",
    "decoding",
    "store",
    "rerank",
    "rerank_methods",
    "protocols",
    "demo",
    "real",
    "scale",
    "ray",
)
INTRO = """# Benchmarks

The latest figures of the suites in `benchmarks/suites/` (one-off studies live in
`benchmarks/experiments/`), each measured side by side in one run on the
project's 2-core, 24 GB machine (no GPU; `OPENBLAS_CORETYPE` set, which slows numpy — ratios, not
absolute times, are the point). Regenerate with `make bench` (`make bench-quick`
for a smoke run). Targets come from the issues; a target that was missed says so.

"""


ROUNDS = """
## Rounds and one-off studies

[benchmarks/rounds.md](benchmarks/rounds.md) keeps, issue by issue, what the one-off studies of
`benchmarks/experiments/` and the reruns of the suites measured. Two more pages are written by hand:
[the defaults](benchmarks/defaults.md) (with Lite0: [defaults-lite0.md](benchmarks/defaults-lite0.md)) \
and [the ECN sweep](benchmarks/ecn-sweep.md).
[benchmarks/previous-collection.md](benchmarks/previous-collection.md) is the collected page as it
stood before it became this index (older runs of some suites).
[benchmarks/before-after.md](benchmarks/before-after.md) sets the suites' figures before and after the
rooms move side by side (written by `benchmarks/suites/compare_pages.py`).
"""


def _title(text: str, name: str) -> str:
    """A page's first heading, without its hashes (the page's name if it has none)."""
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return name


def main() -> None:
    parts = [INTRO, "## The suites' pages\n\n"]
    for name in SECTIONS:
        section = ROOT / "docs" / "benchmarks" / f"{name}.md"
        if section.exists():
            title = _title(section.read_text(encoding="utf-8"), name)
            parts.append(f"- [{title}](benchmarks/{name}.md)\n")
    parts.append(ROUNDS)
    (ROOT / "docs" / "benchmarks.md").write_text("".join(parts).rstrip() + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
