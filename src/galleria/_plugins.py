"""Third-party components found through entry points: ``galleria.rerankers``, ``galleria.indexes``,
``galleria.embedders``.

A package adds a component by declaring an entry point in one of those groups whose object is a
:class:`galleria._declare.Component` (or a module with a ``COMPONENT``, or a zero-argument callable
returning one).

**Discovery is lazy.** Importing galleria (any of its modules) reads no entry point: a registry
discovers the plugins of its kind the first time it is *used* (a name looked up, a listing read),
once per process, and the installed packages' metadata is read once for all three groups. So a
plugin may import anything of galleria at its own import (``from galleria import
InMemoryImageEmbeddingStore``). The registries' listings are :class:`LazyNames` and
:class:`LazyMapping` views, which compute themselves on first use.

**A plugin cannot break galleria.** Each of these is one :class:`~galleria._warnings.PluginWarning`
naming the plugin's package and entry point, and the plugin is skipped (the built-ins and the
other plugins keep working): an entry point whose value is malformed (not ``module`` or
``module:object``); anything the plugin raises while imported (``SystemExit`` from a module-level
argparse included; only ``KeyboardInterrupt`` goes through); a malformed declaration; another plugin
API version; the wrong kind; a component that lacks what its kind needs (:data:`CONTRACTS`); a name
already taken by a built-in or an earlier plugin; a parameter name or alias that a galleria settings
key already means (``reserved``), or a parameter alias that another component spells.

A plugin's code runs behind a guard once it is accepted (:mod:`galleria._plugin_guard`): whatever
it raises while galleria runs it becomes one :class:`PluginError` naming the component and its
package. ``GALLERIA_NO_PLUGINS=1`` turns discovery off.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Generic, TypeVar, overload

from galleria._declare import KINDS, Component
from galleria._params import DeclarationError
from galleria._plugin_guard import CONTRACTS, PluginError, guarded, missing
from galleria._warnings import PluginWarning

__all__ = [
    "CONTRACTS",
    "NO_PLUGINS_VARIABLE",
    "LazyMapping",
    "LazyNames",
    "PluginError",
    "builtin_components",
    "clear_cache",
    "discovering",
    "merge_components",
    "plugin_components",
    "plugins_enabled",
]

#: The environment variable that turns plugin discovery off (``1``, ``true`` or ``yes``).
NO_PLUGINS_VARIABLE = "GALLERIA_NO_PLUGINS"
#: An entry point's value: ``module.path`` or ``module.path:object.attr``, optionally ``[extras]``.
_DOTTED = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*"
_VALUE = re.compile(rf"\s*{_DOTTED}\s*(:\s*{_DOTTED}\s*)?(\[[^\]]*\])?\s*")
_FOUND: dict[str, list[tuple[str, Component]]] = {}
#: ``[the function that read them, the entry points]``: read once (a test that fakes
#: ``importlib.metadata.entry_points`` is read anew).
_METADATA: list[Any] = []
_LOCK = threading.RLock()
#: The kinds whose discovery is running (a plugin using a registry while it is imported gets the
#: built-ins alone, not a second discovery).
_BUSY: set[str] = set()


def builtin_components(package: Any, kind: str, skip: Iterable[str] = ("registry",)) -> list[Component]:
    """Every ``COMPONENT`` of ``kind`` declared by a module of ``package`` (found by scanning it;
    private modules and those named in ``skip`` are not imported), in declared order."""
    import pkgutil

    found = []
    for module in pkgutil.iter_modules(package.__path__):
        if module.name.startswith("_") or module.name in skip:
            continue
        declared = getattr(importlib.import_module(f"{package.__name__}.{module.name}"), "COMPONENT", None)
        if isinstance(declared, Component) and declared.kind == kind:
            found.append(declared)
    return sorted(found, key=lambda component: (component.order, component.name))


def plugins_enabled() -> bool:
    """Whether entry-point discovery is on (``GALLERIA_NO_PLUGINS`` unset, or not 1/true/yes)."""
    return os.environ.get(NO_PLUGINS_VARIABLE, "").strip().lower() not in ("1", "true", "yes")


def _origin(entry: Any, group: str) -> str:
    dist = getattr(entry, "dist", None)
    package = getattr(dist, "name", None) or "an unknown package"
    return f"plugin package {package!r}, entry point {entry.name!r} = {entry.value!r} (group {group!r})"


def _warn(origin: str, problem: str) -> None:
    warnings.warn(PluginWarning(f"galleria: {origin} {problem}; skipped"), stacklevel=3)


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


def _load(entry: Any, group: str, kind: str) -> Component | None:
    """The entry point's well-formed component of ``kind``, or None after one warning."""
    origin = _origin(entry, group)
    value = getattr(entry, "value", None)
    if not isinstance(value, str) or not _VALUE.fullmatch(value):
        _warn(origin, "has a malformed value: an entry point names 'module' or 'module:object'")
        return None
    try:
        component = _as_component(entry.load())
    except KeyboardInterrupt:
        raise
    except DeclarationError as error:
        _warn(origin, f"declares a malformed component: {error}")
        return None
    except BaseException as error:  # SystemExit (a module-level argparse) included
        _warn(origin, f"failed to import: {type(error).__name__}: {error}")
        return None
    if not isinstance(component, Component):
        _warn(origin, f"is not a galleria Component (got {type(component).__name__})")
        return None
    if component.kind != kind:
        _warn(origin, f"declares a {component.kind}, not a {kind}")
        return None
    if inspect.isclass(component.build):
        lacking = missing(kind, component.build)
        if lacking:
            needs = ", ".join(f"{name}()" for name in CONTRACTS[kind])
            _warn(
                origin,
                f"declares the {kind} {component.name!r}, whose class {component.build.__name__} lacks "
                f"{', '.join(lacking)} (a {kind} needs {needs})",
            )
            return None
    return replace(component, origin=origin)


