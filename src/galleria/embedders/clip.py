"""CLIP image and text embeddings through open_clip (optional extra ``galleria[clip]``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from galleria._declare import Component
from galleria._moved import moved_names
from galleria._params import Param
from galleria._validation import check_positive_int
from galleria.embedders._checkpoint import CHECKPOINT_KEYS, check_record, checkpoint_record
from galleria.embedders._clip_load import check_model_name, check_pretrained, load_clip
from galleria.embedders._config import MAX_CONFIG_BATCH_SIZE, check_config, config_int, config_name
from galleria.embedders._images import check_images, to_pil
from galleria.embedders._torch import forward_batches, import_extra, looks_like_path, pick_device
from galleria.embedders.base import ImageInput

__all__ = ["ClipEmbedder"]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(__name__, {"RANDOM_WEIGHTS_SEED": "galleria.embedders._clip_load"})

_CONFIG_KEYS = frozenset({"type", "model_name", "pretrained", "batch_size", "runtime", *CHECKPOINT_KEYS})
_CONFIG_WHERE = "clip embedder config"


def _import_clip() -> tuple[Any, Any]:
    """Import torch and open_clip, or raise an ImportError naming the extra to install."""
    torch, module = import_extra("ClipEmbedder", "clip", "torch", "open_clip")
    return torch, module


class ClipEmbedder:
    """Embed images and texts into one CLIP space with open_clip; outputs are L2-normalised float32.

    Parameters
    ----------
    model_name : str
        An open_clip architecture (see ``open_clip.list_models()``), e.g. ``"ViT-B-32"``, or an
        ``"hf-hub:org/repo"`` name.
    pretrained : str, os.PathLike or None
        An open_clip weight tag for ``model_name`` (``"openai"``, ``"laion2b_s34b_b79k"``, ...), the
        path of a local checkpoint file, or None for random weights (seeded: every instance is equal).
        A string that is one of the model's tags is the tag, even if a file of that name exists.
        Weights given by tag are taken from the local cache without any network request, or
        downloaded; when they are not cached and the hub is offline (``HF_HUB_OFFLINE=1``) or its
        host does not answer within a few seconds, this raises a one-line RuntimeError at once.
        A local checkpoint is recorded in :meth:`config` by file name and SHA-256, never by path.
    device : str, torch.device or None
        Where the model runs; None picks cuda, then mps, then cpu. Autocast is used on cuda.
    batch_size : int
        Images or texts encoded per forward pass.

    Raises
    ------
    ImportError
        If torch or open_clip is not installed (``pip install -e '.[clip]'``).
    ValueError
        For an unknown model name, an unknown tag, or a checkpoint path that does not exist or is
        not a regular file.
    RuntimeError
        If the weights cannot be fetched or loaded.

    Examples
    --------
    >>> import numpy as np
    >>> embedder = ClipEmbedder("ViT-S-32-alt", pretrained=None, device="cpu")  # doctest: +SKIP
    >>> embedder.embed([np.zeros((64, 64, 3), np.uint8)]).shape  # doctest: +SKIP
    (1, 256)
    """

    def __init__(
        self,
        model_name: str = "ViT-B-32",
        pretrained: str | os.PathLike[str] | None = "openai",
        device: Any = None,
        batch_size: int = 64,
        *,
        runtime: str | None = None,
    ) -> None:
        torch, open_clip = _import_clip()
        if not isinstance(model_name, str):
            raise TypeError(f"model_name must be a string, got {model_name!r} ({type(model_name).__name__})")
        if not model_name:
            raise ValueError("model_name must be a non-empty string, got ''")
        hub_model = model_name.startswith("hf-hub:")
        if not hub_model:
            check_model_name(open_clip, model_name)
        batch_size = check_positive_int("batch_size", batch_size)
        tag, checkpoint = self._check_pretrained(open_clip, model_name, pretrained, hub_model)
        record = checkpoint_record(checkpoint) if checkpoint is not None else None
        self._setup(torch, open_clip, model_name, tag, checkpoint, record, device, batch_size, runtime)

    def _setup(
        self,
        torch: Any,
        open_clip: Any,
        model_name: str,
        tag: str | None,
        checkpoint: str | None,
        record: dict[str, str] | None,
        device: Any,
        batch_size: int,
        runtime: Any = None,
    ) -> None:
        from galleria.embedders._runtime import check_runtime

        # CLIP's text side needs torch anyway: ONNX Runtime runs its image side only when asked.
        self._runtime = "onnx" if check_runtime(runtime) == "onnx" else "torch"
        self._network: Any = None
        self.batch_size = batch_size
        self._model_name = model_name
        self._tag = tag
        self._checkpoint = checkpoint
        self._record = record
        self._torch = torch
        self._device = pick_device(torch, device)
        self._model, self._preprocess, self._tokenizer = load_clip(
            torch, open_clip, model_name, tag, checkpoint, self._device
        )
        if self._runtime == "onnx":
            self._open_network()

    def _open_network(self) -> None:
        from galleria.embedders._clip_onnx import clip_network, clip_preprocess

        spec = clip_preprocess(self._preprocess)
        if spec is None or self._device.type != "cpu":
            raise ValueError(
                f"runtime 'onnx' needs the cpu device and open_clip's usual square transform; "
                f"{self._model_name!r} on {self._device} has {self._preprocess}"
            )
        weights = self._record["checkpoint_sha256"] if self._record is not None else f"tag:{self._tag}"
        self._spec = spec
        self._network = clip_network(self._torch, self._model, self._model_name, weights, spec, self.dim)

    @staticmethod
    def _check_pretrained(
        open_clip: Any, model_name: str, pretrained: Any, hub_model: bool
    ) -> tuple[str | None, str | None]:
        """Return (tag, checkpoint path): at most one is set (see :mod:`galleria.embedders._clip_load`)."""
        return check_pretrained(open_clip, model_name, pretrained, hub_model)

    def __repr__(self) -> str:
        return (
            f"ClipEmbedder(model_name={self._model_name!r}, pretrained={self.pretrained!r}, "
            f"device={str(self._device)!r}, batch_size={self.batch_size})"
        )

    @property
    def model_name(self) -> str:
        """The open_clip architecture."""
        return self._model_name

    @property
    def pretrained(self) -> str | None:
        """The weight tag or checkpoint path (None: seeded random weights)."""
        return self._checkpoint if self._checkpoint is not None else self._tag

    @property
    def input_size(self) -> tuple[int, int] | None:
        """The (width, height) of the model's input images."""
        size: Any = getattr(self._model.visual, "image_size", None)
        if isinstance(size, int):
            return size, size
        if isinstance(size, (tuple, list)) and len(size) == 2 and all(isinstance(v, int) for v in size):
            return int(size[1]), int(size[0])  # open_clip keeps (height, width)
        return None

    @property
    def draft_size(self) -> tuple[int, int] | None:
        """The size of the resize before the crop: a store decodes a large JPEG at the smallest DCT scale
        keeping it (None: not open_clip's usual transform; the store then keeps twice :attr:`input_size`)."""
        from galleria.embedders._clip_onnx import clip_preprocess

        spec = clip_preprocess(self._preprocess)
        return None if spec is None else (spec.resize, spec.resize)

    @property
    def device(self) -> str:
        """The torch device the model runs on."""
        return str(self._device)

    @property
    def dim(self) -> int:
        """Length of the embeddings."""
        return int(self._model.visual.output_dim)

    def _encode(self, batches: list[Any], encode: Any) -> np.ndarray:
        return forward_batches(self._torch, self._device, batches, encode, normalize=True, dim=self.dim)

    def embed(self, images: Sequence[ImageInput]) -> np.ndarray:
        """Return the (len(images), dim) unit-norm float32 embeddings of RGB uint8 arrays or PIL images."""
        items = [to_pil(image, position) for position, image in enumerate(check_images(images))]
        if self._network is not None:
            if not items:
                return np.zeros((0, self.dim), dtype=np.float32)
            from galleria.embedders._onnx import embed_onnx

            return embed_onnx(self._network, self._spec, items, self.batch_size, True)
        torch = self._torch
        batches = [
            torch.stack(
                [self._preprocess(image.convert("RGB")) for image in items[start : start + self.batch_size]]
            )
            for start in range(0, len(items), self.batch_size)
        ]
        return self._encode(batches, self._model.encode_image)

    def embed_text(self, texts: Sequence[str]) -> np.ndarray:
        """Return the (len(texts), dim) unit-norm float32 embeddings of texts, in the images' space."""
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise TypeError(f"texts must be a sequence of strings, got {type(texts).__name__}")
        for position, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{position}] must be a str, got {type(text).__name__}")
        items = list(texts)
        batches = [
            self._tokenizer(items[start : start + self.batch_size])
            for start in range(0, len(items), self.batch_size)
        ]
        return self._encode(batches, self._model.encode_text)

    def config(self) -> dict[str, Any]:
        """A JSON-able description (model, weights, batch size; not the device) for :meth:`from_config`.

        Weights from a local checkpoint are recorded as ``pretrained: None`` plus the checkpoint's
        ``checkpoint_name`` (its base name) and ``checkpoint_sha256``, never its path.
        """
        config: dict[str, Any] = {
            "type": "clip",
            "model_name": self._model_name,
            "pretrained": self._tag,
            "batch_size": self.batch_size,
        }
        if self._runtime == "onnx":
            config["runtime"] = "onnx"  # recorded only when it is not torch (older configs stay equal)
        if self._record is not None:
            config.update(self._record)
        return config

    @property
    def runtime(self) -> str:
        """Where the image side runs: ``"torch"`` or ``"onnx"`` (the text side always runs on torch)."""
        return self._runtime

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        device: Any = None,
        *,
        checkpoint: str | os.PathLike[str] | None = None,
        runtime: str | None = None,
    ) -> ClipEmbedder:
        """Rebuild an embedder from :meth:`config` output (on ``device``, auto-selected by default).

        The config is untrusted input (it may come from a store file): its values are checked before
        any model is built, ``model_name`` must be an open_clip architecture and ``pretrained`` one of
        its weight tags or None — never a path, URL or hub repository. A config that records a local
        checkpoint needs a file with the SHA-256 it records: ``checkpoint`` when given, else one the user
        gave before (:func:`~galleria.embedders._runtime.find_checkpoint`).

        Raises
        ------
        TypeError
            If ``config`` is not a mapping.
        ValueError
            For another type, an unknown key, a value of the wrong type or out of bounds
            (``batch_size`` at most 4096), an unknown model or tag, or a checkpoint that is missing,
            not recorded, or has another digest.
        """
        check_config(config, "clip", _CONFIG_KEYS)
        record = check_record(config, _CONFIG_WHERE)
        model_name = config.get("model_name", "ViT-B-32")
        tag = config.get("pretrained", "openai" if record is None else None)
        for key, value in (("model_name", model_name), ("pretrained", tag)):
            if isinstance(value, str) and (value.startswith("hf-hub:") or looks_like_path(value)):
                raise ValueError(
                    f"{_CONFIG_WHERE}: {key} {value!r} names a file or hub repository, and a config never "
                    "chooses what is loaded; build the ClipEmbedder yourself and pass it (embedder=...), "
                    "or pass a local checkpoint the config records (checkpoint=...)"
                )
        model_name = config_name("clip", "model_name", model_name)
        if tag is not None:
            tag = config_name("clip", "pretrained", tag)
        batch_size = config_int("clip", "batch_size", config.get("batch_size", 64), MAX_CONFIG_BATCH_SIZE)
        if record is not None and tag is not None:
            raise ValueError(
                f"{_CONFIG_WHERE} records both the weight tag {tag!r} and a local checkpoint; "
                "pretrained must be null with a checkpoint"
            )
        path = None
        if record is not None or checkpoint is not None:  # the one given, else one found by digest
            from galleria.embedders._runtime import locate_checkpoint

            path = locate_checkpoint(config, checkpoint, _CONFIG_WHERE)
        torch, open_clip = _import_clip()
        check_model_name(open_clip, model_name)
        if tag is not None:
            tags = list(open_clip.list_pretrained_tags_by_model(model_name))
            if tag not in tags:
                raise ValueError(
                    f"{_CONFIG_WHERE}: pretrained {tag!r} is not a weight tag of {model_name!r}; "
                    f"its tags are {tags}"
                )
        recorded = None if record is None else dict(zip(CHECKPOINT_KEYS, record, strict=True))
        embedder = cls.__new__(cls)
        from galleria.embedders._runtime import pick_runtime

        chosen = pick_runtime(config, runtime, _CONFIG_WHERE)
        embedder._setup(torch, open_clip, model_name, tag, path, recorded, device, batch_size, chosen)
        return embedder


