"""The public API of declared components, for plugin authors (see docs/extending.md).

A re-ranker, index or embedder declares itself as a :class:`Component` of :class:`Param` s; a
package outside galleria exposes one through the entry-point groups ``galleria.rerankers``,
``galleria.indexes`` and ``galleria.embedders`` and states :data:`PLUGIN_API_VERSION`.
"""

from __future__ import annotations

from galleria._declare import KINDS, MAX_WORK, PLUGIN_API_VERSION, Component
from galleria._params import DeclarationError, Param, Space, format_value
from galleria._plugins import NO_PLUGINS_VARIABLE

__all__ = [
    "KINDS",
    "MAX_WORK",
    "NO_PLUGINS_VARIABLE",
    "PLUGIN_API_VERSION",
    "Component",
    "DeclarationError",
    "Param",
    "Space",
    "format_value",
]
