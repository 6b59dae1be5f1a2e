"""Every import between galleria's modules, read with :mod:`ast` (the architecture tests' one reader).

Imports inside functions and under ``TYPE_CHECKING`` count. ``from galleria.a import b`` is an import
of the module ``galleria.a.b`` where that module exists, else of the name ``b`` of ``galleria.a``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SOURCE", "Import", "attribute_reads", "module_files", "room_of", "scan", "top_level"]

SOURCE = Path(__file__).resolve().parents[2] / "src" / "galleria"


@dataclass(frozen=True)
class Import:
    """One imported module or name: where (``src/galleria/….py``, line), from which module, of what."""

    path: str
    line: int
    module: str
    target: str
    name: str | None


def module_files(source: Path = SOURCE) -> dict[str, Path]:
    """Dotted module name → file, for every module under ``source`` (a package by its ``__init__``)."""
    result: dict[str, Path] = {}
    for path in sorted(source.rglob("*.py")):
        parts = list(path.relative_to(source.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        result[".".join(parts)] = path
    return result


def room_of(module: str) -> str:
    """The room of a dotted module name (``galleria.store.store`` → ``store``; the facade: ``__init__``)."""
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def scan(source: Path = SOURCE) -> list[Import]:
    """Every import of a galleria module or name by a module under ``source``, in file order."""
    files = module_files(source)
    found: list[Import] = []
    for module, path in files.items():
        found += _scan_one(module, path, source, files)
    return sorted(found, key=lambda i: (i.path, i.line, i.target, i.name or ""))


def top_level(path: Path) -> tuple[set[str], set[str], list[str] | None]:
    """A module's names: those it defines, those it imports, and its ``__all__`` (``None`` without one).

    Definitions and imports under top-level ``if`` / ``try`` / ``with`` count (``TYPE_CHECKING``
    blocks, optional imports).
    """
    defined: set[str] = set()
    imported: set[str] = set()
    public: list[str] | None = None

    def bind(target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                defined.add(node.id)

    def visit(body: list[ast.stmt]) -> None:
        nonlocal public
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target)
                    if isinstance(target, ast.Name) and target.id == "__all__":
                        public = list(ast.literal_eval(node.value))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                bind(node.target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imported.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For)):
                visit(node.body)
                visit(node.orelse if not isinstance(node, ast.With) else [])
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "finalbody", []))

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body)
    return defined, imported, public


def attribute_reads(source: Path = SOURCE) -> list[Import]:
    """Every ``module.name`` read where ``module`` is a galleria module bound by an import in the file
    (``from galleria.store import persistence`` … ``persistence.write_store``), as an :class:`Import`."""
    files = module_files(source)
    found: list[Import] = []
    for item_module, path in files.items():
        bound: dict[str, str] = {}
        for item in _scan_one(item_module, path, source, files):
            if item.name is None and item.target in files:
                alias = _bound_name(path, item)
                if alias:
                    bound[alias] = item.target
        if not bound:
            continue
        where = str(path.relative_to(source.parent.parent))
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
            ):
                target = bound[node.value.id]
                if f"{target}.{node.attr}" not in files:
                    found.append(Import(where, node.lineno, item_module, target, node.attr))
    return sorted(found, key=lambda i: (i.path, i.line, i.target, i.name or ""))


def _bound_name(path: Path, item: Import) -> str | None:
    """The local name an import of the module ``item.target`` binds (``None`` for a dotted ``import a.b``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) != item.line:
            continue
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if item.target.endswith(f".{alias.name}"):
                    return alias.asname or alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == item.target:
                    return alias.asname
    return None


def _scan_one(module: str, path: Path, source: Path, files: dict[str, Path]) -> list[Import]:
    package = path.name == "__init__.py"
    where = str(path.relative_to(source.parent.parent))
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == source.name:
                    found.append(Import(where, node.lineno, module, alias.name, None))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != source.name:
                continue
            for alias in node.names:
                if f"{target}.{alias.name}" in files:
                    found.append(Import(where, node.lineno, module, f"{target}.{alias.name}", None))
                else:
                    found.append(Import(where, node.lineno, module, target, alias.name))
    return found
