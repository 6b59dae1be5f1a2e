"""Deprecated alias of :mod:`galleria.images.batches` (moved in galleria 0.3); removed in galleria 0.4.0."""

from __future__ import annotations

import warnings

from galleria.images.batches import *  # noqa: F403
from galleria.images.batches import __all__ as __all__

warnings.warn(
    "galleria.store.gallery is deprecated and is removed in galleria 0.4.0: "
    "import from galleria.images.batches",
    DeprecationWarning,
    stacklevel=2,
)
