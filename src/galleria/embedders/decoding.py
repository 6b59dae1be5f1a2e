"""Deprecated alias of :mod:`galleria.images.decoding` (moved in galleria 0.3); removed in galleria 0.4.0."""

from __future__ import annotations

import warnings

from galleria.images.decoding import *  # noqa: F403
from galleria.images.decoding import __all__ as __all__

warnings.warn(
    "galleria.embedders.decoding is deprecated and is removed in galleria 0.4.0: "
    "import from galleria.images.decoding",
    DeprecationWarning,
    stacklevel=2,
)
