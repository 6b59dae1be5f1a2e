"""No import circles between the files of one room (issue 35 §3).

A room's files import one another in one direction only: a file never needs, round a circle, a file
that needs it. Every import counts (inside functions and under ``TYPE_CHECKING`` too), and a room's
``__init__`` is one of its files. Nothing is exempt.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from _support.imports import SOURCE, Import, room_of, scan


def rooms(source: Path = SOURCE) -> list[str]:
    """The rooms that are packages (a one-file room cannot hold a circle)."""
    return sorted(p.name for p in source.iterdir() if (p / "__init__.py").is_file())


def circles(found: list[Import], room: str) -> list[list[str]]:
    """The circles among ``room``'s modules: each a strongly connected group of two or more modules."""
    graph: dict[str, set[str]] = defaultdict(set)
    for item in found:
        if room_of(item.module) == room == room_of(item.target) and item.module != item.target:
            graph[item.module].add(item.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def _where(found: list[Import], group: list[str]) -> str:
    members = set(group)
    return "\n".join(
        f"  {item.path}:{item.line}: {item.module} -> {item.target}"
        for item in found
        if item.module in members and item.target in members and item.module != item.target
    )


@pytest.mark.parametrize("room", rooms())
def test_no_circle_among_the_files_of(room: str) -> None:
    found = scan()
    groups = circles(found, room)
    assert not groups, "\n".join(
        f"a circle in {room}/: {' <-> '.join(g)}\n{_where(found, g)}" for g in groups
    )


def test_the_check_sees_a_circle_through_a_function_level_import_and_the_package(tmp_path: Path) -> None:
    package = tmp_path / "src" / "galleria"
    (package / "store").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "store" / "__init__.py").write_text("from galleria.store.a import f\n")
    (package / "store" / "a.py").write_text("def f():\n    from galleria.store.b import g\n")
    (package / "store" / "b.py").write_text("import galleria.store as package\ndef g(): ...\n")
    (package / "store" / "c.py").write_text("from galleria.store.a import f\n")
    assert circles(scan(package), "store") == [["galleria.store", "galleria.store.a", "galleria.store.b"]]
