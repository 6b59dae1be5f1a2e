"""build_with_ray starting its own local Ray: galleria's options, and never over a running Ray."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the galleria[ray] extra is not installed")
pytest.importorskip("pyarrow", reason="the galleria[ray] extra is not installed")

from _support.store_support import make_images  # noqa: E402
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder, build_with_ray  # noqa: E402
from galleria.engines.ray_build import LOCAL_RAY_OPTIONS, init_local_ray  # noqa: E402


def test_init_local_ray_argument_errors() -> None:
    assert not ray.is_initialized()
    with pytest.raises(ValueError, match="num_cpus"):
        init_local_ray(num_cpus=0)
    with pytest.raises(ValueError, match="num_gpus"):
        init_local_ray(num_cpus=1, num_gpus=-1)
    with pytest.raises(ValueError, match="num_gpus"):
        init_local_ray(num_cpus=1, num_gpus=True)  # type: ignore[arg-type]
    assert not ray.is_initialized()
    assert LOCAL_RAY_OPTIONS["include_dashboard"] is False


def test_build_with_ray_starts_a_local_ray_with_galleria_options(tmp_path: Path) -> None:
    assert not ray.is_initialized()
    gallery = make_images(tmp_path / "images", 12, size=10)
    embedder = PixelEmbedder(size=8, batch_size=4)
    try:
        store = build_with_ray(gallery, embedder, tmp_path / "shards", num_actors=1, num_cpus=2)
        assert ray.is_initialized()
        resources = ray.cluster_resources()
        assert resources["CPU"] == 2
        assert resources.get("GPU", 0) == 0  # num_gpus=0: no probing for GPUs
        with pytest.raises(RuntimeError, match="already running"):
            init_local_ray(num_cpus=2)
        # A second build reuses the running Ray (no second ray.init).
        again = build_with_ray(gallery, embedder, tmp_path / "shards-2", num_actors=1, num_cpus=1)
        assert ray.cluster_resources()["CPU"] == 2
    finally:
        ray.shutdown()
    threaded = InMemoryImageEmbeddingStore(gallery, embedder)
    threaded.build_store(progress=False)
    np.testing.assert_array_equal(store.embeddings, threaded.embeddings)
    np.testing.assert_array_equal(again.embeddings, threaded.embeddings)
