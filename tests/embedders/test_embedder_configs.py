"""Embedder configs are untrusted input (they come from store files): checked values, checkpoint records,
no file or hub repository chosen by a config, and a quick one-line failure when weights cannot be had."""

from __future__ import annotations

import ast
import hashlib
import json
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import galleria.embedders._hub as hub
from _support.extras import needs
from galleria.embedders import ClipEmbedder, PixelEmbedder, embedder_config, embedder_from_config

TINY_CLIP = "ViT-S-32-alt"  # the smallest open_clip architecture; random weights only
SRC = Path(__file__).resolve().parents[2] / "src" / "galleria" / "embedders"


# --------------------------------------------------------------------------- pixel configs


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"size": [100000, 100000]}, r"size\[0\] must be between 1 and 1024"),
        ({"size": 5000}, "size must be between 1 and 1024"),
        ({"size": [1024, 1024]}, "3145728 dimensions"),  # each side fine, the product is not
        ({"size": [0, 3]}, r"size\[0\]"),
        ({"size": [3]}, r"\[width, height\]"),
        ({"size": [3, 3, 3]}, r"\[width, height\]"),
        ({"size": "32"}, "size must be an integer"),
        ({"size": 2.0}, "size must be an integer"),
        ({"size": [True, 4]}, r"size\[0\] must be an integer"),
        ({"size": None}, "size must be an integer"),
        ({"grayscale": "yes"}, "grayscale must be true or false"),
        ({"grayscale": 1}, "grayscale must be true or false"),
        ({"batch_size": 10**9}, "batch_size must be between 1 and 4096"),
        ({"batch_size": 0}, "batch_size must be between 1 and 4096"),
        ({"batch_size": "8"}, "batch_size must be an integer"),
    ],
)
def test_pixel_config_values_are_checked_before_anything_is_built(config: dict[str, Any], match: str) -> None:
    full = {"type": "pixel", **config}
    with pytest.raises(ValueError, match=match):
        PixelEmbedder.from_config(full)
    with pytest.raises(ValueError, match=match):
        embedder_from_config(full)


def test_pixel_config_bounds_admit_real_settings() -> None:
    for config in ({"size": 147}, {"size": [1024, 8]}, {"batch_size": 4096}):
        assert PixelEmbedder.from_config({"type": "pixel", **config}).config()["type"] == "pixel"
    largest = PixelEmbedder.from_config({"type": "pixel", "size": [256, 256], "grayscale": True})
    assert largest.dim == 1 << 16  # the bound itself is allowed: the largest dimension a store holds
    assert PixelEmbedder.from_config({"type": "pixel", "size": 8}).size == (8, 8)


@pytest.mark.parametrize(
    "config",
    [
        {"size": 512},  # 786432 dimensions: a store of them could not be saved
        {"size": [1024, 1024], "grayscale": True},
        {"size": 147, "batch_size": 4096},  # 4096 × 64827 floats per batch: the file chooses memory
    ],
)
def test_pixel_config_past_the_store_bounds_is_refused(config: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"pixel embedder config: (size .* dimensions|batch_size)"):
        PixelEmbedder.from_config({"type": "pixel", **config})


@pytest.mark.parametrize("size", [200, 5000, (300, 300), 10**9])
def test_pixel_embedder_past_the_largest_dimension_is_refused_when_built(size: object) -> None:
    """pixel:200 (120000 dims) once wrote a store nothing could load; pixel:5000 ran out of memory."""
    with pytest.raises(ValueError, match=r"size .* gives \d+ dimensions .* at most 65536"):
        PixelEmbedder(size=size)  # type: ignore[arg-type]


def test_pixel_takes_no_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pixel embedder takes no checkpoint"):
        embedder_from_config({"type": "pixel"}, checkpoint=tmp_path / "w.pt")


