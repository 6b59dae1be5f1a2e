"""The embedders by name, and rebuilding them from their JSON-able configs (no pickle).

Every embedder declares itself in its own module: a module of :mod:`galleria.embedders` with a
module-level ``COMPONENT`` (a :class:`galleria._declare.Component` of kind ``"embedder"``) is found
by scanning the package, and an installed package adds one through the entry-point group
``galleria.embedders``. Its ``extra`` carries ``from_config(config, checkpoint=None)``,
``parse_spec(rest)`` (the ``--embedder NAME:...`` spelling), ``spec`` (that spelling, for help) and,
for the ones that load a model, ``loading`` (what is imported, said on a terminal).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from galleria._declare import Component
from galleria._moved import moved_names
from galleria._plugins import LazyMapping, LazyNames, builtin_components, merge_components
from galleria._validation import check_choice
from galleria.embedders.base import Embedder

__all__ = [
    "EMBEDDER_TYPES",
    "embedder_component",
    "embedder_components",
    "embedder_config",
    "embedder_from_config",
]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(__name__, {"check_config": "galleria.embedders._config"})

#: The package's folder, scanned for the built-in components (the package itself, which imports this
#: module, is not imported here: no circle between the two).
_package = SimpleNamespace(__name__=__name__.rpartition(".")[0], __path__=[str(Path(__file__).parent)])


#: The built-in embedders' declarations (found by scanning this package).
_BUILTINS: tuple[Component, ...] = tuple(
    builtin_components(_package, "embedder", ("registry", "decoding"))  # decoding: a deprecated alias
)
#: Every embedder's declaration by name, plugins included (discovered on first use, never at import).
_COMPONENTS: LazyMapping[str, Component] = LazyMapping(
    lambda: {component.name: component for component in merge_components("embedder", _BUILTINS)}
)

#: Embedder types that :func:`embedder_from_config` can rebuild (every declared embedder; plugins
#: included, a view computed on first use).
EMBEDDER_TYPES: LazyNames[str] = LazyNames(lambda: tuple(_COMPONENTS))


def embedder_components() -> tuple[Component, ...]:
    """Every embedder's declaration (built-in, then plugins)."""
    return tuple(_COMPONENTS.values())


def embedder_component(name: Any) -> Component:
    """The declaration of the embedder ``name`` (ValueError naming it when unknown)."""
    return _COMPONENTS[check_choice("embedder", name, EMBEDDER_TYPES)]


def embedder_config(embedder: object) -> dict[str, Any] | None:
    """Return the embedder's ``config()`` (a JSON-able dict with a ``"type"``), or None if it has none.

    Raises TypeError if ``config()`` returns something that is not a JSON-able dict with a string
    ``"type"``.

    Examples
    --------
    >>> from galleria.embedders import PixelEmbedder
    >>> embedder_config(PixelEmbedder(size=4))["type"]
    'pixel'
    >>> embedder_config(object()) is None
    True
    """
    method = getattr(embedder, "config", None)
    if not callable(method):
        return None
    config = method()
    if not isinstance(config, dict) or not isinstance(config.get("type"), str):
        raise TypeError(f"{type(embedder).__name__}.config() must return a dict with a string 'type'")
    try:
        json.dumps(config)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{type(embedder).__name__}.config() is not JSON-able: {error}") from error
    return dict(config)


def embedder_from_config(
    config: Mapping[str, Any], *, checkpoint: Any = None, runtime: str | None = None
) -> Embedder:
    """Rebuild an embedder from a config written by :func:`embedder_config` (e.g. one in a store file).

    The config is untrusted: every value is checked before anything is built, and no file it names
    is ever opened. A CLIP config built from a local checkpoint records only the checkpoint's file
    name and SHA-256; pass the file as ``checkpoint`` and its digest is checked.

    Parameters
    ----------
    config : mapping
        A config with a ``"type"`` among :data:`EMBEDDER_TYPES`.
    checkpoint : str, os.PathLike or None
        The local checkpoint a CLIP config records (ValueError if it records none, or another one).
    runtime : {"torch", "onnx"} or None
        Force where a timm network, or a CLIP image side, runs (None: the runtime the config
        records, if installed). Pixel embedders have no network.

    Raises
    ------
    TypeError
        If ``config`` is not a mapping.
    ValueError
        For a missing or unknown ``"type"``, an unknown key, a value of the wrong type or out of
        bounds, or a checkpoint that is missing, unexpected or has another digest.

    Examples
    --------
    >>> embedder_from_config({"type": "pixel", "size": [4, 4], "grayscale": True, "batch_size": 8})
    PixelEmbedder(size=(4, 4), grayscale=True, batch_size=8)
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping, got {type(config).__name__}")
    kind = config.get("type")
    component = _COMPONENTS.get(kind) if isinstance(kind, str) else None
    rebuild = component.extra.get("from_config") if component is not None else None
    if rebuild is None:
        raise ValueError(f"unknown embedder type {kind!r} in config; known types are {EMBEDDER_TYPES}")
    options = {} if runtime is None else {"runtime": runtime}
    embedder: Embedder = rebuild(config, checkpoint=checkpoint, **options)
    return embedder
