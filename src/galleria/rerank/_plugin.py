"""A plugin's re-ranker behind the guard: what the registry hands out for a plugin's method.

:class:`PluginReranker` gives a plugin's re-ranker the whole :class:`~galleria.rerank.base.Reranker`
contract (a :attr:`~PluginReranker.store`, the batched default of ``rerank_batch`` when it has only
``rerank``), runs its code behind :func:`galleria._plugins.guarded_call` (whatever it raises is one
:class:`~galleria._plugins.PluginError` naming the method) and checks what it returns: one list of
:class:`~galleria.store.Candidate` per query, each drawn from that query's candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from galleria._declare import Component
from galleria._plugin_guard import PluginError, guarded_call
from galleria.store.candidate import Candidate

__all__ = ["PluginReranker"]


class PluginReranker:
    """``inner`` (built by the plugin ``component`` on ``store``) behind the guard.

    Every other attribute (``params()``, a plugin's own) is the inner re-ranker's.
    """

    def __init__(self, component: Component, inner: Any, store: Any, *args: Any, **kwargs: Any) -> None:
        self._component = component
        self._inner = inner
        own = getattr(inner, "store", None)
        self._store = store if own is None else own

    @property
    def store(self) -> Any:
        """The store the candidates must come from: the plugin's own ``store``, else the one it was
        built on."""
        return self._store

    @property
    def inner(self) -> Any:
        """The plugin's re-ranker itself."""
        return self._inner

    def rerank(self, candidates: Sequence[Candidate], top_k: int) -> list[Candidate]:
        """The plugin's ``rerank``, behind the guard, its answer checked."""
        answer = guarded_call(self._component, "while re-ranking", self._inner.rerank, candidates, top_k)
        return self._checked(answer, candidates, top_k, "")

    def rerank_batch(
        self, candidate_lists: Sequence[Sequence[Candidate]], top_k: int
    ) -> list[list[Candidate]]:
        """The plugin's ``rerank_batch``, or its ``rerank`` on each list; behind the guard, checked."""
        batch = getattr(self._inner, "rerank_batch", None)
        if callable(batch):
            answer = guarded_call(self._component, "while re-ranking", batch, candidate_lists, top_k)
            if not isinstance(answer, list) or len(answer) != len(candidate_lists):
                raise self._bad(f"rerank_batch returned {_what(answer)} for {len(candidate_lists)} lists")
        else:
            answer = [
                guarded_call(self._component, "while re-ranking", self._inner.rerank, candidates, top_k)
                for candidates in candidate_lists
            ]
        return [
            self._checked(found, given, top_k, f"[{position}]")
            for position, (found, given) in enumerate(zip(answer, candidate_lists, strict=True))
        ]

    def _checked(self, found: Any, given: Sequence[Candidate], top_k: Any, where: str) -> list[Candidate]:
        if not isinstance(found, list) or not all(isinstance(c, Candidate) for c in found):
            raise self._bad(f"returned {_what(found)}{where}, not a list of Candidates")
        allowed = {candidate.path for candidate in given}
        stray = next((c.path for c in found if c.path not in allowed), None)
        if stray is not None:
            raise self._bad(f"returned {stray!r}{where}, which was not among the candidates")
        return found[:top_k] if isinstance(top_k, int) else found

    def _bad(self, problem: str) -> PluginError:
        component = self._component
        return PluginError(
            f"the re-ranking method {component.name!r} ({component.origin}) {problem}",
            kind=component.kind,
            name=component.name,
            origin=component.origin,
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_component", "_inner", "_store"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"PluginReranker({self._component.name!r}, {self._inner!r})"


def _what(value: Any) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return f"a {type(value).__name__}"
