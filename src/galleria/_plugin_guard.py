"""A plugin's code run behind a guard: what a plugin raises while galleria runs it becomes one
:class:`PluginError` naming the component, its package and entry point, and what it raised.

:func:`guarded` wraps an accepted plugin's declaration (:mod:`galleria._plugins` calls it when it
merges the plugins): its constructor, its adaptive rule and its constraints (a TypeError /
ValueError refusing the parameters excepted) run through :func:`guarded_call`; the object it builds
is checked against its kind's contract (:data:`CONTRACTS`) and handed to the registry's ``wrap``
(for a re-ranker, :class:`galleria.rerank._plugin.PluginReranker`, which guards its re-ranking).
``KeyboardInterrupt`` always goes through.

Ground floor: imports nothing from galleria but :mod:`galleria._declare`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from galleria._declare import Component

__all__ = ["CONTRACTS", "PluginError", "guarded", "guarded_call", "missing"]

#: What each kind's built object must have (methods, checked on the class a component's ``build``
#: names at discovery, and on the object a factory returns when it is built).
CONTRACTS: dict[str, tuple[str, ...]] = {
    "reranker": ("rerank",),
    "index": ("add", "search", "reconstruct", "remove", "to_bytes", "params", "__len__"),
    "embedder": ("embed",),
}


class PluginError(RuntimeError):
    """A plugin's own code failed (its constructor, adaptive rule or re-ranking): the message names
    the component, its package and entry point, and what it raised. The command line prints it as
    one line (exit code 2), the HTTP API answers it as JSON naming the method."""

    def __init__(self, message: str, *, kind: str = "", name: str = "", origin: str = "") -> None:
        super().__init__(message)
        self.kind, self.name, self.origin = kind, name, origin


def missing(kind: str, target: Any) -> list[str]:
    """What ``target`` (a class, or a built object) lacks of its kind's :data:`CONTRACTS`."""
    return [name for name in CONTRACTS[kind] if not callable(getattr(target, name, None))]


def _failure(component: Component, doing: str, error: BaseException) -> PluginError:
    what = {"reranker": "re-ranking method", "index": "index", "embedder": "embedder"}[component.kind]
    text = " ".join(str(error).split()) or "(no message)"
    return PluginError(
        f"the {what} {component.name!r} ({component.origin}) failed {doing}: {type(error).__name__}: {text}",
        kind=component.kind,
        name=component.name,
        origin=component.origin,
    )


def guarded_call(
    component: Component, doing: str, call: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """``call(*args, **kwargs)``, a plugin's code: whatever it raises (``KeyboardInterrupt`` and a
    :class:`PluginError` excepted) becomes one :class:`PluginError` naming ``component``."""
    try:
        return call(*args, **kwargs)
    except (KeyboardInterrupt, PluginError):
        raise
    except BaseException as error:
        raise _failure(component, doing, error) from error


def guarded(component: Component, wrap: Callable[..., Any] | None) -> Component:
    """A plugin's declaration whose constructor and adaptive rule run behind the guard; the built
    object is checked against its kind's contract, then handed to ``wrap(component, built, *args,
    **kwargs)`` (the registry's adapter; the arguments are the constructor's)."""
    build, adaptive, constraints = component.build, component.adaptive, component.constraints

    def guarded_build(*args: Any, **kwargs: Any) -> Any:
        built = guarded_call(component, "while being built", build, *args, **kwargs)
        lacking = missing(component.kind, built)
        if lacking:
            raise PluginError(
                f"the {component.kind} {component.name!r} ({component.origin}) built a "
                f"{type(built).__name__} without {', '.join(lacking)}",
                kind=component.kind,
                name=component.name,
                origin=component.origin,
            )
        return built if wrap is None else wrap(component, built, *args, **kwargs)

    def guarded_adaptive(stats: Any) -> dict[str, Any]:
        rule = guarded_call(component, "in its adaptive rule", adaptive, stats)  # type: ignore[arg-type]
        if not isinstance(rule, dict):
            problem = TypeError(f"it returned a {type(rule).__name__}, not a dict")
            raise _failure(component, "in its adaptive rule", problem)
        return rule

    def guarded_constraints(params: dict[str, Any]) -> dict[str, Any] | None:
        try:  # a refusal (TypeError / ValueError naming the parameters) is the constraint's answer
            return constraints(params)  # type: ignore[misc]
        except (TypeError, ValueError, KeyboardInterrupt, PluginError):
            raise
        except BaseException as error:
            raise _failure(component, "in its constraints", error) from error

    return replace(
        component,
        build=guarded_build,
        adaptive=None if adaptive is None else guarded_adaptive,
        constraints=None if constraints is None else guarded_constraints,
    )
