"""Whether open_clip's (or timm's) pretrained weights can be had now: from the local cache, or over a network.

Without network, open_clip (through huggingface_hub) retries its downloads for most of a minute and
logs every retry before it fails. :func:`obtainable` decides at once instead: weights already in the
local cache are loaded with the hub kept offline (no request at all); weights that would need a
download fail in one line when the hub is in offline mode (``HF_HUB_OFFLINE``) or a quick TCP probe of
the download host (through the HTTPS proxy, if one is set) gets no answer within a few seconds.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import socket
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PROBE_TIMEOUT",
    "WeightsSource",
    "hub_offline",
    "locate",
    "locate_timm",
    "obtainable",
    "obtainable_timm",
    "offline_mode",
    "reachable",
]

#: Seconds the network probe waits for a TCP connection (name resolution included).
PROBE_TIMEOUT = 3.0
_HF_WEIGHTS = "open_clip_pytorch_model.bin"
_HF_SAFE_WEIGHTS = "open_clip_model.safetensors"
_HF_CONFIG = "open_clip_config.json"
_TRUE = {"1", "on", "yes", "true"}
_offline_lock = threading.Lock()


@dataclass(frozen=True)
class WeightsSource:
    """Where a weight tag's file comes from.

    Attributes
    ----------
    url : str
        The page or file to download (shown to the user so they can fetch it elsewhere).
    host : str
        The host a download would contact.
    cached : bool
        Whether the file is already in the local cache (so no download is needed).
    hub : bool
        Whether it comes through huggingface_hub (rather than a plain URL).
    """

    url: str
    host: str
    cached: bool
    hub: bool


def offline_mode() -> bool:
    """True when the hub is in offline mode (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``)."""
    if any(
        os.environ.get(name, "").strip().lower() in _TRUE
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    ):
        return True
    constants = sys.modules.get("huggingface_hub.constants")
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def _hf_candidates(filename: str) -> list[str]:
    """The files open_clip tries for ``filename``: its safetensors twin first, then the file itself."""
    if filename == _HF_WEIGHTS:
        return [_HF_SAFE_WEIGHTS, filename]
    if filename.endswith((".bin", ".pth")):
        return [filename[:-4] + ".safetensors", filename]
    return [filename]


def _hf_cached(repo_id: str, filenames: list[str]) -> bool:
    hub = importlib.import_module("huggingface_hub")
    return any(isinstance(hub.try_to_load_from_cache(repo_id, name), str) for name in filenames)


def _hf_endpoint_host() -> str:
    constants = importlib.import_module("huggingface_hub.constants")
    return urllib.parse.urlparse(str(constants.ENDPOINT)).hostname or "huggingface.co"


def locate(open_clip: Any, model_name: str, tag: str | None) -> WeightsSource | None:
    """Where the weights of ``model_name`` / ``tag`` come from; None when nothing is to be downloaded."""
    has_hub = bool(open_clip.pretrained.has_hf_hub())
    if model_name.startswith("hf-hub:"):
        repo_id = model_name[len("hf-hub:") :]
        if not has_hub:
            return None  # open_clip itself will say the hub package is missing
        cached = _hf_cached(repo_id, [_HF_CONFIG]) and (
            tag is None or _hf_cached(repo_id, _hf_candidates(_HF_WEIGHTS))
        )
        return WeightsSource(f"https://{_hf_endpoint_host()}/{repo_id}", _hf_endpoint_host(), cached, True)
    if tag is None:
        return None
    config = open_clip.get_pretrained_cfg(model_name, tag)
    if not config or "file" in config:
        return None
    hub_file = str(config.get("hf_hub", ""))
    if has_hub and hub_file:
        repo_id, filename = os.path.split(hub_file)
        cached = _hf_cached(repo_id, _hf_candidates(filename or _HF_WEIGHTS))
        return WeightsSource(f"https://{_hf_endpoint_host()}/{repo_id}", _hf_endpoint_host(), cached, True)
    url = str(config.get("url", ""))
    if not url:
        return None
    # open_clip's own cache for weights fetched by URL.
    cached = os.path.isfile(os.path.join(os.path.expanduser("~/.cache/clip"), os.path.basename(url)))
    return WeightsSource(url, urllib.parse.urlparse(url).hostname or url, cached, False)


def reachable(host: str, port: int = 443, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether a TCP connection to ``host`` (or to the HTTPS proxy that would carry it) opens in time.

    Name resolution runs inside the same deadline (on a daemon thread), so this returns within
    about ``timeout`` seconds whatever the network does.
    """
    target_host, target_port = host, port
    proxies = urllib.request.getproxies()
    proxy = proxies.get("https") or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(host):
        parsed = urllib.parse.urlparse(proxy if "://" in proxy else f"http://{proxy}")
        if parsed.hostname:
            target_host, target_port = parsed.hostname, parsed.port or 8080
    answer: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((target_host, target_port), timeout=timeout):
                answer.append(True)
        except (OSError, ValueError):
            answer.append(False)

    thread = threading.Thread(target=probe, name="galleria-network-probe", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return bool(answer and answer[0])


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """Keep huggingface_hub offline inside the block, so cached files load without any request."""
    constants: Any = importlib.import_module("huggingface_hub.constants")
    with _offline_lock:
        before = constants.HF_HUB_OFFLINE
        constants.HF_HUB_OFFLINE = True
        try:
            yield
        finally:
            constants.HF_HUB_OFFLINE = before


def _unavailable(model_name: str, tag: str | None, source: WeightsSource, why: str) -> RuntimeError:
    weights = f"the weights {tag!r} of {model_name!r}" if tag is not None else f"the model {model_name!r}"
    example = "/path/to/open_clip_pytorch_model.bin"
    return RuntimeError(
        f"{weights} are not in the local cache and {why}. Download the checkpoint elsewhere "
        f"({source.url}) and pass its local path: ClipEmbedder({model_name!r}, pretrained={example!r}) in "
        f"Python, --embedder clip:{model_name}:{example} on the command line; or use pretrained=None "
        "for random weights"
    )


def obtainable(open_clip: Any, model_name: str, tag: str | None) -> contextlib.AbstractContextManager[None]:
    """A context to load ``model_name`` / ``tag`` in, or a one-line RuntimeError when it cannot be had now.

    Cached weights get :func:`hub_offline`; weights that need a download get a plain context once the
    network answers.
    """
    source = locate(open_clip, model_name, tag)
    if source is None:
        return contextlib.nullcontext()
    if source.cached:
        return hub_offline() if source.hub else contextlib.nullcontext()
    if offline_mode():
        raise _unavailable(model_name, tag, source, "the hub is in offline mode (HF_HUB_OFFLINE is set)")
    if not reachable(source.host):
        raise _unavailable(model_name, tag, source, f"{source.host} cannot be reached")
    return contextlib.nullcontext()


#: The files timm fetches from a hub repository (safetensors first), when its config names none.
_TIMM_HUB_FILES = ("model.safetensors", "pytorch_model.bin")


def locate_timm(timm: Any, name: str) -> WeightsSource | None:
    """Where timm's weights ``name`` (``"resnet18.a1_in1k"``) come from; None when nothing is downloaded."""
    config = timm.models.get_pretrained_cfg(name)
    if config is None or getattr(config, "file", None) or getattr(config, "state_dict", None):
        return None
    hub_id = getattr(config, "hf_hub_id", None)
    hub = importlib.util.find_spec("huggingface_hub") is not None
    if hub_id and hub:
        filename = getattr(config, "hf_hub_filename", None)
        names = [filename] if filename else list(_TIMM_HUB_FILES)
        host = _hf_endpoint_host()
        return WeightsSource(f"https://{host}/{hub_id}", host, _hf_cached(hub_id, names), True)
    url = getattr(config, "url", None)
    if not url:
        return None
    torch_hub = importlib.import_module("torch.hub")
    cached = os.path.isfile(os.path.join(torch_hub.get_dir(), "checkpoints", os.path.basename(url)))
    return WeightsSource(url, urllib.parse.urlparse(url).hostname or url, cached, False)


def _timm_unavailable(model_name: str, name: str, source: WeightsSource, why: str) -> RuntimeError:
    example = "/path/to/model.safetensors"
    return RuntimeError(
        f"the timm weights {name!r} are not in the local cache and {why}. Download them elsewhere "
        f"({source.url}) and pass the local path: --embedder timm:{model_name}:{example} on the command "
        f"line, TimmEmbedder({model_name!r}, pretrained={example!r}) in Python; or "
        f"--embedder timm:{model_name}:random for seeded random weights (`galleria models` lists "
        "weights that work offline)"
    )


def obtainable_timm(timm: Any, model_name: str, name: str) -> contextlib.AbstractContextManager[None]:
    """A context to create timm's ``name`` with its weights in, or a one-line RuntimeError at once.

    As :func:`obtainable`: cached hub weights load with the hub kept offline; weights that need a
    download fail at once when the hub is offline or the host does not answer a quick probe.
    """
    source = locate_timm(timm, name)
    if source is None:
        return contextlib.nullcontext()
    if source.cached:
        return hub_offline() if source.hub else contextlib.nullcontext()
    if offline_mode():
        raise _timm_unavailable(
            model_name, name, source, "the hub is in offline mode (HF_HUB_OFFLINE is set)"
        )
    if not reachable(source.host):
        raise _timm_unavailable(model_name, name, source, f"{source.host} cannot be reached")
    return contextlib.nullcontext()
