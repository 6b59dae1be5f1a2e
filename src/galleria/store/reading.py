"""Deprecated: moved to :mod:`galleria.images.reading` (galleria 0.3); this alias goes in the next release."""

from __future__ import annotations

from galleria.images.reading import *  # noqa: F403
from galleria.images.reading import __all__ as __all__
