"""Real plugin packages for tests: a module and its ``*.dist-info`` (METADATA, entry_points.txt) in a
folder that goes on ``sys.path``, so that ``importlib.metadata`` finds the entry points as it finds an
installed package's; and galleria run in a child process with that folder on its path."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import galleria

SOURCE = str(Path(galleria.__file__).resolve().parents[1])
RERANKERS = "galleria.rerankers"


def write_plugin(
    site: Path, package: str, modules: dict[str, str], entry_points: dict[str, dict[str, str]]
) -> Path:
    """Write the distribution ``package`` into ``site``: each module (its dotted name → source), and
    the entry points (group → {name: value}). Returns ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    for name, source in modules.items():
        path = site.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    info = site / f"{package.replace('-', '_')}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n", encoding="utf-8"
    )
    lines = []
    for group, entries in entry_points.items():
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {value}" for name, value in entries.items())
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    return site


def run_galleria(
    site: Path, *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m galleria ARGS`` (or ``python -c`` when ``args[0]`` is ``-c``) with ``site`` on the path."""
    env = {key: value for key, value in os.environ.items() if key not in ("GALLERIA_NO_PLUGINS",)}
    env["PYTHONPATH"] = os.pathsep.join([SOURCE, str(site)])
    env["HF_HUB_OFFLINE"] = "1"
    command = [sys.executable, *(args if args and args[0] == "-c" else ("-m", "galleria", *args))]
    return subprocess.run(
        command, cwd=cwd or site, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


#: A plugin module with one well-behaved re-ranker (``keep``: the candidates in their order) and
#: declarations the tests point entry points at.
KEEP = '''
from galleria.components import PLUGIN_API_VERSION, Component, Param


class Keep:
    """Implements rerank only, subclasses nothing: the registry gives it the batched default."""

    def __init__(self, store, *, n=1):
        self.store = store

    def rerank(self, candidates, top_k):
        return [c.rescored(c.score) for c in candidates][:top_k]


COMPONENT = Component(
    "reranker", "keep", (Param("n", int, 1, 1, 9),), build=Keep, api_version=PLUGIN_API_VERSION
)
'''


def keep_site(where: Path) -> Path:
    """``where`` holding the good plugin ``galleria-keep`` (its method ``keep``)."""
    return write_plugin(where, "galleria-keep", {"keep_plugin": KEEP}, {RERANKERS: {"keep": "keep_plugin"}})


def bad_site(where: Path, source: str, value: str = "bad_plugin") -> Path:
    """``where`` holding the plugin ``galleria-bad``: module ``bad_plugin``, entry point ``bad = value``."""
    return write_plugin(where, "galleria-bad", {"bad_plugin": source}, {RERANKERS: {"bad": value}})
