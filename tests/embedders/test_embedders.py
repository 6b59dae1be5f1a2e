"""Tests of the embedders: PixelEmbedder, ClipEmbedder (random weights, offline) and the config registry."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image

from _support.extras import needs
from galleria.embedders import (
    ClipEmbedder,
    Embedder,
    PixelEmbedder,
    TextEmbedder,
    batch_size_of,
    embedder_config,
    embedder_from_config,
)

TINY_CLIP = "ViT-S-32-alt"  # the smallest open_clip architecture (~43 M parameters)


def images(count: int, seed: int = 0, size: tuple[int, int] = (40, 30)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8) for _ in range(count)]


# --------------------------------------------------------------------------- PixelEmbedder


def literal_pixel_embedding(image: np.ndarray, size: tuple[int, int], grayscale: bool) -> np.ndarray:
    """A slow transcription of the definition: resize, flatten, centre, L2-normalise."""
    pil = Image.fromarray(image).convert("L" if grayscale else "RGB").resize(size, Image.Resampling.BILINEAR)
    flat = np.asarray(pil, dtype=np.float64).reshape(-1)
    centred = flat - flat.mean()
    norm = np.sqrt((centred**2).sum())
    return centred / norm if norm > 0 else centred


@given(
    image=hnp.arrays(np.uint8, st.tuples(st.integers(1, 20), st.integers(1, 20), st.just(3))),
    width=st.integers(1, 9),
    height=st.integers(1, 9),
    grayscale=st.booleans(),
)
def test_pixel_embedding_matches_definition(
    image: np.ndarray, width: int, height: int, grayscale: bool
) -> None:
    embedder = PixelEmbedder(size=(width, height), grayscale=grayscale)
    vector = embedder.embed([image])
    assert vector.shape == (1, embedder.dim) == (1, width * height * (1 if grayscale else 3))
    assert vector.dtype == np.float32
    np.testing.assert_allclose(
        vector[0], literal_pixel_embedding(image, (width, height), grayscale), atol=1e-5
    )


def test_pixel_embedder_shapes_norms_and_inputs() -> None:
    embedder = PixelEmbedder(size=8)
    batch = images(5)
    vectors = embedder.embed(batch)
    assert vectors.shape == (5, 192) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(vectors.mean(axis=1), 0.0, atol=1e-6)
    # PIL images (any mode), a tuple and an (N, H, W, 3) array give the same vectors.
    np.testing.assert_allclose(embedder.embed([Image.fromarray(image) for image in batch]), vectors)
    np.testing.assert_allclose(embedder.embed(tuple(batch)), vectors)
    np.testing.assert_allclose(embedder.embed(np.stack(batch)), vectors)
    rgba = Image.fromarray(batch[0]).convert("RGBA")
    np.testing.assert_allclose(embedder.embed([rgba]), vectors[:1], atol=1e-6)
    # Non-contiguous arrays are fine.
    np.testing.assert_allclose(embedder.embed([np.asfortranarray(batch[1])]), vectors[1:2])
    assert embedder.embed([]).shape == (0, 192)
    constant = np.full((10, 10, 3), 7, np.uint8)
    np.testing.assert_array_equal(embedder.embed([constant]), 0.0)  # nothing to normalise


def test_pixel_embedder_is_scale_invariant_in_brightness() -> None:
    # Centring then normalising removes an offset and a scale of the pixel values.
    image = np.random.default_rng(3).integers(0, 100, size=(8, 8, 3), dtype=np.uint8)
    embedder = PixelEmbedder(size=8)
    brighter = (image.astype(np.int64) * 2 + 20).astype(np.uint8)
    np.testing.assert_allclose(embedder.embed([image]), embedder.embed([brighter]), atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"size": 0}, ValueError, "size"),
        ({"size": -3}, ValueError, "size"),
        ({"size": 2.5}, TypeError, "size"),
        ({"size": True}, TypeError, "size"),
        ({"size": (4, 4, 4)}, ValueError, "size"),
        ({"size": (4, 0)}, ValueError, r"size\[1\]"),
        ({"size": "32"}, TypeError, "size"),
        ({"grayscale": 1}, TypeError, "grayscale"),
        ({"grayscale": "yes"}, TypeError, "grayscale"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"batch_size": None}, TypeError, "batch_size"),
    ],
)
def test_pixel_embedder_constructor_errors(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        PixelEmbedder(**kwargs)


@pytest.mark.parametrize(
    ("batch", "error", "match"),
    [
        ([np.zeros((4, 4, 3), np.float32)], TypeError, r"images\[0\].*uint8"),
        ([np.zeros((4, 4), np.uint8)], ValueError, r"images\[0\].*\(H, W, 3\)"),
        ([np.zeros((4, 4, 4), np.uint8)], ValueError, r"images\[0\]"),
        ([np.zeros((0, 4, 3), np.uint8)], ValueError, r"images\[0\]"),
        ([np.zeros((4, 4, 3), np.uint8), "cat.jpg"], TypeError, r"images\[1\]"),
        (np.zeros((4, 4, 3), np.uint8), ValueError, "list"),
        ("cat.jpg", TypeError, "sequence"),
        (Image.new("RGB", (4, 4)), TypeError, "sequence"),
        (5, TypeError, "sequence"),
    ],
)
def test_pixel_embedder_input_errors(batch: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        PixelEmbedder(size=4).embed(batch)


def test_pixel_config_round_trip() -> None:
    embedder = PixelEmbedder(size=(6, 4), grayscale=True, batch_size=17)
    config = embedder_config(embedder)
    assert config == {"type": "pixel", "size": [6, 4], "grayscale": True, "batch_size": 17}
    rebuilt = embedder_from_config(json.loads(json.dumps(config)))
    assert isinstance(rebuilt, PixelEmbedder) and rebuilt.config() == config
    batch = images(3)
    np.testing.assert_array_equal(rebuilt.embed(batch), embedder.embed(batch))
    assert PixelEmbedder.from_config({"type": "pixel"}).config()["size"] == [32, 32]
    with pytest.raises(ValueError, match="unknown"):
        PixelEmbedder.from_config({"type": "pixel", "sise": 3})
    with pytest.raises(ValueError, match="type"):
        PixelEmbedder.from_config({"type": "clip"})
    with pytest.raises(ValueError, match="size"):
        PixelEmbedder.from_config({"type": "pixel", "size": [0, 3]})


def test_protocols_and_batch_size() -> None:
    embedder = PixelEmbedder(batch_size=12)
    assert isinstance(embedder, Embedder) and not isinstance(embedder, TextEmbedder)
    assert batch_size_of(embedder) == 12

    class Bare:
        def embed(self, images: Any) -> np.ndarray:
            return np.zeros((len(images), 2), np.float32)

    assert isinstance(Bare(), Embedder)
    assert batch_size_of(Bare()) == 32
    for size, expected in [(np.int64(5), 5), (True, 32), (0, 32), (2.0, 32), ("8", 32)]:
        bare = Bare()
        bare.batch_size = size  # type: ignore[attr-defined]
        assert batch_size_of(bare) == expected and type(batch_size_of(bare)) is int
    assert embedder_config(Bare()) is None


def test_registry_errors() -> None:
    with pytest.raises(ValueError, match="unknown embedder type 'resnet'"):
        embedder_from_config({"type": "resnet"})
    with pytest.raises(ValueError, match="None"):
        embedder_from_config({"size": 3})
    with pytest.raises(TypeError, match="mapping"):
        embedder_from_config(["pixel"])  # type: ignore[arg-type]

    class BadConfig:
        def embed(self, images: Any) -> np.ndarray:
            return np.zeros((len(images), 2), np.float32)

        def config(self) -> Any:
            return {"type": "mine", "thing": object()}

    with pytest.raises(TypeError, match="JSON"):
        embedder_config(BadConfig())


# --------------------------------------------------------------------------- ClipEmbedder


@pytest.fixture(scope="module")
def clip() -> ClipEmbedder:
    return ClipEmbedder(TINY_CLIP, pretrained=None, device="cpu", batch_size=3)


@needs("torch", "open_clip")
def test_clip_image_and_text_embeddings(clip: ClipEmbedder) -> None:
    batch = [*images(4, seed=1), Image.fromarray(images(1, seed=2, size=(300, 200))[0])]
    vectors = clip.embed(batch)  # batch_size 3: two forward passes
    assert vectors.shape == (5, clip.dim) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    texts = clip.embed_text(["a photo of a cat", "a dog", "", "a red car", "x"])
    assert texts.shape == (5, clip.dim) and texts.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(texts, axis=1), 1.0, rtol=1e-5)
    # One space: image-text cosine similarities are well defined and bounded.
    similarities = vectors @ texts.T
    assert similarities.shape == (5, 5) and np.all(np.abs(similarities) <= 1.0 + 1e-5)
    # Batching does not change results.
    np.testing.assert_allclose(clip.embed(batch[:2]), vectors[:2], atol=1e-5)
    assert clip.embed([]).shape == (0, clip.dim) and clip.embed_text([]).shape == (0, clip.dim)
    assert isinstance(clip, TextEmbedder) and batch_size_of(clip) == 3
    assert clip.device == "cpu"


@needs("torch", "open_clip")
def test_clip_random_weights_are_deterministic(clip: ClipEmbedder) -> None:
    other = ClipEmbedder(TINY_CLIP, pretrained=None, device="cpu")
    batch = images(2, seed=4)
    np.testing.assert_array_equal(other.embed(batch), clip.embed(batch))
    np.testing.assert_array_equal(other.embed_text(["hello"]), clip.embed_text(["hello"]))


@needs("torch", "open_clip")
def test_clip_local_checkpoint(clip: ClipEmbedder, tmp_path: Path) -> None:
    import torch

    path = tmp_path / "weights.pt"
    state = {name: value + 0.01 for name, value in clip._model.state_dict().items()}
    torch.save(state, path)
    loaded = ClipEmbedder(TINY_CLIP, pretrained=path, device="cpu")
    assert loaded.pretrained == os.fspath(path)
    batch = images(2, seed=5)
    assert not np.allclose(
        loaded.embed(batch), clip.embed(batch)
    )  # the checkpoint's weights, not random ones
    config = embedder_config(loaded)
    assert config == {
        "type": "clip",
        "model_name": TINY_CLIP,
        "pretrained": None,
        "batch_size": 64,
        "checkpoint_name": "weights.pt",
        "checkpoint_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }  # the file's name and digest, never its path
    saved = json.loads(json.dumps(config))
    with pytest.raises(ValueError, match=r"weights\.pt.*checkpoint="):
        embedder_from_config(saved)  # the config alone never chooses a file to load
    rebuilt = embedder_from_config(saved, checkpoint=str(path))
    assert isinstance(rebuilt, ClipEmbedder) and rebuilt.config() == config
    np.testing.assert_array_equal(rebuilt.embed(batch), loaded.embed(batch))
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match=r"broken\.pt"):
        ClipEmbedder(TINY_CLIP, pretrained=broken, device="cpu")


@needs("torch", "open_clip")
def test_clip_offline_fails_fast_with_guidance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="local path") as info:
        ClipEmbedder("ViT-B-32", pretrained="openai", device="cpu")
    assert "pretrained=" in str(info.value)


@needs("torch", "open_clip")
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"model_name": "ViT-Nope"}, ValueError, "ViT-Nope"),
        ({"model_name": 3}, TypeError, "model_name"),
        ({"model_name": ""}, ValueError, "model_name"),
        ({"pretrained": ""}, ValueError, "pretrained"),
        ({"pretrained": "no-such-tag"}, ValueError, "no-such-tag"),
        ({"pretrained": "/no/such/file.pt"}, ValueError, "does not exist"),
        ({"pretrained": 5}, TypeError, "pretrained"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"device": 3}, TypeError, "device"),
        ({"device": "gpu0"}, ValueError, "device"),
    ],
)
def test_clip_constructor_errors(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    arguments: dict[str, Any] = {"model_name": TINY_CLIP, "pretrained": None, "device": "cpu"}
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        ClipEmbedder(**arguments)


def test_clip_config_errors_come_before_any_model_is_built() -> None:
    with pytest.raises(TypeError, match="mapping"):
        ClipEmbedder.from_config(["clip"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a clip embedder config"):
        ClipEmbedder.from_config({"type": "pixel"})
    with pytest.raises(ValueError, match=r"unknown clip embedder config key\(s\) \['device'\]"):
        ClipEmbedder.from_config({"type": "clip", "device": "cpu"})


@needs("torch", "open_clip")
def test_clip_input_errors(clip: ClipEmbedder) -> None:
    with pytest.raises(TypeError, match="texts"):
        clip.embed_text("a single string")
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        clip.embed_text(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"images\[0\]"):
        clip.embed([np.zeros((8, 8, 3), np.float64)])
    with pytest.raises(ValueError, match=r"images\[0\]"):
        clip.embed([np.zeros((8, 8), np.uint8)])


@needs("torch")  # everything but open_clip present, as a user who installed torch alone
def test_clip_missing_dependency_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import galleria.embedders._torch as torch_helpers

    real_import = torch_helpers.importlib.import_module

    def fake_import(name: str) -> Any:
        if name == "open_clip":
            raise ImportError("No module named 'open_clip'")
        return real_import(name)

    monkeypatch.setattr(torch_helpers.importlib, "import_module", fake_import)
    # not installed (an installed open_clip that fails to import is an install problem: test_torch.py)
    monkeypatch.setattr(torch_helpers, "installed", lambda module: module != "open_clip")
    with pytest.raises(ImportError, match=r"pip install -e '\.\[clip\]'"):
        ClipEmbedder(TINY_CLIP, pretrained=None)


def test_a_declared_draft_size_wins_over_twice_the_input_size() -> None:
    from galleria.images.reading import draft_size_for

    class Declared:
        input_size = (10, 10)
        draft_size = (7, 5)

    class Malformed:
        input_size = (10, 10)
        draft_size = (7, 0)

    assert draft_size_for(Declared()) == (7, 5)
    assert draft_size_for(Malformed()) == (20, 20)  # not a size: the rule of twice the input
