"""Regenerate the parameter tables of docs/components.md from the declarations (run from the root)."""

from __future__ import annotations

from pathlib import Path

from galleria.cli.methods import with_tables

if __name__ == "__main__":
    path = Path(__file__).resolve().parent.parent / "docs" / "components.md"
    path.write_text(with_tables(path.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {path}")
