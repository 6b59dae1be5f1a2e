"""The attack corpus over store files and side files (``tests/_support/attack_corpus.py``): no bad
outcome in any row. The stress runner ``tests/security/stress_attack_corpus.py`` runs it ten times
larger, one
process per row."""

from __future__ import annotations

from pathlib import Path

import pytest

from _support.attack_corpus import ROWS, run_row
from _support.extras import need


@pytest.mark.parametrize("row", list(ROWS))
def test_no_bad_outcome(row: str, tmp_path: Path) -> None:
    if row.startswith("shards"):
        need("pyarrow")
    tally = run_row(row, tmp_path, scale=1)
    assert tally.tries > 0 and tally.bad == 0, tally.examples
