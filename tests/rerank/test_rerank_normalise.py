"""Power normalisation and centring (galleria.rerank.normalise): the core against a literal
transcription, the read-only view and its queries, the diffusions' parameters, bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from galleria import InMemoryImageEmbeddingStore
from galleria.rerank import augment_store, make_reranker
from galleria.rerank.normalise import normalise_vectors, normalised_store
from galleria.rerank.registry import check_method_params


def literal(rows: list[list[float]], power: float, mean: list[float] | None) -> list[list[float]]:
    """The definition, one number at a time."""
    out = []
    for row in rows:
        powered = [math.copysign(abs(x) ** power, x) for x in row]
        norm = math.sqrt(sum(x * x for x in powered))
        unit = [x / norm for x in powered] if norm > 0 else [0.0] * len(row)
        if mean is not None:
            shifted = [x - m for x, m in zip(unit, mean, strict=True)]
            norm = math.sqrt(sum(x * x for x in shifted))
            unit = [x / norm for x in shifted] if norm > 0 else [0.0] * len(row)
        out.append(unit)
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(-4, 4, allow_nan=False, width=32), min_size=3, max_size=3), min_size=1, max_size=6
    ),
    st.sampled_from([1.0, 0.5, 0.25, 0.8]),
    st.booleans(),
)
def test_normalise_vectors_equals_the_definition(
    rows: list[list[float]], power: float, centred: bool
) -> None:
    mean = [0.3, -0.1, 0.2] if centred else None
    got = normalise_vectors(np.array(rows), power, None if mean is None else np.array(mean))
    np.testing.assert_allclose(got, literal(rows, power, mean), atol=1e-5)
    assert got.dtype == np.float32


def _store(space: str = "cosine", seed: int = 0) -> InMemoryImageEmbeddingStore:
    rng = np.random.default_rng(seed)
    centres = np.abs(rng.normal(size=(3, 10))) * 2
    vectors = np.abs(np.repeat(centres, 12, axis=0) + 0.7 * rng.normal(size=(36, 10)))  # non-negative
    return InMemoryImageEmbeddingStore.from_embeddings([f"g{i:02d}" for i in range(36)], vectors, space=space)


def test_the_view_holds_the_normalised_gallery_and_transforms_every_query() -> None:
    store = _store()
    view = normalised_store(store, vector_power=0.5, centre=True)
    powered = literal(store.embeddings.tolist(), 0.5, None)
    mean = np.mean(powered, axis=0).tolist()
    np.testing.assert_allclose(view.embeddings, literal(powered, 1.0, mean), atol=1e-5)
    assert view.vector_transform == {"vector_power": 0.5, "centre": True}
    assert store.vector_transform is None and store.embeddings.min() >= 0  # the original is untouched
    queries = np.abs(np.random.default_rng(5).normal(size=(4, 10)))
    found = view.retrieve_by_vector(queries, k=36)
    transformed = np.array(literal(queries.tolist(), 0.5, mean))
    for got, query in zip(found, transformed, strict=True):
        cosines = view.embeddings @ query
        want = [view.paths[i] for i in np.argsort(-cosines, kind="stable")]
        assert [c.path for c in got] == want
        np.testing.assert_allclose([c.score for c in got], 1 - np.sort(cosines)[::-1], atol=1e-5)
    plain = store.retrieve_by_vector(queries, k=36)
    assert [[c.path for c in p] for p in plain] != [[c.path for c in f] for f in found]
    only_power = normalised_store(store, vector_power=0.5)
    np.testing.assert_allclose(only_power.embeddings, powered, atol=1e-5)


def test_the_view_is_read_only(tmp_path: Path) -> None:
    store = _store()
    view = normalised_store(store, centre=True)
    with pytest.raises(ValueError, match="read-only normalised view"):
        view.remove_images(["g00"])
    with pytest.raises(ValueError, match="read-only normalised view"):
        view.save_to_disk(tmp_path / "view.safetensors")
    with pytest.raises(ValueError, match="read-only normalised view"):
        view.add_images([str(tmp_path / "new.png")])
    assert len(view) == 36 and not (tmp_path / "view.safetensors").exists()
    augmented = augment_store(view, neighbors=3)  # DBA of the view stays a view
    assert augmented.vector_transform == view.vector_transform
    with pytest.raises(ValueError, match="read-only normalised view"):
        augmented.save_to_disk(tmp_path / "augmented.safetensors")


def test_bad_settings_are_named() -> None:
    store = _store()
    for bad in (0, 0.0, 1.5, -0.5, float("nan")):
        with pytest.raises(ValueError, match="vector_power"):
            normalised_store(store, vector_power=bad)
    for bad_type in (True, "0.5", None):
        with pytest.raises(TypeError, match="vector_power"):
            normalised_store(store, vector_power=bad_type)
    with pytest.raises(TypeError, match="centre"):
        normalised_store(store, centre="yes")
    with pytest.raises(ValueError, match="cosine"):
        normalised_store(_store("l2"), vector_power=0.5)
    with pytest.raises(ValueError, match="normalise the original"):
        normalised_store(augment_store(store, neighbors=2), vector_power=0.5)
    with pytest.raises(ValueError, match="already normalised"):
        normalised_store(normalised_store(store, centre=True), vector_power=0.5)
    with pytest.raises(ValueError, match="vector_power"):
        check_method_params("diffusion", {"vector_power": 2})
    with pytest.raises(TypeError, match="centre"):
        check_method_params("decoupled-diffusion", {"centre": 1})
    # The no-op values are left out: a setting without them reads as before.
    assert set(check_method_params("diffusion", {"vector_power": 1.0, "centre": False})) == set(
        check_method_params("diffusion", {})
    )


@pytest.mark.parametrize("method", ["diffusion", "decoupled-diffusion"])
def test_a_diffusion_on_the_prepared_gallery_equals_one_run_by_hand(method: str) -> None:
    store = _store(seed=2)
    params = {"k": 5, "query_k": 3, **({"truncation": 20} if method == "decoupled-diffusion" else {})}
    prepared = {"vector_power": 0.5, "centre": True, "dba_neighbors": 3, "dba_alpha": 1.0}
    reranker = make_reranker(method, store, **params, **prepared)
    assert reranker.store.vector_transform == {"vector_power": 0.5, "centre": True}
    assert reranker.store.augmentation == {"method": "dba", "neighbors": 3, "alpha": 1.0}
    by_hand_store = augment_store(
        normalised_store(store, vector_power=0.5, centre=True), neighbors=3, alpha=1.0
    )
    by_hand = make_reranker(method, by_hand_store, **params)
    assert make_reranker(method, by_hand_store, **params, **prepared).store is by_hand_store  # as it is
    queries = np.abs(np.random.default_rng(9).normal(size=(3, 10)))
    got = reranker.rerank_batch(reranker.store.retrieve_by_vector(queries, k=30), top_k=30)
    want = by_hand.rerank_batch(by_hand_store.retrieve_by_vector(queries, k=30), top_k=30)
    assert [[(c.path, c.score) for c in p] for p in got] == [[(c.path, c.score) for c in p] for p in want]
    settings = check_method_params(method, {**params, "vector_power": 0.5, "centre": True})
    assert settings["vector_power"] == 0.5 and settings["centre"] is True
