"""Collection rules shared by ``tests/`` and the doctests of ``src/galleria`` (both are testpaths).

The modules of ``galleria.web`` import the web extra (FastAPI, Jinja2) when they are imported, so
their doctests are collected only where it is installed; elsewhere the session header says so, as
the tests of an extra skip with a reason naming it.
"""

from __future__ import annotations

import importlib.util

_WEB_MISSING = [name for name in ("fastapi", "jinja2") if importlib.util.find_spec(name) is None]

collect_ignore_glob = ["src/galleria/web/*"] if _WEB_MISSING else []


def pytest_report_header() -> list[str]:
    if not _WEB_MISSING:
        return []
    missing = ", ".join(_WEB_MISSING)
    return [
        f"doctests of src/galleria/web not collected: the web extra (galleria[web]) is not installed "
        f"({missing})"
    ]