def plugin_components(kind: str) -> list[tuple[str, Component]]:
    """The well-formed components of ``kind`` the installed plugins declare, each with its origin.

    Cached per process; ``[]`` when discovery is off, and for a call made while the plugins of
    ``kind`` are being imported (a plugin that uses a registry at its import). Bad plugins are
    warned about once and left out.
    """
    if not plugins_enabled():
        return []
    with _LOCK:
        if kind in _FOUND:
            return list(_FOUND[kind])
        if kind in _BUSY:
            return []
        _BUSY.add(kind)
        try:
            group = f"galleria.{KINDS[kind]}"
            found = []
            for entry in _entries(group):
                component = _load(entry, group, kind)
                if component is not None:
                    found.append((component.origin, component))
        finally:
            _BUSY.discard(kind)
        _FOUND[kind] = found
        return list(found)


def discovering(kind: str) -> bool:
    """Whether the plugins of ``kind`` are being imported now (a registry then lists the built-ins)."""
    return kind in _BUSY


def _spellings(component: Component) -> dict[str, str]:
    """Every spelling of ``component``'s parameters (names and aliases) -> the parameter's name."""
    return {spelled: param.name for param in component.params for spelled in (param.name, *param.aliases)}


def _collision(component: Component, taken: Mapping[str, Component], reserved: Iterable[str]) -> str:
    """Why ``component`` (a plugin) collides with a settings key or another component ('' if not)."""
    if component.name in taken:
        owner = taken[component.name]
        whose = "a built-in" if not owner.origin else "another plugin"
        return f"declares the {component.kind} {component.name!r}, a name already taken by {whose}"
    keys = set(reserved)
    for param in component.params:
        for spelled in (param.name, *param.aliases):
            if spelled in keys:
                return (
                    f"declares the parameter {spelled!r} ({component.name}), a name galleria's "
                    "settings already use"
                )
    for other in taken.values():
        theirs = _spellings(other)
        aliases = {alias: param.name for param in other.params for alias in param.aliases}
        for param in component.params:
            for alias in param.aliases:
                if alias in theirs:
                    return (
                        f"declares the parameter alias {alias!r} ({component.name}.{param.name}), "
                        f"already a spelling of {other.name}'s {theirs[alias]!r}"
                    )
            if param.name in aliases:
                return (
                    f"declares the parameter {param.name!r} ({component.name}), already an alias of "
                    f"{other.name}'s {aliases[param.name]!r}"
                )
    return ""