# --------------------------------------------------------------------------- clip configs


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"model_name": "hf-hub:someone/their-model"}, r"names a file or hub repository.*embedder="),
        ({"model_name": "../../model"}, "names a file or hub repository"),
        ({"model_name": "..model"}, "model_name must be a plain name"),
        ({"model_name": 3}, "model_name must be a plain name"),
        ({"model_name": "x" * 200}, "model_name must be a plain name"),
        ({"pretrained": "/etc/passwd"}, r"pretrained '/etc/passwd' names a file or hub repository"),
        ({"pretrained": "https://example.com/w.pt"}, "names a file or hub repository"),
        ({"pretrained": "hf-hub:someone/weights"}, "names a file or hub repository"),
        ({"pretrained": "weights/model.pt"}, "names a file or hub repository"),
        ({"pretrained": "model.safetensors"}, "names a file or hub repository"),
        ({"pretrained": "http:example"}, "pretrained must be a plain name"),
        ({"pretrained": ""}, "pretrained must be a plain name"),
        ({"pretrained": 5}, "pretrained must be a plain name"),
        ({"batch_size": 10**7}, "batch_size must be between 1 and 4096"),
        ({"batch_size": True}, "batch_size must be an integer"),
        (
            {"checkpoint_name": "../w.pt", "checkpoint_sha256": "0" * 64, "pretrained": None},
            "plain file name",
        ),
        ({"checkpoint_name": "w.pt", "checkpoint_sha256": "zz", "pretrained": None}, "64 lower-case hex"),
        ({"checkpoint_name": "w.pt", "pretrained": None}, "checkpoint_sha256"),
        ({"checkpoint_name": "w.pt", "checkpoint_sha256": "0" * 64, "pretrained": "openai"}, "records both"),
        ({"checkpoint_name": "w.pt", "checkpoint_sha256": "0" * 64, "pretrained": None}, "--checkpoint PATH"),
    ],
)
def test_clip_config_values_are_checked_before_any_model_is_built(
    config: dict[str, Any], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import galleria.embedders.clip as clip_module

    def no_model(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no model may be built from a bad config")

    monkeypatch.setattr(clip_module, "_import_clip", no_model)
    full = {"type": "clip", "model_name": TINY_CLIP, "pretrained": None, **config}
    with pytest.raises(ValueError, match=match):
        embedder_from_config(full)


@needs("torch", "open_clip")
def test_clip_config_names_must_be_known_to_open_clip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file whose name is a plain word is still never opened: only open_clip's own tags are accepted.
    monkeypatch.chdir(tmp_path)
    for name in ("weights", "weights.pt"):
        (tmp_path / name).write_bytes(b"would be loaded if a config could name a file")
    with pytest.raises(ValueError, match="not a weight tag"):
        embedder_from_config({"type": "clip", "model_name": TINY_CLIP, "pretrained": "weights"})
    with pytest.raises(ValueError, match="names a file"):
        embedder_from_config({"type": "clip", "model_name": TINY_CLIP, "pretrained": "weights.pt"})
    with pytest.raises(ValueError, match="not an open_clip model"):
        embedder_from_config({"type": "clip", "model_name": "ViT-Nope", "pretrained": None})


@needs("torch", "open_clip")
def test_a_tag_wins_over_a_file_of_the_same_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import open_clip

    monkeypatch.chdir(tmp_path)
    (tmp_path / "openai").write_bytes(b"not weights")
    assert ClipEmbedder._check_pretrained(open_clip, "ViT-B-32", "openai", False) == ("openai", None)
    assert ClipEmbedder._check_pretrained(open_clip, "ViT-B-32", tmp_path / "openai", False) == (
        None,
        str(tmp_path / "openai"),
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[ClipEmbedder, Path]:
    import torch

    random = ClipEmbedder(TINY_CLIP, pretrained=None, device="cpu", batch_size=2)
    path = tmp_path_factory.mktemp("weights") / "tiny.pt"
    torch.save({name: value * 0.9 for name, value in random._model.state_dict().items()}, path)
    return ClipEmbedder(TINY_CLIP, pretrained=path, device="cpu", batch_size=2), path


@needs("torch", "open_clip")
def test_local_checkpoint_is_recorded_by_name_and_digest(checkpoint: tuple[ClipEmbedder, Path]) -> None:
    embedder, path = checkpoint
    config = embedder_config(embedder)
    assert config is not None
    assert config["pretrained"] is None and str(path.parent) not in json.dumps(config)
    assert config["checkpoint_name"] == "tiny.pt"
    assert config["checkpoint_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert embedder.input_size == (224, 224)


@needs("torch", "open_clip")
def test_a_clip_store_drafts_large_jpegs_to_the_resize_before_the_crop(
    checkpoint: tuple[ClipEmbedder, Path],
) -> None:
    from galleria.images.reading import draft_size_for

    embedder, _ = checkpoint
    assert embedder.draft_size == draft_size_for(embedder) == (224, 224)  # open_clip: resize 224, crop 224


@needs("torch", "open_clip")
def test_recorded_checkpoint_needs_the_user_to_pass_it(
    checkpoint: tuple[ClipEmbedder, Path], tmp_path: Path
) -> None:
    embedder, path = checkpoint
    config = json.loads(json.dumps(embedder_config(embedder)))
    with pytest.raises(ValueError, match=r"'tiny\.pt'.*--checkpoint PATH"):
        embedder_from_config(config)
    renamed = tmp_path / "renamed.pt"
    renamed.write_bytes(path.read_bytes())  # same bytes, other name: the digest is what counts
    rebuilt = embedder_from_config(config, checkpoint=renamed)
    assert isinstance(rebuilt, ClipEmbedder) and rebuilt.config() == config
    image = [np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)]
    np.testing.assert_array_equal(rebuilt.embed(image), embedder.embed(image))
    other = tmp_path / "other.pt"
    other.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(ValueError, match=r"other\.pt.*sha256.*tiny\.pt"):
        embedder_from_config(config, checkpoint=other)
    with pytest.raises(ValueError, match="records no local checkpoint"):
        embedder_from_config({"type": "clip", "model_name": TINY_CLIP, "pretrained": None}, checkpoint=path)
    with pytest.raises(ValueError, match="not a regular file"):
        embedder_from_config(config, checkpoint=tmp_path)
    with pytest.raises(TypeError, match="checkpoint"):
        embedder_from_config(config, checkpoint=3)


def test_embedders_do_not_import_the_registry() -> None:
    # The registry imports the embedders; what both need lives below both (embedders/_config.py).
    for name in ("pixel.py", "clip.py", "_config.py", "_images.py", "decoding.py"):
        tree = ast.parse((SRC / name).read_text())
        imported = {
            node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
        }
        assert "galleria.embedders.registry" not in imported, name
        assert "galleria.embedders" not in imported, name


# --------------------------------------------------------------------------- weights without network


@pytest.fixture()
def no_model_build(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record open_clip model builds instead of running them (each records the hub's offline flag)."""
    import huggingface_hub.constants
    import open_clip

    builds: list[Any] = []

    def record(*args: Any, **kwargs: Any) -> Any:
        builds.append(huggingface_hub.constants.HF_HUB_OFFLINE)
        raise OSError("stopped by the test")

    monkeypatch.setattr(open_clip, "create_model_and_transforms", record)
    return builds


@pytest.fixture()
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import huggingface_hub.constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def forbid_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    attempts: list[Any] = []

    def refuse(address: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(address)
        raise OSError("network is unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    return attempts


@needs("torch", "open_clip")
def test_offline_mode_fails_at_once_in_one_line(
    monkeypatch: pytest.MonkeyPatch, no_model_build: list[Any], empty_cache: Path
) -> None:
    attempts = forbid_network(monkeypatch)
    assert hub.offline_mode()  # conftest sets HF_HUB_OFFLINE=1
    with pytest.raises(RuntimeError) as info:
        ClipEmbedder("ViT-B-32", pretrained="openai", device="cpu")
    message = str(info.value)
    assert "\n" not in message and "offline mode" in message
    assert "pretrained='/path/to/open_clip_pytorch_model.bin'" in message
    assert "--embedder clip:ViT-B-32:/path/to/open_clip_pytorch_model.bin" in message
    assert "https://huggingface.co/timm/vit_base_patch32_clip_224.openai" in message
    assert no_model_build == [] and attempts == []  # neither a download attempt nor a probe


@needs("torch", "open_clip")
def test_unreachable_network_fails_after_one_probe(
    monkeypatch: pytest.MonkeyPatch, no_model_build: list[Any], empty_cache: Path
) -> None:
    monkeypatch.setattr(hub, "offline_mode", lambda: False)
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    attempts = forbid_network(monkeypatch)
    with pytest.raises(RuntimeError, match=r"huggingface\.co cannot be reached") as info:
        ClipEmbedder("ViT-B-32", pretrained="openai", device="cpu")
    assert "\n" not in str(info.value) and "--embedder clip:ViT-B-32:" in str(info.value)
    assert attempts == [("huggingface.co", 443)] and no_model_build == []


@needs("torch", "open_clip")
def test_cached_weights_load_with_the_hub_kept_offline(
    monkeypatch: pytest.MonkeyPatch, no_model_build: list[Any], empty_cache: Path
) -> None:
    import huggingface_hub.constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = empty_cache / "models--timm--vit_base_patch32_clip_224.openai"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "open_clip_pytorch_model.bin").write_bytes(b"cached weights")
    monkeypatch.setattr(hub, "offline_mode", lambda: False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    attempts = forbid_network(monkeypatch)
    source = hub.locate(__import__("open_clip"), "ViT-B-32", "openai")
    assert source is not None and source.cached and source.hub
    with pytest.raises(RuntimeError, match="stopped by the test"):
        ClipEmbedder("ViT-B-32", pretrained="openai", device="cpu")
    assert no_model_build == [True]  # loaded with the hub offline: no request, no retries
    assert huggingface_hub.constants.HF_HUB_OFFLINE is False and attempts == []


@needs("torch", "open_clip")
def test_random_weights_and_local_files_never_touch_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts = forbid_network(monkeypatch)
    monkeypatch.setattr(hub, "offline_mode", lambda: False)
    embedder = ClipEmbedder(TINY_CLIP, pretrained=None, device="cpu")
    assert embedder.pretrained is None and attempts == []


def test_probe_answers_for_a_listening_port_and_refuses_a_closed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert hub.reachable("127.0.0.1", port, timeout=2.0)
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
        assert hub.reachable("huggingface.co", timeout=2.0)  # the proxy carries it: the proxy is probed
        monkeypatch.delenv("HTTPS_PROXY")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        free = closed.getsockname()[1]
    assert not hub.reachable("127.0.0.1", free, timeout=2.0)
    assert not hub.reachable("no-such-host.invalid", timeout=2.0)
