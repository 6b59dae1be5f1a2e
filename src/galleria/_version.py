"""galleria's version, in a room of its own so that any floor can read it without the facade."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.2.0"
