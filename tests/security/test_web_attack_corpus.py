"""Issue 15 "Done when": the attack corpus of uploads and serve routes, run small, has 0 bad answers."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")

from _support.web_attacks import markdown_table, run_corpus


def test_attack_corpus_of_uploads_and_serve_routes_has_no_bad_answer() -> None:
    rows = run_corpus(tries=4, seed=15)
    assert len(rows) == 8 and all(row.tries > 0 for row in rows)
    assert all(row.tries == row.clean + row.bad for row in rows)
    bad = {row.name: row.examples for row in rows if row.bad}
    assert not bad, markdown_table(rows) + "\n" + repr(bad)
