"""The torch side of :class:`~galleria.embedders.clip.ClipEmbedder`: which weights, and the model loaded.

``pretrained`` is read as an open_clip weight tag of the model, a local checkpoint file or None
(seeded random weights); :func:`load_clip` builds the model, its image transform and its tokenizer,
with open_clip's own log records kept off the root logger (a failure reaches the user as one error).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

from galleria.embedders._hub import obtainable
from galleria.embedders._torch import looks_like_path

__all__ = ["RANDOM_WEIGHTS_SEED", "check_model_name", "check_pretrained", "load_clip"]

#: Seed of the random weights used when ``pretrained=None`` (so every instance is identical).
RANDOM_WEIGHTS_SEED = 0


class _DropOpenClipRecords(logging.Filter):
    """Drops records that open_clip logs on the root logger (its failures reach the user as our error)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "open_clip" not in record.pathname


@contextlib.contextmanager
def _quiet_open_clip_logging() -> Iterator[None]:
    """Silence open_clip's root-logger messages while a model loads; our own error says what failed."""
    quiet = _DropOpenClipRecords()
    logging.root.addFilter(quiet)
    try:
        yield
    finally:
        logging.root.removeFilter(quiet)


def check_model_name(open_clip: Any, model_name: str) -> None:
    """ValueError unless ``model_name`` is one of open_clip's architectures."""
    if model_name not in open_clip.list_models():
        raise ValueError(f"model_name {model_name!r} is not an open_clip model; see open_clip.list_models()")


def check_pretrained(
    open_clip: Any, model_name: str, pretrained: Any, hub_model: bool
) -> tuple[str | None, str | None]:
    """Return (tag, checkpoint path): at most one is set; a tag of the model wins over a file so named."""
    if pretrained is None:
        return None, None
    is_path = isinstance(pretrained, os.PathLike)
    if is_path:
        pretrained = os.fspath(pretrained)
    if not isinstance(pretrained, str):
        raise TypeError(
            f"pretrained must be a tag, a checkpoint path or None, got {pretrained!r} "
            f"({type(pretrained).__name__})"
        )
    if not pretrained:
        raise ValueError("pretrained must be a tag, a checkpoint path or None, got ''")
    tags: list[str] = [] if hub_model else list(open_clip.list_pretrained_tags_by_model(model_name))
    if not is_path and pretrained in tags:
        return pretrained, None
    if os.path.exists(pretrained):
        return None, pretrained
    if is_path or looks_like_path(pretrained):
        raise ValueError(f"pretrained checkpoint {pretrained!r} does not exist")
    if hub_model:
        return pretrained, None
    raise ValueError(
        f"pretrained {pretrained!r} is neither a local checkpoint nor a weight tag of "
        f"{model_name!r}; its tags are {tags}"
    )


def load_clip(
    torch: Any, open_clip: Any, model_name: str, tag: str | None, checkpoint: str | None, device: Any
) -> tuple[Any, Any, Any]:
    """The model (on ``device``, in eval mode), its image transform and its tokenizer.

    RuntimeError in one line when the weights cannot be obtained or loaded: at once, when a tag's
    weights are neither cached nor downloadable now.
    """
    context: contextlib.AbstractContextManager[None] = (
        contextlib.nullcontext() if checkpoint is not None else obtainable(open_clip, model_name, tag)
    )
    try:
        with context, torch.random.fork_rng(devices=[]), _quiet_open_clip_logging():
            torch.manual_seed(RANDOM_WEIGHTS_SEED)
            model, _, preprocess = open_clip.create_model_and_transforms(
                model_name, pretrained=checkpoint if checkpoint is not None else tag, device="cpu"
            )
        tokenizer = open_clip.get_tokenizer(model_name)
    except Exception as error:  # hub, network, file-format and state-dict errors alike
        if checkpoint is not None:
            raise RuntimeError(
                f"could not load the checkpoint {checkpoint!r} into {model_name!r}: {error}"
            ) from error
        raise RuntimeError(
            f"could not obtain weights {tag!r} for {model_name!r} ({error}). Without network "
            "access, download the checkpoint file elsewhere and pass its local path instead: "
            f"ClipEmbedder({model_name!r}, pretrained='/path/to/open_clip_pytorch_model.bin'); "
            "or use pretrained=None for random weights."
        ) from error
    return model.to(device).eval(), preprocess, tokenizer
