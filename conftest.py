"""Collection rules shared by ``tests/`` and the doctests of ``src/galleria`` (both are testpaths).

The modules of ``galleria.web`` import the web extra (FastAPI, Jinja2) when they are imported, and
the digits' doctest reads scikit-learn's copy of them (the demo extra), so those doctests are
collected only where their extra is installed; elsewhere the session header says so, as the tests
of an extra skip with a reason naming it.
"""

from __future__ import annotations

import importlib.util

#: Doctests that need an extra: (the files, the extra, the modules it installs).
_DOCTESTS = [
    ("src/galleria/web/*", "web", ("fastapi", "jinja2")),
    ("src/galleria/datasets/digits.py", "demo", ("sklearn",)),
]
_LEFT_OUT = [
    (files, extra, missing)
    for files, extra, modules in _DOCTESTS
    if (missing := [name for name in modules if importlib.util.find_spec(name) is None])
]

collect_ignore_glob = [files for files, _, _ in _LEFT_OUT]


def pytest_report_header() -> list[str]:
    return [
        f"doctests of {files} not collected: the {extra} extra (galleria[{extra}]) is not installed "
        f"(no {', '.join(missing)})"
        for files, extra, missing in _LEFT_OUT
    ]
