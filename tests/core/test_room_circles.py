"""No import circle between the files of one room (docs/architecture.md).

Every import of ``src/galleria`` counts, module level, inside functions and under ``TYPE_CHECKING``
alike (read with :mod:`ast`): a circle hidden in a function still ties the files together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2] / "src" / "galleria"

#: Circles still known, as frozensets of module names inside their room: this list may only shrink
#: (the store's is the ``rooms`` work of issue 35 §3).
KNOWN_CIRCLES: frozenset[frozenset[str]] = frozenset(
    {frozenset({"galleria.store._retrieval", "galleria.store._snapshot", "galleria.store.store"})}
)


def _module(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_graph(room: Path) -> dict[str, set[str]]:
    """Module → the modules of the same room it imports (its package ``__init__`` left out)."""
    modules = {_module(path): path for path in room.rglob("*.py")}
    package = _module(room / "__init__.py")
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([module] if module else []))
                targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target not in (name, package):
                    found.add(target)
        graph[name] = found
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[frozenset[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    result.append(frozenset(group))
    return result


ROOMS = sorted(path.parent for path in SOURCE.glob("*/__init__.py"))


@pytest.mark.parametrize("room", ROOMS, ids=lambda path: path.name)
def test_no_import_circle_inside_a_room(room: Path) -> None:
    found = [group for group in circles(room_graph(room)) if group not in KNOWN_CIRCLES]
    assert not found, (
        "import circles between the files of galleria."
        + room.name
        + ": "
        + "; ".join(" ↔ ".join(sorted(name.rsplit(".", 1)[1] for name in group)) for group in found)
    )


def test_the_circle_finder_finds_a_circle_hidden_in_a_function(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    assert circles({"a": {"b"}, "b": set()}) == []
