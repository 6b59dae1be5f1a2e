"""Names that moved to another module: the old module hands them out for one more minor version.

A module some of whose names moved sets ``__getattr__ = moved_names(__name__, {"name": "new.module"})``.
Reading such a name from the old module warns once (a :class:`DeprecationWarning` naming the module to
import it from and the version that removes it) and gives the very object the new module holds.
galleria's own modules import every name from the module that defines it
(``tests/core/test_architecture.py``); CHANGELOG lists the moved names.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["REMOVED_IN", "moved_names"]

#: The version whose release removes the moved names from their old modules.
REMOVED_IN = "0.4.0"


def moved_names(module: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module``: each name of ``moved`` read from the module it moved to.

    Examples
    --------
    >>> import types, warnings
    >>> old = types.ModuleType("old")
    >>> sys.modules["old"] = old
    >>> old.__getattr__ = moved_names("old", {"sqrt": "math"})
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     import math
    ...     (old.sqrt is math.sqrt, old.sqrt is math.sqrt, len(caught))
    (True, True, 1)
    >>> str(caught[0].message)
    'old.sqrt is deprecated and is removed in galleria 0.4.0: import it from math'
    >>> del sys.modules["old"]
    """
    table = dict(moved)

    def __getattr__(name: str) -> Any:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is deprecated and is removed in galleria {REMOVED_IN}: import it from {target}",
            DeprecationWarning,
            stacklevel=2,
        )
        value = getattr(importlib.import_module(target), name)
        setattr(sys.modules[module], name, value)  # warned once: later reads find the name in the module
        return value

    return __getattr__
