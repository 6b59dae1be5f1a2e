"""Deprecated alias of :mod:`galleria.images.queries` (moved in galleria 0.3); removed in galleria 0.4.0."""

from __future__ import annotations

import warnings

from galleria.images.queries import *  # noqa: F403
from galleria.images.queries import __all__ as __all__

warnings.warn(
    "galleria.store.queries is deprecated and is removed in galleria 0.4.0: "
    "import from galleria.images.queries",
    DeprecationWarning,
    stacklevel=2,
)
