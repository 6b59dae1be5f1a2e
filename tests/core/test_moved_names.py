"""Names that moved (galleria 0.3) stay importable from their old modules, as the same objects."""

from __future__ import annotations

import importlib
import warnings

import pytest

MOVED = [
    ("galleria.store.reading", "galleria.images.reading", "read_rgb"),
    ("galleria.store.reading", "galleria.images.reading", "ImageReadError"),
    ("galleria.store.gallery", "galleria.images.batches", "iter_decoded_batches"),
    ("galleria.store.queries", "galleria.images.queries", "as_image_list"),
    ("galleria.embedders.decoding", "galleria.images.decoding", "rgb_array"),
    ("galleria.embedders.base", "galleria.images.reading", "input_size_of"),
    ("galleria.rerank._common", "galleria.vectors", "stable_smallest"),
    ("galleria.rerank.adaptive", "galleria.statistics", "GalleryStatistics"),
    ("galleria.rerank.adaptive", "galleria.statistics", "gallery_statistics"),
    ("galleria.rerank.adaptive", "galleria.statistics", "read_statistics"),
    ("galleria.rerank.adaptive", "galleria.statistics", "clip_round"),
    ("galleria.rerank.adaptive", "galleria.store._snapshot", "store_statistics"),
    ("galleria.rerank._consistent", "galleria.store._snapshot", "take_snapshot"),
]


@pytest.mark.parametrize(("old", "new", "name"), MOVED)
def test_old_name_is_the_new_object(old: str, new: str, name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", DeprecationWarning
        )  # the alias modules warn (tests/core/test_architecture.py)
        moved = getattr(importlib.import_module(old), name)
    assert moved is getattr(importlib.import_module(new), name)


def _moved_tables() -> list[tuple[str, str, str]]:
    """(old module, name, new module) of every ``__getattr__ = moved_names(__name__, {...})`` in src."""
    import ast
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "src"
    found = []
    for path in sorted((source / "galleria").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["__getattr__"]
                and isinstance(node.value, ast.Call)
            ):
                module = ".".join(path.relative_to(source).with_suffix("").parts)
                table = ast.literal_eval(node.value.args[1])
                found += [(module, name, new) for name, new in sorted(table.items())]
    return found


MOVED_NAMES = _moved_tables()


def test_the_moved_names_are_found() -> None:
    assert ("galleria.embedders.base", "input_size_of", "galleria.images.reading") in MOVED_NAMES


@pytest.mark.parametrize(("old", "name", "new"), MOVED_NAMES)
def test_a_moved_name_warns_once_and_is_the_new_object(old: str, name: str, new: str) -> None:
    import sys

    module = importlib.import_module(old)
    module.__dict__.pop(name, None)  # as if never read: the first read warns
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = getattr(module, name)
        again = getattr(module, name)
    assert first is again is getattr(importlib.import_module(new), name)
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert messages == [f"{old}.{name} is deprecated and is removed in galleria 0.4.0: import it from {new}"]
    assert name not in getattr(sys.modules[old], "__all__", ())


def test_a_name_that_never_was_there_is_an_attribute_error() -> None:
    module = importlib.import_module("galleria.evaluation.report")
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = module.no_such_name
