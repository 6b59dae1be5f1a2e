"""The prepared galleries of a store (normalised view, DBA-augmented copy), built once per gallery state.

Preparing a gallery costs seconds (DBA over 20,000 images: most of a minute), and what is built on the
prepared store (the diffusion graph, the offline diffusion table) is kept on it. So a prepared store is
kept per source store and preparation, while the source's gallery stays the same: its row table
(``store._paths``, replaced, never changed in place, whenever the gallery changes) is the state token
it was built for. A changed gallery builds it again; concurrent first uses of one preparation build it
once (the others wait for it).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["MAX_PREPARED", "cached_preparation", "state_token"]

#: Prepared stores kept per source store (each may hold a full copy of the vectors).
MAX_PREPARED = 2


class _Entries:
    """One source store's prepared stores, most recently used last, and the lock that builds them."""

    def __init__(self) -> None:
        self.items: OrderedDict[Hashable, tuple[Any, Any]] = OrderedDict()
        self.building = threading.Lock()


_KEPT: weakref.WeakKeyDictionary[Any, _Entries] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def state_token(store: Any) -> Any:
    """The object that stands for the state of ``store``'s gallery: its row table (compared by identity)."""
    return getattr(store, "_paths", None)


def _entries(store: Any) -> _Entries | None:
    with _LOCK:
        try:
            entries = _KEPT.get(store)
            if entries is None:
                entries = _KEPT[store] = _Entries()
        except TypeError:  # not weakly referenceable: nothing is kept
            return None
        return entries


def cached_preparation(store: Any, key: Hashable, build: Callable[[], Any]) -> Any:
    """``build()`` for ``store`` and ``key``, reused while ``store``'s :func:`state_token` is the same."""
    entries = _entries(store)
    token = state_token(store)
    if entries is None or token is None:
        return build()

    def held() -> Any:
        with _LOCK:
            found = entries.items.get(key)
            if found is not None and found[0] is token:
                entries.items.move_to_end(key)
                return found[1]
        return None

    prepared = held()
    if prepared is not None:
        return prepared
    with entries.building:  # one build at a time per source store; the others then find it
        prepared = held()
        if prepared is not None:
            return prepared
        prepared = build()
        with _LOCK:
            if state_token(store) is token:  # the gallery did not change while it was built
                entries.items[key] = (token, prepared)
                entries.items.move_to_end(key)
                while len(entries.items) > MAX_PREPARED:
                    entries.items.popitem(last=False)
    return prepared
