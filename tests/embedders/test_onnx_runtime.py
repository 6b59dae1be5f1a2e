"""The ONNX Runtime path of TimmEmbedder: preprocessing, equal vectors, verified cache, no torch at run time.

Real images: scikit-image's photos (a cat, an astronaut, coffee, a rocket) in several crops and sizes.
Every test uses its own model cache (``GALLERIA_MODEL_CACHE_DIR``), never the user's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch side needs the timm extra")
timm = pytest.importorskip("timm", reason="the torch side needs the timm extra")
ort = pytest.importorskip("onnxruntime", reason="the ONNX side needs the onnx extra")
pytest.importorskip("onnx", reason="exporting needs the onnx extra")

from PIL import Image  # noqa: E402

from galleria.embedders import TimmEmbedder, embedder_from_config  # noqa: E402
from galleria.embedders._cache import onnx_path, read_manifest  # noqa: E402
from galleria.embedders._preprocess import Preprocess, from_timm_config, prepare  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _photos() -> list[Image.Image]:
    from skimage import data

    photos = [np.asarray(data.chelsea()), np.asarray(data.astronaut()), np.asarray(data.coffee())]
    photos.append(np.asarray(data.rocket()))
    images = [Image.fromarray(photo) for photo in photos]
    cat = images[0]
    images += [
        cat.crop((0, 0, 451, 120)),  # wide
        cat.crop((0, 0, 97, 300)),  # tall, odd side
        cat.resize((40, 30)),  # smaller than the crop: upscaled
        cat.resize((256, 256)),  # already the resize size
    ]
    return images


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("model-cache")
    previous = os.environ.get("GALLERIA_MODEL_CACHE_DIR")
    os.environ["GALLERIA_MODEL_CACHE_DIR"] = str(folder)
    yield folder
    if previous is None:
        del os.environ["GALLERIA_MODEL_CACHE_DIR"]
    else:
        os.environ["GALLERIA_MODEL_CACHE_DIR"] = previous


@pytest.fixture(scope="module")
def pair(cache: Path) -> tuple[TimmEmbedder, TimmEmbedder]:
    options = {"pretrained": "imagenet", "batch_size": 3, "normalize": True}
    torch_side = TimmEmbedder("tf_efficientnet_lite0", runtime="torch", **options)
    onnx_side = TimmEmbedder("tf_efficientnet_lite0", runtime="onnx", **options)
    return torch_side, onnx_side


@pytest.mark.parametrize("model_name", ["tf_efficientnet_lite0", "test_efficientnet", "resnet18"])
def test_preprocessing_equals_timms_transform(model_name: str) -> None:
    model = timm.create_model(model_name, pretrained=False, num_classes=0)
    config = timm.data.resolve_data_config({}, model=model)
    transform = timm.data.create_transform(**config)
    spec = from_timm_config(config)
    assert spec is not None
    for image in _photos():
        expected = transform(image).numpy()
        actual = prepare(image, spec)
        assert actual.shape == expected.shape and actual.dtype == np.float32
        np.testing.assert_allclose(actual, expected, atol=2e-6, rtol=0)


def test_preprocessing_equals_open_clips_transform() -> None:
    open_clip = pytest.importorskip("open_clip", reason="needs the clip extra")
    _, _, transform = open_clip.create_model_and_transforms("ViT-B-32", pretrained=None)
    mean, std = open_clip.OPENAI_DATASET_MEAN, open_clip.OPENAI_DATASET_STD
    spec = Preprocess(224, 224, "bicubic", tuple(map(float, mean)), tuple(map(float, std)))  # type: ignore[arg-type]
    for image in _photos():
        np.testing.assert_allclose(prepare(image, spec), transform(image).numpy(), atol=2e-6, rtol=0)


def test_a_preprocessing_record_is_checked() -> None:
    good = Preprocess(256, 224, "bicubic", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)).to_dict()
    assert Preprocess.from_dict(good).crop == 224
    for key, value in [("crop", 10**6), ("resize", 100), ("interpolation", "lanczos"), ("std", [0, 1, 1])]:
        with pytest.raises(ValueError, match=key if key != "resize" else "crop"):
            Preprocess.from_dict(dict(good, **{key: value}))


def test_onnx_vectors_equal_torchs(pair: tuple[TimmEmbedder, TimmEmbedder]) -> None:
    torch_side, onnx_side = pair
    assert (torch_side.runtime, onnx_side.runtime) == ("torch", "onnx") and onnx_side.model is None
    images = _photos()
    expected, actual = torch_side.embed(images), onnx_side.embed(images)  # 3 parts: the helper thread runs
    assert actual.shape == expected.shape == (len(images), 1280)
    cosine_distance = 1.0 - np.sum(expected.astype(np.float64) * actual, axis=1)
    assert cosine_distance.max() <= 1e-4
    assert onnx_side.embed([]).shape == (0, 1280)


def test_both_runtimes_draft_large_jpegs_to_the_resize_before_the_crop(
    pair: tuple[TimmEmbedder, TimmEmbedder], tmp_path: Path
) -> None:
    from galleria.images.reading import draft_size_for, reader_for

    torch_side, onnx_side = pair
    assert torch_side.draft_size == onnx_side.draft_size == (256, 256)  # Lite0: 224 / 0.875
    assert draft_size_for(onnx_side) == (256, 256) and onnx_side.input_size == (224, 224)
    path = tmp_path / "photo.jpg"
    _photos()[1].resize((1600, 1200)).save(path, quality=90)
    pixels = reader_for(onnx_side)(str(path))
    assert pixels.shape == (300, 400, 3)  # 1/4 scale keeps 256 on each side; 1/8 would not
    assert reader_for(torch_side)(str(path)).shape == pixels.shape
    expected, actual = torch_side.embed([pixels]), onnx_side.embed([pixels])
    assert 1.0 - float(np.sum(expected.astype(np.float64) * actual)) <= 1e-4


def test_the_config_records_the_runtime_and_rebuilding_uses_it(
    pair: tuple[TimmEmbedder, TimmEmbedder],
) -> None:
    torch_side, onnx_side = pair
    assert torch_side.config()["runtime"] == "torch" and onnx_side.config()["runtime"] == "onnx"
    assert embedder_from_config(torch_side.config()).runtime == "torch"  # type: ignore[attr-defined]
    assert embedder_from_config(onnx_side.config()).runtime == "onnx"  # type: ignore[attr-defined]
    forced = embedder_from_config(torch_side.config(), runtime="onnx")
    assert forced.runtime == "onnx"  # type: ignore[attr-defined]
    older = {key: value for key, value in onnx_side.config().items() if key != "runtime"}
    assert embedder_from_config(older).runtime == "onnx"  # type: ignore[attr-defined]  # auto: cached, installed
    with pytest.raises(ValueError, match="runtime"):
        embedder_from_config(dict(onnx_side.config(), runtime="tensorrt"))
    with pytest.raises(ValueError, match="runtime must be one of"):
        TimmEmbedder("test_efficientnet", runtime="gpu")


def _damage(cache: Path, how: str) -> tuple[Path, bytes]:
    key = next(iter(read_manifest()))
    path = onnx_path(key)
    original = path.read_bytes()
    if how == "flip":
        data = bytearray(original)
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        path.write_bytes(original[:-10])
    return path, original


@pytest.mark.parametrize(("how", "message"), [("flip", "has sha256"), ("truncate", "holds .* bytes")])
def test_a_damaged_onnx_file_is_refused_before_onnxruntime_sees_it(
    pair: tuple[TimmEmbedder, TimmEmbedder],
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
    message: str,
) -> None:
    seen: list[object] = []
    real = ort.InferenceSession

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    path, original = _damage(cache, how)
    try:
        with pytest.raises(ValueError, match=message):
            TimmEmbedder("tf_efficientnet_lite0", pretrained="imagenet", runtime="onnx")
        assert seen == []
    finally:
        path.write_bytes(original)
    TimmEmbedder("tf_efficientnet_lite0", pretrained="imagenet", runtime="onnx")
    assert len(seen) == 1 and isinstance(seen[0], bytes)  # the verified bytes, never a path


def test_a_hostile_manifest_entry_is_refused(pair: tuple[TimmEmbedder, TimmEmbedder], cache: Path) -> None:
    manifest = cache / "onnx-manifest.json"
    original = manifest.read_bytes()
    record = json.loads(original)
    key = next(iter(record["models"]))
    try:
        for field, value in [("size", 1 << 40), ("size", -1), ("dim", 0), ("sha256", "../../etc/passwd")]:
            hostile = json.loads(original)
            hostile["models"][key][field] = value
            manifest.write_text(json.dumps(hostile))
            with pytest.raises(ValueError, match=field):
                TimmEmbedder("tf_efficientnet_lite0", pretrained="imagenet", runtime="onnx")
        manifest.write_text("{not json")
        with pytest.warns(RuntimeWarning, match="ignoring ONNX manifest"):
            assert read_manifest() == {}
    finally:
        manifest.write_bytes(original)


_NO_TORCH = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch.") or name in ("timm", "torchvision", "onnx"):
            raise ImportError("blocked: " + name)
        return None
sys.meta_path.insert(0, Block())
import numpy as np
from skimage import data
from galleria.embedders import TimmEmbedder, embedder_from_config
embedder = TimmEmbedder("tf_efficientnet_lite0", pretrained="imagenet")
vectors = embedder.embed([np.asarray(data.chelsea())])
again = embedder_from_config(embedder.config())
assert again.runtime == "onnx"
assert not any(name == "torch" or name.startswith("torch.") for name in sys.modules)
np.save(sys.argv[1], vectors)
print(embedder.runtime)
"""


