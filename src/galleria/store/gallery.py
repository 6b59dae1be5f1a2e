"""Deprecated: moved to :mod:`galleria.images.batches` (galleria 0.3); this alias goes in the next release."""

from __future__ import annotations

from galleria.images.batches import *  # noqa: F403
from galleria.images.batches import __all__ as __all__
