"""Deprecated: moved to :mod:`galleria.images.decoding` (galleria 0.3); this alias goes next release."""

from __future__ import annotations

from galleria.images.decoding import *  # noqa: F403
from galleria.images.decoding import __all__ as __all__
