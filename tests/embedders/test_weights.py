"""``describe_weights``: what weights a saved embedder config was built with, in words and in fields."""

from __future__ import annotations

import pytest

from galleria.embedders._weights import LITE0_FILE, LITE0_PACKAGE, LITE0_SHA256, describe_weights


def test_the_lite0_package_file_is_named_imagenet_never_pretrained_none() -> None:
    config = {
        "type": "timm",
        "model_name": "tf_efficientnet_lite0",
        "pretrained": None,
        "checkpoint_name": LITE0_FILE,
        "checkpoint_sha256": LITE0_SHA256,
    }
    weights = describe_weights(config)
    assert weights is not None
    assert weights["source"] == "imagenet" and weights["package"] == LITE0_PACKAGE
    assert weights["file"] == LITE0_FILE and weights["sha256"] == LITE0_SHA256
    assert weights["text"] == (
        f"ImageNet (EfficientNet-Lite0, package {LITE0_PACKAGE}, file {LITE0_FILE}, sha256 579344248a93…)"
    )
    renamed = describe_weights({**config, "checkpoint_name": "lite0.pth"})  # known by its digest
    assert renamed is not None and renamed["source"] == "imagenet"


@pytest.mark.parametrize(
    ("config", "source", "text"),
    [
        (
            {
                "type": "timm",
                "model_name": "resnet18",
                "pretrained": None,
                "checkpoint_name": "mine.pth",
                "checkpoint_sha256": "ab" * 32,
            },
            "file",
            "local file mine.pth sha256 abababababab…",
        ),
        (
            {"type": "timm", "model_name": "resnet18", "pretrained": None},
            "random",
            "random (seed 0; not trained)",
        ),
        (
            {"type": "clip", "model_name": "ViT-B-32", "pretrained": None},
            "random",
            "random (seed 0; not trained)",
        ),
        (
            {"type": "timm", "model_name": "resnet50", "pretrained": "a1_in1k"},
            "tag",
            "timm's hub weights resnet50:a1_in1k",
        ),
        (
            {"type": "clip", "model_name": "ViT-B-32", "pretrained": "openai"},
            "tag",
            "open_clip weights ViT-B-32:openai",
        ),
        (
            {"type": "timm", "model_name": "resnet18", "pretrained": True},
            "default",
            "timm's default weights of resnet18 (from the hub)",
        ),
        ({"type": "pixel", "size": 16}, "none", "none (the image's own pixels)"),
    ],
)
def test_every_kind_of_weights_is_named(config: dict, source: str, text: str) -> None:
    weights = describe_weights(config)
    assert weights is not None and weights["source"] == source and weights["text"] == text


def test_no_config_no_weights() -> None:
    assert describe_weights(None) is None
    assert describe_weights({"type": "elsewhere"}) is None
