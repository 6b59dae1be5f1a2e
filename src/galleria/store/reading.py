"""Deprecated alias of :mod:`galleria.images.reading` (moved in galleria 0.3); removed in galleria 0.4.0."""

from __future__ import annotations

import warnings

from galleria.images.reading import *  # noqa: F403
from galleria.images.reading import __all__ as __all__

warnings.warn(
    "galleria.store.reading is deprecated and is removed in galleria 0.4.0: "
    "import from galleria.images.reading",
    DeprecationWarning,
    stacklevel=2,
)
