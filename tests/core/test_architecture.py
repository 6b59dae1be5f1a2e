"""The import rule of docs/architecture.md: no import climbs a floor, no circle between rooms.

Every import in ``src/galleria`` is read with :mod:`ast` (imports inside functions and under
``TYPE_CHECKING`` count too) and checked against the floor table of ``docs/architecture.md``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "galleria"
DOC = ROOT / "docs" / "architecture.md"

#: Imports that still climb, as (from room, to room): this list may only shrink.
KNOWN_CLIMBS: frozenset[tuple[str, str]] = frozenset()


def floors() -> dict[str, int]:
    """Room → floor, read from the table between the ``layers`` markers of docs/architecture.md."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- layers", 1)[1].split("<!-- /layers -->", 1)[0]
    result: dict[str, int] = {}
    for floor, room in re.findall(r"^\|\s*(\d+)\s*\|\s*`([\w.]+)`\s*\|", table, flags=re.M):
        assert room not in result, f"docs/architecture.md lists {room!r} twice"
        result[room] = int(floor)
    return result


def room_of(parts: tuple[str, ...]) -> str:
    """The room of a module path relative to src/ (``galleria.store.store`` → ``store``)."""
    if len(parts) == 1:
        return "__init__"
    return parts[1].removesuffix(".py")


def module_name(path: Path, source: Path) -> tuple[list[str], bool]:
    rel = path.relative_to(source.parent).with_suffix("")
    parts = list(rel.parts)
    package = parts[-1] == "__init__"
    if package:
        parts = parts[:-1]
    return parts, package


def imports(source: Path = SOURCE) -> list[tuple[str, str, str, int]]:
    """Every (from room, to room, file, line) of an import between rooms of galleria."""
    found = set()
    for path in sorted(source.rglob("*.py")):
        parts, package = module_name(path, source)
        source_room = room_of(tuple(path.relative_to(source.parent).parts))
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = parts if package else parts[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
            for target in targets:
                pieces = target.split(".")
                if pieces[0] != "galleria" or len(pieces) < 2:
                    continue
                room = pieces[1]
                if not ((source / room).is_dir() or (source / f"{room}.py").is_file()):
                    continue  # `from galleria import name`: a name of the facade, not a room
                if room != source_room:
                    where = str(path.relative_to(source.parent.parent))
                    found.add((source_room, room, where, node.lineno))
    return sorted(found)


def test_every_room_is_on_a_floor() -> None:
    table = floors()
    rooms = {p.stem for p in SOURCE.glob("*.py")} | {
        p.name for p in SOURCE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()
    }
    missing = sorted(rooms - set(table))
    assert not missing, f"rooms missing from docs/architecture.md's floor table: {missing}"


def test_no_import_climbs_a_floor() -> None:
    table = floors()
    climbs = sorted(
        f"{path}:{line}: {source} (floor {table[source]}) imports {target} (floor {table[target]})"
        for source, target, path, line in imports()
        if table[target] > table[source] and (source, target) not in KNOWN_CLIMBS
    )
    assert not climbs, "imports that climb a floor:\n" + "\n".join(climbs)


def test_known_climbs_still_exist() -> None:
    # the allowlist only shrinks: a climb that was fixed must leave it
    table = floors()
    current = {(s, t) for s, t, _, _ in imports() if table[t] > table[s]}
    assert KNOWN_CLIMBS <= current, f"fixed climbs still listed: {sorted(KNOWN_CLIMBS - current)}"


def test_no_circle_between_rooms() -> None:
    graph: dict[str, set[str]] = {}
    for source, target, _, _ in imports():
        if (source, target) in KNOWN_CLIMBS:
            continue  # reported (and allowed, for now) by the climb test
        graph.setdefault(source, set()).add(target)
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(room: str) -> None:
        state[room] = 1
        path.append(room)
        for nxt in sorted(graph.get(room, ())):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                pytest.fail("a circle between rooms: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[room] = 2

    for room in sorted(graph):
        if room not in state:
            visit(room)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "src" / "galleria"
    (package / "store").mkdir(parents=True)
    (package / "rerank").mkdir()
    (package / "__init__.py").write_text("")
    (package / "rerank" / "__init__.py").write_text("")
    (package / "store" / "__init__.py").write_text("from . import core\n")
    (package / "store" / "core.py").write_text(
        "def f():\n    from ..rerank import x\n    import galleria.rerank.y\n"
    )
    found = {(s, t, line) for s, t, _, line in imports(package)}
    assert found == {("store", "rerank", 2), ("store", "rerank", 3)}
