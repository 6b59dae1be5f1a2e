"""Third-party components found through entry points: ``galleria.rerankers``, ``galleria.indexes``,
``galleria.embedders``.

A package adds a component by declaring an entry point in one of those groups whose object is a
:class:`galleria._declare.Component` (or a module with a ``COMPONENT``, or a zero-argument callable
returning one). Discovery runs once per process, the first time a registry is built, and reads the
installed packages' metadata once for all three groups. A plugin that fails to import, declares a
malformed component, another plugin API version, the wrong kind or a name already taken is skipped
with one :class:`~galleria._warnings.PluginWarning` naming its package and entry point; it never
stops the built-ins. ``GALLERIA_NO_PLUGINS=1`` turns discovery off.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import warnings
from collections.abc import Iterable
from typing import Any

from galleria._declare import KINDS, Component
from galleria._params import DeclarationError
from galleria._warnings import PluginWarning

__all__ = [
    "NO_PLUGINS_VARIABLE",
    "builtin_components",
    "merge_components",
    "plugin_components",
    "plugins_enabled",
]

#: The environment variable that turns plugin discovery off (``1``, ``true`` or ``yes``).
NO_PLUGINS_VARIABLE = "GALLERIA_NO_PLUGINS"
_FOUND: dict[str, list[tuple[str, Component]]] = {}
#: ``[the function that read them, the entry points]``: read once (a test that fakes
#: ``importlib.metadata.entry_points`` is read anew).
_METADATA: list[Any] = []


def builtin_components(package: Any, kind: str, skip: Iterable[str] = ("registry",)) -> list[Component]:
    """Every ``COMPONENT`` of ``kind`` declared by a module of ``package`` (found by scanning it;
    private modules and those named in ``skip`` are not imported)."""
    import pkgutil

    found = []
    for module in pkgutil.iter_modules(package.__path__):
        if module.name.startswith("_") or module.name in skip:
            continue
        declared = getattr(importlib.import_module(f"{package.__name__}.{module.name}"), "COMPONENT", None)
        if isinstance(declared, Component) and declared.kind == kind:
            found.append(declared)
    return found


def plugins_enabled() -> bool:
    """Whether entry-point discovery is on (``GALLERIA_NO_PLUGINS`` unset, or not 1/true/yes)."""
    return os.environ.get(NO_PLUGINS_VARIABLE, "").strip().lower() not in ("1", "true", "yes")


def _origin(entry: Any, group: str) -> str:
    dist = getattr(entry, "dist", None)
    package = getattr(dist, "name", None) or "an unknown package"
    return f"plugin package {package!r}, entry point {entry.name!r} = {entry.value!r} (group {group!r})"


def _warn(entry: Any, group: str, problem: str) -> None:
    warnings.warn(PluginWarning(f"galleria: {_origin(entry, group)} {problem}; skipped"), stacklevel=3)


def _as_component(value: Any) -> Any:
    """The Component an entry point's object stands for (itself, a module's COMPONENT, a factory's)."""
    if isinstance(value, Component):
        return value
    if hasattr(value, "COMPONENT"):
        return value.COMPONENT
    if callable(value):
        return value()
    return value


def _entries(group: str) -> Iterable[Any]:
    """The entry points of ``group``; the installed packages' metadata is read once per process."""
    if not _METADATA or _METADATA[0] is not importlib.metadata.entry_points:
        _METADATA[:] = [importlib.metadata.entry_points, importlib.metadata.entry_points()]
    found = _METADATA[1]
    if hasattr(found, "select"):
        return list(found.select(group=group))
    return list(found.get(group, ()))  # pragma: no cover - the dict form of older Pythons


def plugin_components(kind: str) -> list[tuple[str, Component]]:
    """The well-formed components of ``kind`` the installed plugins declare, each with its origin.

    Cached per process; ``[]`` when discovery is off. Bad plugins are warned about once and left out.
    """
    if not plugins_enabled():
        return []
    if kind in _FOUND:
        return list(_FOUND[kind])
    group = f"galleria.{KINDS[kind]}"
    found: list[tuple[str, Component]] = []
    for entry in _entries(group):
        try:
            component = _as_component(entry.load())
        except DeclarationError as error:
            _warn(entry, group, f"declares a malformed component: {error}")
            continue
        except Exception as error:
            _warn(entry, group, f"failed to import: {type(error).__name__}: {error}")
            continue
        if not isinstance(component, Component):
            _warn(entry, group, f"is not a galleria Component (got {type(component).__name__})")
        elif component.kind != kind:
            _warn(entry, group, f"declares a {component.kind}, not a {kind}")
        else:
            found.append((_origin(entry, group), component))
    _FOUND[kind] = found
    return list(found)


def merge_components(kind: str, builtins: Iterable[Component]) -> list[Component]:
    """The built-in components of ``kind`` then the plugins', in declared order; a plugin whose name
    is already taken is skipped with a warning."""
    result = {component.name: component for component in builtins}
    for origin, component in plugin_components(kind):
        if component.name in result:
            warnings.warn(
                PluginWarning(
                    f"galleria: {origin} declares the {kind} {component.name!r}, "
                    "a name already taken; skipped"
                ),
                stacklevel=2,
            )
            continue
        result[component.name] = component
    return sorted(result.values(), key=lambda component: (component.order, component.name))


def clear_cache() -> None:
    """Forget what discovery found (tests that install or fake plugins)."""
    _FOUND.clear()
    _METADATA.clear()
