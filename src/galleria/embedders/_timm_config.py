"""Rebuilding a :class:`~galleria.embedders.timm.TimmEmbedder` from its config (untrusted: a store file's).

Every value is checked before any model is built. A config never names a file to open: a local
checkpoint is recorded by name and SHA-256 and found again by
:func:`~galleria.embedders._runtime.locate_checkpoint` (the ``checkpoint=`` given, an installed weights
package, a path the user gave before), or stood in for by its ONNX export in the cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from galleria.embedders._cache import cache_dir, model_key
from galleria.embedders._checkpoint import check_record, verify_checkpoint
from galleria.embedders._config import check_config
from galleria.embedders._onnx import cached_entry, onnxruntime_available
from galleria.embedders._runtime import locate_checkpoint, pick_runtime
from galleria.embedders._torch import looks_like_path

__all__ = ["CONFIG_KEYS", "rebuild_options"]

CONFIG_KEYS = frozenset(
    {
        "type",
        "model_name",
        "pretrained",
        "batch_size",
        "normalize",
        "checkpoint_name",
        "checkpoint_sha256",
        "runtime",
    }
)
_WHERE = "timm embedder config"


def rebuild_options(config: Mapping[str, Any], checkpoint: Any, runtime: Any) -> dict[str, Any]:
    """The keyword arguments (all but ``device``) that rebuild the embedder ``config`` describes.

    TypeError when ``config`` is not a mapping; ValueError for another type, unknown keys, a malformed
    value or record, a missing or mismatching checkpoint, or a checkpoint given to a config that
    records none.
    """
    check_config(config, "timm", CONFIG_KEYS)
    pretrained = config.get("pretrained")
    if pretrained is not None and not isinstance(pretrained, (bool, str)):
        raise ValueError(f"{_WHERE}: pretrained must be null, true or a timm tag, got {pretrained!r}")
    if isinstance(pretrained, str) and looks_like_path(pretrained):
        raise ValueError(f"{_WHERE}: pretrained must be a timm tag, not a path ({pretrained!r})")
    record = check_record(config, _WHERE)
    if record is not None and pretrained not in (None, False):
        raise ValueError(f"{_WHERE} records both a tag and a local checkpoint")
    if record is None and checkpoint is not None:
        verify_checkpoint(config, checkpoint, _WHERE)  # raises: the config records no checkpoint
    chosen = pick_runtime(config, runtime, _WHERE)
    model_name = config.get("model_name", "tf_efficientnet_lite0")
    options: dict[str, Any] = {
        "model_name": model_name,
        "batch_size": config.get("batch_size", 32),
        "normalize": config.get("normalize", True),
        "runtime": chosen,
    }
    if record is None:
        return {**options, "pretrained": pretrained}
    key = model_key("timm", model_name, record[1])

    def exported() -> str | None:  # an export of these weights may stand in for the file
        if chosen != "torch" and onnxruntime_available() and cached_entry(key) is not None:
            return None
        return f"the ONNX cache ({cache_dir()}: no export of these weights)"

    path = locate_checkpoint(config, checkpoint, _WHERE, exported=exported)
    if path is None:
        return {**options, "_record": {"checkpoint_name": record[0], "checkpoint_sha256": record[1]}}
    return {**options, "pretrained": path}
