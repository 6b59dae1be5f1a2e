"""Warning classes of galleria, so that users can filter them by category.

Examples
--------
>>> import warnings
>>> from galleria import SkippedImageWarning
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore", SkippedImageWarning)  # silence skipped-image reports only
...     warnings.warn(SkippedImageWarning("b.png", "cannot identify image file"))
>>> str(SkippedImageWarning("b.png", "truncated"))
'skipped b.png: truncated'
"""

from __future__ import annotations

__all__ = ["GalleriaWarning", "PluginWarning", "RecallTargetWarning", "SkippedImageWarning"]


class GalleriaWarning(UserWarning):
    """Base class of every warning galleria issues."""


class SkippedImageWarning(GalleriaWarning, RuntimeWarning):
    """An unreadable image was left out (``skip_errors=True``); ``path`` and ``reason`` say which and why.

    It reads ``skipped PATH: REASON``. It is also a RuntimeWarning, the category galleria used before,
    so existing filters keep working.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"skipped {path}: {reason}")
        self.path = path
        self.reason = reason


class RecallTargetWarning(GalleriaWarning):
    """An approximate index measured a recall below its ``recall_target`` while it was built."""


class PluginWarning(GalleriaWarning):
    """A plugin (an entry point of ``galleria.rerankers``, ``galleria.indexes`` or ``galleria.embedders``)
    failed to import or declared a malformed component, and was skipped; the built-ins are unaffected."""
