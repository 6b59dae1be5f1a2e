"""Issue 26 §3: ``web/`` has one router per page and one for the API; the old module names stay
importable for a release, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import sys

import pytest

pytest.importorskip("fastapi", reason="the web extra (galleria[web]) is not installed")


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("galleria.web.pages", "galleria.web._site", "Site"),
        ("galleria.web.map_routes", "galleria.web.routes.map", "map_router"),
        ("galleria.web.duplicates_routes", "galleria.web.routes.duplicates", "duplicates_router"),
        ("galleria.web.view_routes", "galleria.web.routes.view", "view_router"),
    ],
)
def test_old_module_names_warn_and_give_the_same_objects(old: str, new: str, name: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=old.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)


def test_the_app_registers_each_page_once() -> None:
    import numpy as np

    from galleria import InMemoryImageEmbeddingStore
    from galleria.web import create_app

    store = InMemoryImageEmbeddingStore.from_embeddings(
        ["/g/a/1.png", "/g/b/2.png"], np.eye(2, 4, dtype=np.float32)
    )
    paths = create_app(store).openapi()["paths"]
    expected = {
        "/": {"get", "post"},
        "/upload/{key}.jpg": {"get"},
        "/eval": {"get"},
        "/eval/{number}": {"get"},
        "/map": {"get"},
        "/api/map": {"get"},
        "/duplicates": {"get"},
        "/view/{relative}": {"get"},
        "/api/info": {"get"},
        "/api/search": {"post"},
        "/thumb/{relative}": {"get"},
        "/image/{relative}": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths.get(path, {})), path
