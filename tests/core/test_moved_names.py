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
