"""CLIP from a local open_clip checkpoint file on the command line: ``--embedder clip:MODEL:PATH``.

A (random) checkpoint is saved to disk and loaded back through the CLI spelling; the store records it
by name and SHA-256; ``search`` finds it again at the path given at build (the per-user registry),
and needs ``--checkpoint`` once it has moved. ViT-S-32-alt (the
smallest open_clip architecture) stands in for ViT-B-32: the spelling and the code path are the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

torch = pytest.importorskip("torch", reason="ClipEmbedder needs the clip extra (torch)")
pytest.importorskip("open_clip", reason="ClipEmbedder needs the clip extra")

from galleria.cli import main  # noqa: E402
from galleria.cli._embedder_options import parse_embedder_spec  # noqa: E402
from galleria.embedders import ClipEmbedder, embedder_config  # noqa: E402
from galleria.store import InMemoryImageEmbeddingStore  # noqa: E402

TINY_CLIP = "ViT-S-32-alt"


def test_the_spelling_keeps_colons_of_the_path() -> None:
    assert parse_embedder_spec("clip:ViT-B-32:/w/a:b/open_clip_pytorch_model.bin") == (
        "clip",
        {"model_name": "ViT-B-32", "pretrained": "/w/a:b/open_clip_pytorch_model.bin"},
    )


def test_a_saved_checkpoint_loads_back_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    random = ClipEmbedder(TINY_CLIP, pretrained=None, device="cpu")
    weights = tmp_path / "weights" / "open_clip_pytorch_model.bin"
    weights.parent.mkdir()
    torch.save({name: value * 0.5 for name, value in random._model.state_dict().items()}, weights)
    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(0)
    for number in range(3):
        Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(photos / f"{number}.png")
    store = tmp_path / "s.safetensors"
    spec = f"clip:{TINY_CLIP}:{weights}"
    assert main(["build", str(photos), "--out", str(store), "--embedder", spec, "--device", "cpu"]) == 0
    assert str(weights).encode() not in store.read_bytes()  # recorded by name and digest only
    direct = ClipEmbedder(TINY_CLIP, pretrained=weights, device="cpu")
    loaded = InMemoryImageEmbeddingStore.load_from_disk(store, checkpoint=weights)
    config = embedder_config(loaded.embedder)
    assert config is not None and config["checkpoint_name"] == "open_clip_pytorch_model.bin"
    np.testing.assert_allclose(
        loaded.embeddings, direct.embed([np.asarray(Image.open(p)) for p in loaded.paths]), atol=1e-4
    )
    capsys.readouterr()
    query = str(photos / "1.png")
    assert main(["search", str(store), "--image", query, "--checkpoint", str(weights), "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["queries"][0]["results"]
    assert results[0]["path"] == query
    assert main(["search", str(store), "--image", query]) == 0  # the path given at build is remembered
    weights.rename(weights.with_name("moved.bin"))
    capsys.readouterr()
    assert main(["search", str(store), "--image", query]) == 2
    error = capsys.readouterr().err
    assert "--checkpoint PATH" in error and "looked in" in error
