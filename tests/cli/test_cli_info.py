"""``galleria info`` on a store holding galleria's own records: DBA augmentation, the offline decoupled
diffusion and the statistics, read from the extension slot and from a file of the older layout alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _support.store_files import read_parts, write_old_layout
from _support.store_support import store_with_records
from galleria.cli import main


@pytest.mark.parametrize("old", [False, True], ids=["slot", "old-layout"])
def test_info_shows_the_records_a_store_keeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: bool
) -> None:
    store = store_with_records(tmp_path / "new.safetensors")
    file = tmp_path / "new.safetensors"
    if old:
        file = write_old_layout(file, tmp_path / "old.safetensors")
        assert "offline_diffusion" in read_parts(file)[0]  # the records at the top of the header
    offline, statistics = store._offline_diffusion, store._rerank_statistics
    assert offline is not None and statistics is not None

    assert main(["info", str(file), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["rerank"] == {
        "augmentation": {"method": "dba", "neighbors": 2, "alpha": 1.5},
        "precomputed": {"method": "decoupled-diffusion", "params": offline.params},
        "statistics": statistics.record(),
    }
    assert info["extensions"] == []  # every record read by its codec: none listed as unread

    assert main(["info", str(file)]) == 0
    line = [row for row in capsys.readouterr().out.splitlines() if row.startswith("re-ranking:")]
    assert len(line) == 1
    assert "vectors augmented by DBA (neighbors=2, alpha=1.5)" in line[0]
    assert "decoupled-diffusion offline part kept (k=3, truncation=5" in line[0]
    assert f"({statistics.n_sample} sampled items)" in line[0]