def merge_components(
    kind: str,
    builtins: Iterable[Component],
    *,
    reserved: Iterable[str] = (),
    wrap: Callable[..., Any] | None = None,
) -> list[Component]:
    """The built-in components of ``kind`` (in declared order) then the plugins' (by declared order
    and name), each plugin's code behind the guard (:func:`galleria._plugin_guard.guarded`, ``wrap``
    applied to what it builds). A plugin that collides with a built-in, an earlier plugin or a
    ``reserved`` settings key is skipped with a warning."""
    reserved = tuple(reserved)
    result = {component.name: component for component in builtins}
    plugins: list[Component] = []
    for origin, component in plugin_components(kind):
        problem = _collision(component, result, reserved)
        if problem:
            _warn(origin, problem)
            continue
        result[component.name] = component
        plugins.append(component)
    listed = [component for component in result.values() if not component.origin]
    ordered = sorted(plugins, key=lambda component: (component.order, component.name))
    return listed + [guarded(component, wrap) for component in ordered]


def clear_cache() -> None:
    """Forget what discovery found (tests that install or fake plugins); the registries' views
    compute themselves again on their next use."""
    with _LOCK:
        _FOUND.clear()
        _METADATA.clear()
        for view in list(_VIEWS):
            view.forget()


T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
_VIEWS: list[Any] = []


class LazyNames(Sequence[T]):
    """A tuple computed on first use (a registry's listing, plugins included): importing the
    module that holds it discovers nothing. It compares equal to the tuple it stands for.

    Examples
    --------
    >>> names = LazyNames(lambda: ("a", "b"))
    >>> names == ("a", "b"), names[0], "b" in names, names
    (True, 'a', True, ('a', 'b'))
    """

    def __init__(self, compute: Callable[[], tuple[T, ...]]) -> None:
        self._compute = compute
        self._value: tuple[T, ...] | None = None
        _VIEWS.append(self)

    def forget(self) -> None:
        """Compute again on the next use."""
        self._value = None

    def value(self) -> tuple[T, ...]:
        """The tuple itself."""
        value = self._value
        if value is None:
            value = self._compute()
            if not any(discovering(kind) for kind in KINDS):
                self._value = value
        return value

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...
    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        return self.value()[index]

    def __len__(self) -> int:
        return len(self.value())

    def __iter__(self) -> Iterator[T]:
        return iter(self.value())

    def __contains__(self, item: object) -> bool:
        return item in self.value()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyNames):
            other = other.value()
        return isinstance(other, tuple) and self.value() == other

    def __hash__(self) -> int:
        return hash(self.value())

    def __add__(self, other: tuple[T, ...]) -> tuple[T, ...]:
        return self.value() + tuple(other)

    def __radd__(self, other: tuple[T, ...]) -> tuple[T, ...]:
        return tuple(other) + self.value()

    def __repr__(self) -> str:
        return repr(self.value())


class LazyMapping(Mapping[K, V], Generic[K, V]):
    """A dict computed on first use (a registry's table, plugins included); see :class:`LazyNames`."""

    def __init__(self, compute: Callable[[], dict[K, V]]) -> None:
        self._compute = compute
        self._value: dict[K, V] | None = None
        _VIEWS.append(self)

    def forget(self) -> None:
        """Compute again on the next use."""
        self._value = None

    def value(self) -> dict[K, V]:
        """The dict itself (do not change it)."""
        value = self._value
        if value is None:
            value = self._compute()
            if not any(discovering(kind) for kind in KINDS):
                self._value = value
        return value

    def __getitem__(self, key: K) -> V:
        return self.value()[key]

    def __len__(self) -> int:
        return len(self.value())

    def __iter__(self) -> Iterator[K]:
        return iter(self.value())

    def __repr__(self) -> str:
        return repr(self.value())