def test_with_the_onnx_file_cached_no_torch_is_imported(
    pair: tuple[TimmEmbedder, TimmEmbedder], cache: Path, tmp_path: Path
) -> None:
    out = tmp_path / "vectors.npy"
    env = dict(os.environ, PYTHONPATH=SRC, GALLERIA_MODEL_CACHE_DIR=str(cache))
    result = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, str(out)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "onnx"
    from skimage import data

    expected = pair[0].embed([np.asarray(data.chelsea())])
    assert 1.0 - float(np.sum(expected * np.load(out))) <= 1e-4


def test_without_a_cached_file_and_without_torch_the_error_names_the_extra(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=SRC, GALLERIA_MODEL_CACHE_DIR=str(tmp_path))
    code = _NO_TORCH.split("import numpy")[0] + (
        "from galleria.embedders import TimmEmbedder\n"
        "try:\n    TimmEmbedder('tf_efficientnet_lite0', pretrained='imagenet')\n"
        "except ImportError as error:\n    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert "pip install" in result.stdout and "timm" in result.stdout, result.stderr[-2000:]


def test_the_imagenet_spelling_is_the_packaged_file() -> None:
    from galleria.embedders._runtime import shipped_file
    from galleria.embedders._weights import lite0_package_file

    assert shipped_file("tf_efficientnet_lite0", "imagenet") == lite0_package_file() is not None
    assert shipped_file("resnet18", "imagenet") is None
    assert shipped_file("tf_efficientnet_lite0", "in1k") is None


def test_clips_image_side_on_onnx_runtime_equals_torchs(cache: Path) -> None:
    pytest.importorskip("open_clip", reason="needs the clip extra")
    from galleria.embedders import ClipEmbedder

    torch_side = ClipEmbedder("ViT-S-32-alt", pretrained=None, device="cpu", batch_size=3)
    onnx_side = ClipEmbedder("ViT-S-32-alt", pretrained=None, device="cpu", batch_size=3, runtime="onnx")
    assert (torch_side.runtime, onnx_side.runtime) == ("torch", "onnx")
    images = _photos()
    expected, actual = torch_side.embed(images), onnx_side.embed(images)
    assert actual.shape == expected.shape
    assert (1.0 - np.sum(expected.astype(np.float64) * actual, axis=1)).max() <= 1e-4
    np.testing.assert_allclose(onnx_side.embed_text(["a cat"]), torch_side.embed_text(["a cat"]), atol=1e-6)
    assert "runtime" not in torch_side.config() and onnx_side.config()["runtime"] == "onnx"
    assert embedder_from_config(onnx_side.config()).runtime == "onnx"  # type: ignore[attr-defined]
    assert embedder_from_config(onnx_side.config(), runtime="torch").runtime == "torch"  # type: ignore[attr-defined]
