"""Module and function sizes in src/galleria: reported, and refused only far beyond what an idea needs.

Files and functions are split where an idea ends, never to meet a number (issue 35 §3: limits that
fail close by became targets — three modules stood at exactly 399 lines and several functions at 80).
So the limits sit far away: a module over :data:`MAX_MODULE_LINES` lines or a function over
:data:`MAX_FUNCTION_LINES` lines fails, and nothing within them is trimmed to fit. Run this file with
``python tests/core/test_sizes.py`` to see the largest modules and functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src" / "galleria"
#: A module this long holds more than one idea (the largest today is about 400 lines).
MAX_MODULE_LINES = 1000
#: A function this long does more than one thing (the largest today is about 80 lines).
MAX_FUNCTION_LINES = 200
#: How many of the largest modules and functions the report lists.
REPORTED = 10


def module_lengths(source: Path = SOURCE) -> dict[str, int]:
    return {
        str(path.relative_to(source)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(source.rglob("*.py"))
    }


def function_lengths(source: Path = SOURCE) -> dict[str, int]:
    result: dict[str, int] = {}
    for path in sorted(source.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        name = str(path.relative_to(source))

        def visit(node: ast.AST, prefix: str, name: str = name) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qualified = f"{prefix}{child.name}"
                    start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    assert child.end_lineno is not None
                    result[f"{name}:{qualified}"] = child.end_lineno - start + 1
                    visit(child, f"{qualified}.")
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")

        visit(tree, "")
    return result


def largest(lengths: dict[str, int], count: int = REPORTED) -> list[tuple[str, int]]:
    """The ``count`` longest entries, longest first (ties by name)."""
    return sorted(lengths.items(), key=lambda item: (-item[1], item[0]))[:count]


def report() -> str:
    """The largest modules and functions, one per line, with their line counts."""
    lines = [f"largest modules (limit {MAX_MODULE_LINES} lines):"]
    lines += [f"  {count:5d}  {name}" for name, count in largest(module_lengths())]
    lines.append(f"largest functions (limit {MAX_FUNCTION_LINES} lines):")
    lines += [f"  {count:5d}  {name}" for name, count in largest(function_lengths())]
    return "\n".join(lines)


def test_no_module_far_over_an_idea() -> None:
    over = sorted(name for name, lines in module_lengths().items() if lines > MAX_MODULE_LINES)
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}\n{report()}"


def test_no_function_far_over_an_idea() -> None:
    over = sorted(name for name, lines in function_lengths().items() if lines > MAX_FUNCTION_LINES)
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}\n{report()}"


def test_the_counts_see_methods_and_nested_functions(tmp_path: Path) -> None:
    # the measure itself: a method, a decorated function and a nested one are all counted
    (tmp_path / "m.py").write_text(
        "class A:\n    @staticmethod\n    def f():\n        def g():\n            pass\n        return g\n"
    )
    assert function_lengths(tmp_path) == {"m.py:A.f": 5, "m.py:A.f.g": 2}
    assert module_lengths(tmp_path) == {"m.py": 6}
    assert largest({"a": 3, "b": 7, "c": 7}, 2) == [("b", 7), ("c", 7)]


if __name__ == "__main__":
    print(report())
