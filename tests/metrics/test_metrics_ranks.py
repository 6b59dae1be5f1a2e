"""retrieval_ranks (multi-positive), ranks_from_embeddings and image_text_retrieval vs brute force."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from galleria import image_text_retrieval, ranks_from_embeddings, retrieval_ranks
from galleria.metrics import ranks as ranks_module

try:  # the tensor forms only: torch comes with the timm and clip extras
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch (the timm or clip extra) is not installed")

INF = math.inf


def brute_force_ranks(scores: Any, positives: list[set[int]]) -> list[int]:
    """Sort each row by (-score, index) and return the position of the first positive."""
    ranks = []
    for row, wanted in zip(scores, positives, strict=True):
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))
        ranks.append(next(position for position, j in enumerate(order) if j in wanted))
    return ranks


# ---------------------------------------------------------------------------------------------
# retrieval_ranks


def test_every_form_of_positives_gives_the_same_ranks() -> None:
    scores = [[0.9, 0.5, 0.5, 0.1], [0.2, 0.7, 0.7, 0.7], [0.0, 0.0, 0.3, 0.3]]
    sets = [{1, 2}, {3, 2}, {0}]
    expected = brute_force_ranks(scores, sets)
    assert expected == [1, 1, 2]
    mask = np.zeros((3, 4), dtype=bool)
    for i, wanted in enumerate(sets):
        mask[i, list(wanted)] = True
    forms: list[Any] = [
        [list(s) for s in sets],
        [tuple(s) for s in sets],
        sets,
        [np.array(sorted(s)) for s in sets],
        [[1, 2], [3, 2], 0],  # an int is a single positive
        mask,
        mask.tolist(),
    ]
    for form in forms:
        assert retrieval_ranks(scores, form).tolist() == expected, form


@needs_torch
def test_tensors_give_the_same_ranks_as_arrays() -> None:
    scores = np.array([[0.9, 0.5, 0.5, 0.1], [0.2, 0.7, 0.7, 0.7], [0.0, 0.0, 0.3, 0.3]])
    mask = np.zeros((3, 4), dtype=bool)
    mask[0, [1, 2]] = mask[1, [3, 2]] = mask[2, 0] = True
    assert retrieval_ranks(scores, torch.from_numpy(mask)).tolist() == retrieval_ranks(scores, mask).tolist()
    single = np.array([[1.0, 2.0, 2.0], [3.0, 3.0, 3.0]])
    assert retrieval_ranks(single, torch.tensor([0, 0])).tolist() == [2, 0]
    queries = [[1.0, 0.0], [0.0, 1.0]]
    gallery = [[0.0, 2.0], [3.0, 0.0], [1.0, 1.0]]
    assert ranks_from_embeddings(
        torch.tensor(queries), torch.tensor(gallery), [2, 2], metric="ip"
    ).tolist() == [1, 1]


def test_single_positive_forms_and_fixed_width_index_arrays() -> None:
    scores = np.array([[1.0, 2.0, 2.0], [3.0, 3.0, 3.0]])
    assert retrieval_ranks(scores, [2, 2]).tolist() == [1, 2]
    assert retrieval_ranks(scores, np.array([2, 2])).tolist() == [1, 2]
    assert retrieval_ranks(scores, np.array([[2, 0], [2, 1]])).tolist() == [1, 1]
    assert retrieval_ranks(scores, np.array([0, 0])).tolist() == [2, 0]


def test_returns_int64_ranks() -> None:
    ranks = retrieval_ranks([[0.1, 0.2]], [0])
    assert ranks.dtype == np.int64
    assert ranks.shape == (1,)


def test_best_positive_with_infinite_scores() -> None:
    scores = [[-INF, -INF, 0.0, -INF], [INF, INF, -INF, INF]]
    sets = [{0, 3}, {3, 1}]
    assert (
        retrieval_ranks(scores, [list(s) for s in sets]).tolist() == brute_force_ranks(scores, sets) == [1, 1]
    )


@st.composite
def multi_positive_cases(draw: Any) -> tuple[np.ndarray, list[set[int]]]:
    n = draw(st.integers(1, 6))
    m = draw(st.integers(1, 8))
    kind = draw(st.sampled_from(["float64", "float32", "int16"]))
    values = st.sampled_from([-INF, -1.0, 0.0, 2.0, INF] if kind != "int16" else [-32768, -1, 0, 2, 32767])
    rows = draw(st.lists(st.lists(values, min_size=m, max_size=m), min_size=n, max_size=n))
    sets = draw(st.lists(st.sets(st.integers(0, m - 1), min_size=1, max_size=m), min_size=n, max_size=n))
    return np.array(rows, dtype=kind), sets


@settings(max_examples=800)
@given(multi_positive_cases(), st.sampled_from(["lists", "mask", "mixed"]), st.integers(1, 48))
def test_multi_positive_ranks_equal_brute_force(
    case: tuple[np.ndarray, list[set[int]]], form: str, block_bytes: int
) -> None:
    scores, sets = case
    expected = brute_force_ranks(scores.tolist(), sets)
    if form == "lists":
        positives: Any = [sorted(s, reverse=True) for s in sets]
    elif form == "mask":
        positives = np.zeros(scores.shape, dtype=bool)
        for i, wanted in enumerate(sets):
            positives[i, list(wanted)] = True
    else:
        positives = [next(iter(s)) if len(s) == 1 else set(s) for s in sets]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ranks_module, "_KERNEL_BLOCK_BYTES", block_bytes)
        patch.setattr(ranks_module, "_OUTER_BLOCK_BYTES", 2 * block_bytes)
        assert retrieval_ranks(scores, positives).tolist() == expected


@pytest.mark.parametrize(
    ("positives", "error", "match"),
    [
        ([[0], []], ValueError, r"positives\[1\] is empty: query 1 needs at least one positive"),
        ([[0], [2]], ValueError, r"positives\[1\] holds index 2, out of range \[0, 2\)"),
        ([[0], [-1]], ValueError, r"positives\[1\] holds index -1"),
        ([0, 5], ValueError, r"positives\[1\] = 5 is out of range"),
        ([0], ValueError, r"positives must have 2 entries.*got 1"),
        ([[True, False], [False, False]], ValueError, r"positives\[1\] has no positive"),
        (np.zeros((2, 3), dtype=bool), ValueError, r"boolean mask must have shape \(2, 2\), got \(2, 3\)"),
        (np.zeros((3, 1), dtype=np.int64), ValueError, r"positives must have 2 rows.*got 3"),
        (np.zeros((2, 0), dtype=np.int64), ValueError, r"no positive"),
        (np.array([[0, 1], [1, 2]]), ValueError, r"out of range"),
        (np.zeros((2, 2, 1), dtype=np.int64), ValueError, r"positives must be 1-D or 2-D"),
        ([0, 1.0], TypeError, r"positives\[1\] must be an index or a collection of indices, got 1\.0"),
        ([[0], [1.0]], TypeError, r"positives\[1\]\[0\] must be an integer index, got 1\.0 \(float\)"),
        ([[0], [True]], TypeError, r"positives\[1\]\[0\] must be an integer index, got True"),
        ([True, False], TypeError, r"positives\[0\] must be an index or a collection of indices, got True"),
        (np.array([True, False]), TypeError, r"booleans, which are not indices"),
        (np.array([0.0, 1.0]), TypeError, r"positives must hold integer indices, got dtype float64"),
        ([[0], np.array([0.5])], TypeError, r"positives\[1\] must hold integer indices, got dtype float64"),
        ([[0], "a"], TypeError, r"positives\[1\] must be an index or a collection of indices, got 'a'"),
        ("01", TypeError, r"positives must be indices or a boolean mask"),
    ],
)
def test_bad_positives(positives: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        retrieval_ranks([[0.1, 0.2], [0.3, 0.4]], positives)


def test_bad_scores_name_the_scores_argument() -> None:
    with pytest.raises(ValueError, match=r"scores contains NaN \(first at row 1, column 0\)"):
        retrieval_ranks([[0.1, 0.2], [math.nan, 0.4]], [[0, 1], [1]])
    with pytest.raises(ValueError, match=r"scores contains NaN"):
        retrieval_ranks([[0.1, 0.2], [math.nan, 0.4]], np.ones((2, 2), dtype=bool))
    with pytest.raises(ValueError, match=r"scores must be 2-D"):
        retrieval_ranks([0.1, 0.2], [0, 1])
    with pytest.raises(TypeError, match=r"scores must hold real numbers"):
        retrieval_ranks([["x"]], [0])


# ---------------------------------------------------------------------------------------------
# ranks_from_embeddings


def unit(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


@st.composite
def integer_embeddings(draw: Any) -> tuple[np.ndarray, np.ndarray, list[set[int]], int]:
    n = draw(st.integers(1, 12))
    m = draw(st.integers(1, 10))
    d = draw(st.integers(1, 4))
    small = st.integers(-2, 2)
    queries = np.array(draw(st.lists(st.lists(small, min_size=d, max_size=d), min_size=n, max_size=n)))
    gallery = np.array(draw(st.lists(st.lists(small, min_size=d, max_size=d), min_size=m, max_size=m)))
    sets = draw(st.lists(st.sets(st.integers(0, m - 1), min_size=1, max_size=3), min_size=n, max_size=n))
    chunk = draw(st.integers(1, n + 1))
    return queries, gallery, sets, chunk


@settings(max_examples=400)
@given(integer_embeddings(), st.sampled_from(["float32", "float64", "int64"]))
def test_ranks_from_embeddings_equal_the_full_matrix_exactly(
    case: tuple[np.ndarray, np.ndarray, list[set[int]], int], dtype: str
) -> None:
    queries, gallery, sets, chunk = case
    positives = [sorted(s) for s in sets]
    full = queries.astype(np.float64) @ gallery.astype(np.float64).T
    expected = retrieval_ranks(full, positives)
    assert expected.tolist() == brute_force_ranks(full.tolist(), sets)
    got = ranks_from_embeddings(
        queries.astype(dtype), gallery.astype(dtype), positives, metric="ip", chunk_size=chunk
    )
    np.testing.assert_array_equal(got, expected)


def test_cosine_ranks_match_the_full_normalised_matrix() -> None:
    rng = np.random.default_rng(5)
    queries = rng.normal(size=(97, 16))
    gallery = rng.normal(size=(41, 16))
    gallery[3] = 0.0  # a zero vector scores 0 against everything
    truth = rng.integers(0, 41, size=97)
    full = unit(queries) @ unit(gallery).T
    expected = retrieval_ranks(full, truth)
    for chunk in (1, 7, None):
        got = ranks_from_embeddings(queries, gallery, truth, chunk_size=chunk)
        np.testing.assert_array_equal(got, expected)
    # float32 in, float32 arithmetic: ranks agree (no near ties in this data).
    got32 = ranks_from_embeddings(
        queries.astype(np.float32), gallery.astype(np.float32), truth, chunk_size=10
    )
    np.testing.assert_array_equal(got32, expected)
    # Cosine ignores the scale of queries and gallery items.
    scaled = ranks_from_embeddings(queries * 3.5, gallery * 0.25, truth, chunk_size=13)
    np.testing.assert_array_equal(scaled, expected)


def test_ranks_from_embeddings_accepts_lists_and_tensors() -> None:
    queries = [[1.0, 0.0], [0.0, 1.0]]
    gallery = [[0.0, 2.0], [3.0, 0.0], [1.0, 1.0]]
    assert ranks_from_embeddings(queries, gallery, [1, [0, 2]]).tolist() == [0, 0]
    assert ranks_from_embeddings(np.array(queries), np.array(gallery), [2, 2], metric="ip").tolist() == [1, 1]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"gallery": np.ones((3, 4))},
            ValueError,
            r"queries and gallery must have the same dimension, got 2 and 4",
        ),
        ({"queries": np.ones((0, 2))}, ValueError, r"queries must not be empty"),
        ({"gallery": np.ones(2)}, ValueError, r"gallery must be 2-D"),
        ({"queries": [[1.0, math.nan], [0.0, 1.0]]}, ValueError, r"queries must be finite, got nan at row 0"),
        (
            {"gallery": [[1.0, 0.0], [0.0, 1.0], [INF, 0.0]]},
            ValueError,
            r"gallery must be finite, got inf at row 2",
        ),
        ({"queries": [["a", "b"]]}, TypeError, r"queries must hold real numbers"),
        ({"metric": "l2"}, ValueError, r"metric must be one of \('cosine', 'ip'\), got 'l2'"),
        ({"metric": 1}, TypeError, r"metric must be one of"),
        ({"chunk_size": 0}, ValueError, r"chunk_size must be a positive integer, got 0"),
        ({"chunk_size": 2.0}, TypeError, r"chunk_size must be a positive integer, got 2\.0"),
        ({"chunk_size": True}, TypeError, r"chunk_size must be a positive integer, got True"),
        ({"positives": [0, []]}, ValueError, r"positives\[1\] is empty"),
        ({"positives": [0, 3]}, ValueError, r"positives\[1\] = 3 is out of range \[0, 3\)"),
        ({"positives": [0]}, ValueError, r"positives must have 2 entries"),
    ],
)
def test_bad_embedding_input(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    arguments: dict[str, Any] = {
        "queries": [[1.0, 0.0], [0.0, 1.0]],
        "gallery": [[0.0, 2.0], [3.0, 0.0], [1.0, 1.0]],
        "positives": [0, 1],
    }
    arguments.update(kwargs)
    options = {key: arguments.pop(key) for key in ("metric", "chunk_size") if key in arguments}
    with pytest.raises(error, match=match):
        ranks_from_embeddings(arguments["queries"], arguments["gallery"], arguments["positives"], **options)


# ---------------------------------------------------------------------------------------------
# image_text_retrieval


def test_image_text_retrieval_equals_brute_force_in_both_directions() -> None:
    rng = np.random.default_rng(8)
    images = rng.integers(-2, 3, size=(30, 6)).astype(np.float64)
    texts = rng.integers(-2, 3, size=(150, 6)).astype(np.float64)
    text_to_image = np.repeat(np.arange(30), 5)
    rng.shuffle(text_to_image)
    ks = [1, 5, 10, 10, 200]
    sims = texts @ images.T
    captions = [set(np.flatnonzero(text_to_image == i).tolist()) for i in range(30)]
    i2t = brute_force_ranks(sims.T.tolist(), captions)
    t2i = brute_force_ranks(sims.tolist(), [{int(i)} for i in text_to_image])
    expected = {
        "image_to_text": [float(np.mean(np.array(i2t) < k)) for k in ks],
        "text_to_image": [float(np.mean(np.array(t2i) < k)) for k in ks],
    }
    assert image_text_retrieval(images, texts, text_to_image, ks, metric="ip", chunk_size=7) == expected
    assert image_text_retrieval(images, texts, text_to_image.tolist(), ks, metric="ip") == expected


def test_image_text_retrieval_cosine_and_default_ks() -> None:
    images = [[1.0, 0.0], [0.0, 1.0]]
    texts = [[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]
    result = image_text_retrieval(images, texts, [0, 1, 1])
    assert set(result) == {"image_to_text", "text_to_image"}
    assert result["image_to_text"] == [1.0, 1.0, 1.0]
    assert result["text_to_image"] == [2 / 3, 1.0, 1.0]
    # Cosine: scaling the vectors changes nothing.
    scaled = image_text_retrieval(np.array(images) * 10, np.array(texts) * 0.1, [0, 1, 1])
    assert scaled == result


@pytest.mark.parametrize(
    ("text_to_image", "error", "match"),
    [
        ([0, 0, 0], ValueError, r"text_to_image names no text for image 1"),
        ([0, 1], ValueError, r"text_to_image must have 3 entries"),
        ([0, 1, 2], ValueError, r"text_to_image\[2\] = 2 is out of range \[0, 2\)"),
        ([0, 1, 1.0], TypeError, r"text_to_image\[2\] must be an integer index"),
        ([0, True, 1], TypeError, r"text_to_image\[1\] must be an integer index, got True"),
    ],
)
def test_bad_text_to_image(text_to_image: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        image_text_retrieval([[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], text_to_image)


def test_image_text_retrieval_other_bad_input() -> None:
    images = [[1.0, 0.0], [0.0, 1.0]]
    with pytest.raises(
        ValueError, match=r"image_embeddings and text_embeddings must have the same dimension"
    ):
        image_text_retrieval(images, [[1.0, 0.0, 0.0]], [0])
    with pytest.raises(ValueError, match=r"ks must not be empty"):
        image_text_retrieval(images, [[1.0, 0.0], [0.0, 1.0]], [0, 1], ks=[])
    with pytest.raises(TypeError, match=r"ks\[0\] must be a positive integer"):
        image_text_retrieval(images, [[1.0, 0.0], [0.0, 1.0]], [0, 1], ks=[0.5])
    with pytest.raises(ValueError, match=r"metric must be one of"):
        image_text_retrieval(images, [[1.0, 0.0], [0.0, 1.0]], [0, 1], metric="l2")
    with pytest.raises(ValueError, match=r"text_embeddings must be finite"):
        image_text_retrieval(images, [[1.0, math.nan], [0.0, 1.0]], [0, 1])
