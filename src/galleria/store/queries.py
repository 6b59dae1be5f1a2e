"""Deprecated: moved to :mod:`galleria.images.queries` (galleria 0.3); this alias goes in the next release."""

from __future__ import annotations

from galleria.images.queries import *  # noqa: F403
from galleria.images.queries import __all__ as __all__
