"""Index names, parameter validation and construction by name (what the store and its files use).

Every index declares itself in its own module: a module of :mod:`galleria.index` with a module-level
``COMPONENT`` (a :class:`galleria._declare.Component` of kind ``"index"``) is found by scanning the
package, and an installed package adds one through the entry-point group ``galleria.indexes``
(discovered on the registry's first use, never at import). Its
``extra`` says whether it is made by name (``creatable``), its own parameter check (``validate``;
else the declaration's), how a store file rebuilds it (``from_bytes``) and which of its arrays hold
faiss's binary format (``faiss_blobs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from galleria._declare import Component
from galleria._plugins import LazyMapping, LazyNames, builtin_components, merge_components
from galleria._validation import check_choice
from galleria.index.base import SPACES, SearchIndex

__all__ = [
    "FAISS_BLOBS",
    "INDEX_NAMES",
    "create_index",
    "index_component",
    "index_components",
    "index_from_bytes",
    "validate_index_params",
]

#: The package's folder, scanned for the built-in components (the package itself, which imports this
#: module, is not imported here: no circle between the two).
_package = SimpleNamespace(__name__=__name__.rpartition(".")[0], __path__=[str(Path(__file__).parent)])


#: The built-in indexes' declarations (found by scanning this package).
_BUILTINS: tuple[Component, ...] = tuple(builtin_components(_package, "index"))
#: Every index's declaration by name, plugins included (discovered on first use, never at import).
_COMPONENTS: LazyMapping[str, Component] = LazyMapping(
    lambda: {component.name: component for component in merge_components("index", _BUILTINS)}
)

#: Indexes that can be created by name (``search_index="hnsw"``, ``--index hnsw``); plugins
#: included, a view computed on first use.
INDEX_NAMES: LazyNames[str] = LazyNames(
    lambda: tuple(name for name, c in _COMPONENTS.items() if c.extra.get("creatable"))
)
_SERIALISED_NAMES: LazyNames[str] = LazyNames(
    lambda: tuple(name for name, c in _COMPONENTS.items() if "from_bytes" in c.extra)
)


def index_components() -> tuple[Component, ...]:
    """Every index's declaration (built-in, then plugins)."""
    return tuple(_COMPONENTS.values())


def index_component(name: Any) -> Component:
    """The declaration of the index ``name`` (ValueError naming it when unknown)."""
    return _COMPONENTS[check_choice("search_index", name, tuple(_COMPONENTS))]


def validate_index_params(name: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check the parameters of the built-in index ``name``; return them complete (defaults filled in).

    Call it before any work starts: unknown names raise ValueError naming them, values of the wrong
    kind TypeError, out-of-range values ValueError. The exact index takes no parameters.

    Examples
    --------
    >>> validate_index_params("exact", None)
    {}
    >>> validate_index_params("hnsw", {"search_candidates": 128})["search_candidates"]
    128
    """
    check_choice("search_index", name, INDEX_NAMES)
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"index_params must be a mapping or None, got {type(params).__name__}")
    component = _COMPONENTS[name]
    if not component.params:
        if params:
            names = sorted(map(str, params))
            raise ValueError(f"the {name} index takes no parameters, got index_params with {names}")
        return {}
    validate = component.extra.get("validate")
    if validate is not None:
        checked: dict[str, Any] = validate(params)
        return checked
    return component.check(dict(params or {}))


def create_index(name: str, space: str, params: Mapping[str, Any] | None = None) -> SearchIndex:
    """Create an empty built-in index by name (``"exact"``, ``"hnsw"`` or ``"ivfpq"``) in ``space``.

    Examples
    --------
    >>> create_index("hnsw", "l2", {"graph_degree": 8}).params()["graph_degree"]
    8
    """
    checked = validate_index_params(name, params)
    check_choice("space", space, SPACES)
    index: SearchIndex = _COMPONENTS[name].build(space, **checked)
    return index


#: Per serialised index type, the arrays of its container that hold faiss's binary format: a store
#: file's loader hands faiss these bytes where they lie instead of reading them into an array.
FAISS_BLOBS: LazyMapping[str, frozenset[str]] = LazyMapping(
    lambda: {
        name: frozenset(c.extra["faiss_blobs"]) for name, c in _COMPONENTS.items() if "faiss_blobs" in c.extra
    }
)


def index_from_bytes(name: str, data: Any) -> SearchIndex:
    """Rebuild an index of type ``name`` (exact, hnsw, ivfpq, milvus or external) from its ``to_bytes()``.

    ``data`` may be bytes, a bytearray, a memoryview, a 1-D uint8 array, or a container a store
    file's loader has already read (:class:`galleria.index._serial.Unpacked`). Corrupt, truncated or
    mismatched data raises ValueError; nothing is unpickled.
    """
    check_choice("name", name, _SERIALISED_NAMES)
    index: SearchIndex = _COMPONENTS[name].extra["from_bytes"](data)  # milvus reconnects to its uri
    return index
