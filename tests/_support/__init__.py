"""Helpers shared by the tests (importable as ``_support``: pyproject sets ``pythonpath = ["tests"]``)."""