def parse_spec(rest: str) -> dict[str, Any]:
    """The options of ``--embedder clip[:MODEL[:PRETRAINED]]`` (PRETRAINED an open_clip tag, a local
    checkpoint, which may hold colons, or ``random``); ValueError phrased after the spelling."""
    parts = rest.split(":", 1) if rest else []
    if not all(parts):
        raise ValueError("is malformed: expected clip[:MODEL[:PRETRAINED]]")
    options: dict[str, Any] = {"model_name": "ViT-B-32", "pretrained": "openai"}
    if parts:
        options["model_name"] = parts[0]
    if len(parts) > 1:
        options["pretrained"] = None if parts[1] == "random" else parts[1]
    return options


def _from_config(config: Mapping[str, Any], *, checkpoint: Any = None, runtime: Any = None) -> ClipEmbedder:
    return ClipEmbedder.from_config(config, checkpoint=checkpoint, runtime=runtime)


#: The declaration of the CLIP embedder (:mod:`galleria._declare`): the registry finds it here.
COMPONENT = Component(
    kind="embedder",
    name="clip",
    summary="an open_clip image tower (extra: clip); text queries too",
    params=(
        Param("model_name", str, "ViT-B-32", optional=True, help="the open_clip model (or hf-hub:NAME)"),
        Param(
            "pretrained",
            str,
            "openai",
            optional=True,
            help="weights: an open_clip tag, a local checkpoint file, or none (seeded random)",
        ),
        Param("device", str, None, optional=True, help="torch device (none: cuda when available, else cpu)"),
        Param(
            "runtime",
            str,
            None,
            choices=("onnx", "torch"),
            optional=True,
            help="where the image side runs: onnx (ONNX Runtime) or torch (none: torch)",
        ),
        Param("batch_size", int, 64, 1, MAX_CONFIG_BATCH_SIZE, help="images embedded per batch"),
    ),
    build=ClipEmbedder,
    order=10,
    extra={
        "spec": "clip[:MODEL[:PRETRAINED]]",
        "parse_spec": parse_spec,
        "from_config": _from_config,
        "loading": "torch and open_clip",
    },
)
