"""Assemble ``docs/benchmarks.md`` from the sections the benchmark scripts write.

Each ``benchmarks/bench_<area>.py`` writes its latest figures to ``docs/benchmarks/<area>.md``;
this script puts them together, in the order of the data path, under one introduction.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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

The latest figures of the scripts in `benchmarks/`, each measured side by side in one run on the
project's 2-core, 24 GB machine (no GPU; `OPENBLAS_CORETYPE` set, which slows numpy — ratios, not
absolute times, are the point). Regenerate with `make bench`; each script also takes `--quick` for
a smoke run. Targets come from the issues; a target that was missed says so.

"""


def _demote(text: str) -> str:
    """Shift a section's headings so that its top heading is a level-2 heading."""
    lines = text.strip().splitlines()
    top = min((len(line) - len(line.lstrip("#")) for line in lines if line.startswith("#")), default=2)
    shift = max(0, 2 - top)
    return "\n".join("#" * shift + line if line.startswith("#") else line for line in lines)


def main() -> None:
    parts = [INTRO]
    for name in SECTIONS:
        section = ROOT / "docs" / "benchmarks" / f"{name}.md"
        if section.exists():
            parts.append(_demote(section.read_text(encoding="utf-8")) + "\n\n")
    (ROOT / "docs" / "benchmarks.md").write_text("".join(parts).rstrip() + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
