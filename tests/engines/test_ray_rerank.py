"""Distributed approximate re-ranking on a local Ray equals the one-process stream bit for bit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the galleria[ray] extra is not installed")

from galleria.engines.ray_rerank import ray_rerank_approximate  # noqa: E402
from galleria.rerank import approximate  # noqa: E402
from galleria.rerank.approximate import iter_k_reciprocal_rerank_approximate  # noqa: E402


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(9)
    centres = rng.normal(size=(10, 12))
    probe = centres[rng.integers(0, 10, 45)] + 0.8 * rng.normal(size=(45, 12))
    gallery = centres[rng.integers(0, 10, 300)] + 0.8 * rng.normal(size=(300, 12))
    return probe.astype(np.float32), gallery.astype(np.float32)


@pytest.mark.parametrize("in_flight", [1, 2, 5])
def test_ray_blocks_equal_the_one_process_stream(
    local_ray: None, monkeypatch: pytest.MonkeyPatch, in_flight: int
) -> None:
    probe, gallery = _data()
    monkeypatch.setattr(approximate, "_OUTPUT_ELEMENTS", 4 * 300)  # blocks of 4 probes: 12 tasks
    settings = {"k1": 9, "k2": 4, "graph": "exact"}
    local = list(iter_k_reciprocal_rerank_approximate(probe, gallery, **settings))
    spread = list(ray_rerank_approximate(probe, gallery, in_flight=in_flight, **settings))
    assert len(spread) == len(local) == 12
    for (rows, block), (ray_rows, ray_block) in zip(local, spread, strict=True):
        assert rows.tolist() == ray_rows.tolist()
        assert block.tobytes() == ray_block.tobytes()


def test_bad_in_flight_is_refused_before_any_work() -> None:
    probe, gallery = _data()
    with pytest.raises(ValueError, match="in_flight"):
        ray_rerank_approximate(probe, gallery, in_flight=0)


class _Dying(approximate.PreparedApproximate):
    """Kills its worker process the first ``deaths`` times block ``start == 8`` is computed."""

    def __init__(self, inner: approximate.PreparedApproximate, marker: str, deaths: int) -> None:
        super().__init__(inner.source, inner.scales, inner.jaccard, inner.mode)
        self.marker = marker
        self.deaths = deaths

    def block(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        import os
        from pathlib import Path

        if start == 8:
            seen = Path(self.marker)
            count = int(seen.read_text()) if seen.exists() else 0
            if count < self.deaths:
                seen.write_text(str(count + 1))
                os._exit(1)  # the worker dies mid-task
        return super().block(start, stop)


@pytest.mark.parametrize("deaths", [1, 10])
def test_a_killed_worker_is_retried_or_the_run_fails_naming_the_block(
    local_ray: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, deaths: int
) -> None:
    import sys

    from galleria.engines import ray_rerank

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    probe, gallery = _data()
    monkeypatch.setattr(approximate, "_OUTPUT_ELEMENTS", 4 * 300)
    settings = {"k1": 9, "k2": 4, "graph": "exact"}
    inner = approximate.prepare_k_reciprocal_approximate(probe, gallery, **settings)
    dying = _Dying(inner, str(tmp_path / "deaths"), deaths)
    local = list(iter_k_reciprocal_rerank_approximate(probe, gallery, **settings))
    if deaths <= ray_rerank.MAX_RETRIES:
        spread = list(ray_rerank._run(dying, None, 2))
        assert [block.tobytes() for _, block in spread] == [block.tobytes() for _, block in local]
        assert (tmp_path / "deaths").read_text() == str(deaths)
    else:
        with pytest.raises(RuntimeError, match="re-ranking probes 8:12 failed on Ray"):
            list(ray_rerank._run(dying, None, 2))
