"""recall_at_k against the spec: its worked rules, a literal transcription as oracle, and bad input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from galleria import recall_at_k
from galleria.metrics import ranks as ranks_module

try:  # the tensor forms only: torch comes with the timm and clip extras
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch (the timm or clip extra) is not installed")

INF = math.inf


def spec_recall_at_k(sim_matrix: Any, ground_truth: Any, ks: Any) -> list[float]:
    """The spec's algorithm, step by step: sort (score, index) pairs with key (-score, index)."""
    n = len(sim_matrix)
    ranks = []
    for i in range(n):
        scores = sim_matrix[i]
        gt_idx = ground_truth[i]
        items = [(scores[j], j) for j in range(len(scores))]
        items = sorted(items, key=lambda x: (-x[0], x[1]))
        ranks.append([j for _, j in items].index(gt_idx))
    results = []
    for k in ks:
        count = sum(1 for r in ranks if r < k)
        results.append(round(count / n, 4))
    return results


# ---------------------------------------------------------------------------------------------
# The spec's worked rules


def test_ties_are_broken_by_the_lower_gallery_index() -> None:
    sims = [[0.5, 0.5, 0.5, 0.5]]
    # Every item ties: the rank is the gallery index itself.
    assert [recall_at_k(sims, [j], [1, 2, 3, 4]) for j in range(4)] == [
        [1.0, 1.0, 1.0, 1.0],
        [0.0, 1.0, 1.0, 1.0],
        [0.0, 0.0, 1.0, 1.0],
        [0.0, 0.0, 0.0, 1.0],
    ]


def test_a_tie_after_the_ground_truth_does_not_push_it_down() -> None:
    # gt at index 1 ties with index 3 (later) and index 0 (earlier, higher score wins anyway).
    assert recall_at_k([[0.9, 0.4, 0.1, 0.4]], [1], [1, 2]) == [0.0, 1.0]
    assert recall_at_k([[0.1, 0.4, 0.9, 0.4]], [3], [2, 3]) == [0.0, 1.0]


def test_ranks_are_zero_indexed_recall_at_1_means_first_place() -> None:
    sims = [[0.9, 0.1], [0.2, 0.8]]
    assert recall_at_k(sims, [0, 1], [1]) == [1.0]
    assert recall_at_k(sims, [1, 0], [1, 2]) == [0.0, 1.0]


def test_descending_order_higher_score_is_better() -> None:
    assert recall_at_k([[1.0, 2.0, 3.0]], [2], [1]) == [1.0]
    assert recall_at_k([[1.0, 2.0, 3.0]], [0], [1, 2, 3]) == [0.0, 0.0, 1.0]


def test_k_larger_than_the_gallery_gives_one() -> None:
    assert recall_at_k([[0.1, 0.2], [0.3, 0.0]], [0, 1], [2, 3, 1000]) == [1.0, 1.0, 1.0]


def test_duplicate_ks_and_their_order_are_kept() -> None:
    sims = [[0.9, 0.1, 0.5], [0.3, 0.3, 0.2], [0.0, 0.8, 0.8]]
    assert recall_at_k(sims, [2, 0, 2], [2, 1, 2, 1]) == [1.0, 0.3333, 1.0, 0.3333]


def test_results_are_rounded_to_four_decimals_with_python_round() -> None:
    sims = np.zeros((7, 2))
    truth = [0, 0, 1, 1, 1, 1, 1]  # 2 of 7 at rank 0
    result = recall_at_k(sims, truth, [1])
    assert result == [round(2 / 7, 4)] == [0.2857]
    assert all(type(value) is float for value in result)


def test_worked_example_from_the_docstring() -> None:
    sims = [[0.9, 0.1, 0.5], [0.3, 0.3, 0.2], [0.0, 0.8, 0.8]]
    assert recall_at_k(sims, [0, 1, 1], [1, 2, 5]) == [0.6667, 1.0, 1.0]


def test_infinities_are_ordinary_scores() -> None:
    sims = [[-INF, INF, INF, 0.0], [-INF, -INF, -INF, -INF], [INF, -INF, 5.0, -INF]]
    for truth in ([2, 3, 3], [0, 0, 1], [1, 2, 0]):
        assert recall_at_k(sims, truth, [1, 2, 3, 4]) == spec_recall_at_k(sims, truth, [1, 2, 3, 4])


@pytest.mark.parametrize(
    "dtype", [np.float16, np.float32, np.float64, np.int8, np.int64, np.uint8, np.uint16]
)
def test_every_numeric_dtype_including_its_extremes(dtype: Any) -> None:
    if np.dtype(dtype).kind == "f":
        low, high = -np.inf, np.inf
    else:
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    base = np.array([[low, 1, low, high, 1, low], [high, high, 0, low, 1, high]], dtype=dtype)
    for a in range(6):
        for b in range(6):
            truth = [a, b]
            expected = spec_recall_at_k(base.tolist(), truth, [1, 2, 3, 4, 5, 6])
            assert recall_at_k(base, truth, [1, 2, 3, 4, 5, 6]) == expected


def test_accepts_nested_lists_and_numpy_arrays() -> None:
    rng = np.random.default_rng(3)
    sims = rng.integers(0, 4, size=(20, 9)).astype(np.float32)
    truth = rng.integers(0, 9, size=20)
    expected = spec_recall_at_k(sims.tolist(), truth.tolist(), [1, 3, 5])
    assert recall_at_k(sims.tolist(), truth.tolist(), [1, 3, 5]) == expected
    assert recall_at_k(sims, truth, np.array([1, 3, 5])) == expected
    assert recall_at_k(sims, [np.int32(t) for t in truth], [np.int64(1), 3, np.uint8(5)]) == expected


@needs_torch
def test_accepts_torch_tensors() -> None:
    rng = np.random.default_rng(3)
    sims = rng.integers(0, 4, size=(20, 9)).astype(np.float32)
    truth = rng.integers(0, 9, size=20)
    expected = spec_recall_at_k(sims.tolist(), truth.tolist(), [1, 3, 5])
    assert recall_at_k(torch.from_numpy(sims), torch.from_numpy(truth), [1, 3, 5]) == expected
    assert recall_at_k(torch.from_numpy(sims).double(), tuple(truth.tolist()), (1, 3, 5)) == expected


def test_non_contiguous_and_fortran_order_inputs() -> None:
    rng = np.random.default_rng(4)
    big = rng.integers(0, 3, size=(30, 20)).astype(np.float64)
    truth = rng.integers(0, 10, size=15)
    view = big[::2, ::2]
    expected = spec_recall_at_k(view.tolist(), truth.tolist(), [1, 2, 4])
    assert recall_at_k(view, truth, [1, 2, 4]) == expected
    assert recall_at_k(np.asfortranarray(view), truth, [1, 2, 4]) == expected


def test_the_input_is_left_unchanged() -> None:
    sims = np.array([[0.3, np.inf, -np.inf], [0.0, 0.0, 0.0]])
    before = sims.copy()
    truth = np.array([0, 2])
    recall_at_k(sims, truth, [1])
    np.testing.assert_array_equal(sims, before)
    np.testing.assert_array_equal(truth, [0, 2])


# ---------------------------------------------------------------------------------------------
# The oracle property: heavy ties, ±inf, several dtypes

TIE_VALUES = [-INF, -1.0, 0.0, 0.25, 1.0, INF]


@st.composite
def recall_cases(draw: Any) -> tuple[np.ndarray, list[int], list[int]]:
    n = draw(st.integers(1, 7))
    m = draw(st.integers(1, 9))
    kind = draw(st.sampled_from(["float64", "float32", "int8", "uint8"]))
    if kind.startswith("float"):
        values = st.sampled_from(TIE_VALUES)
    elif kind == "int8":
        values = st.sampled_from([-128, -1, 0, 3, 127])
    else:
        values = st.sampled_from([0, 1, 2, 255])
    rows = draw(st.lists(st.lists(values, min_size=m, max_size=m), min_size=n, max_size=n))
    truth = draw(st.lists(st.integers(0, m - 1), min_size=n, max_size=n))
    ks = draw(st.lists(st.integers(1, m + 2), min_size=1, max_size=5))
    return np.array(rows, dtype=kind), truth, ks


@settings(max_examples=2500)
@given(recall_cases())
def test_recall_at_k_equals_the_literal_spec(case: tuple[np.ndarray, list[int], list[int]]) -> None:
    sims, truth, ks = case
    assert recall_at_k(sims, truth, ks) == spec_recall_at_k(sims.tolist(), truth, ks)


@settings(max_examples=300)
@given(recall_cases(), st.integers(1, 64))
def test_block_boundaries_do_not_change_the_result(
    case: tuple[np.ndarray, list[int], list[int]], block_bytes: int
) -> None:
    sims, truth, ks = case
    expected = spec_recall_at_k(sims.tolist(), truth, ks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ranks_module, "_KERNEL_BLOCK_BYTES", block_bytes)
        patch.setattr(ranks_module, "_OUTER_BLOCK_BYTES", 3 * block_bytes)
        assert recall_at_k(sims, truth, ks) == expected


def test_larger_matrix_with_rounded_scores_matches_the_spec() -> None:
    rng = np.random.default_rng(11)
    sims = rng.random((300, 257), dtype=np.float32).round(1)
    truth = rng.integers(0, 257, size=300)
    ks = [1, 5, 10, 50, 300]
    assert recall_at_k(sims, truth, ks) == spec_recall_at_k(sims.tolist(), truth.tolist(), ks)


# ---------------------------------------------------------------------------------------------
# Bad input: TypeError for the wrong kind, ValueError for a wrong value; messages name the argument

GOOD = [[0.1, 0.2], [0.3, 0.4]]


@pytest.mark.parametrize(
    ("sims", "match"),
    [
        ([0.1, 0.2], r"sim_matrix must be 2-D.*\(2,\)"),
        (np.zeros((2, 2, 2)), r"sim_matrix must be 2-D.*\(2, 2, 2\)"),
        ([], r"sim_matrix must be 2-D"),
        ([[], []], r"sim_matrix must not be empty.*\(2, 0\)"),
        (np.zeros((0, 3)), r"sim_matrix must not be empty.*\(0, 3\)"),
        ([[0.1, 0.2], [0.3]], r"sim_matrix must be a rectangular array"),
        ([[0.1, math.nan], [0.3, 0.4]], r"sim_matrix contains NaN \(first at row 0, column 1\)"),
        (
            np.array([[0.1, 0.2], [0.3, np.nan]], dtype=np.float32),
            r"sim_matrix contains NaN.*row 1, column 1",
        ),
    ],
)
def test_bad_sim_matrix_values_raise_value_error(sims: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        recall_at_k(sims, [0, 0], [1])


def test_nan_found_in_a_late_block_names_its_row() -> None:
    sims = np.zeros((2000, 300), dtype=np.float32)
    sims[1777, 5] = np.nan
    with pytest.raises(ValueError, match=r"row 1777, column 5"):
        recall_at_k(sims, np.zeros(2000, dtype=np.int64), [1])


def test_nan_at_the_ground_truth_is_rejected_too() -> None:
    with pytest.raises(ValueError, match="NaN"):
        recall_at_k([[math.nan, 1.0]], [0], [1])


@pytest.mark.parametrize(
    ("sims", "match"),
    [
        ([["a", "b"], ["c", "d"]], r"sim_matrix must hold real numbers.*<U1"),
        ([[True, False], [False, True]], r"sim_matrix must hold real numbers.*bool"),
        (np.ones((2, 2), dtype=complex), r"sim_matrix must hold real numbers.*complex"),
        ([[None, 1.0], [0.0, 1.0]], r"sim_matrix must hold real numbers.*object"),
        (None, r"sim_matrix must hold real numbers"),
        ("0.5", r"sim_matrix must be array-like.*str"),
    ],
)
def test_non_numeric_sim_matrix_raises_type_error(sims: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        recall_at_k(sims, [0, 0], [1])


@needs_torch
def test_a_tensor_that_requires_grad_is_a_type_error_naming_the_argument() -> None:
    with pytest.raises(TypeError, match="sim_matrix cannot be read as an array"):
        recall_at_k(torch.ones((2, 2), requires_grad=True), [0, 0], [1])


@pytest.mark.parametrize(
    ("truth", "error", "match"),
    [
        ([0], ValueError, r"ground_truth must have 2 entries.*got 1"),
        ([0, 1, 1], ValueError, r"ground_truth must have 2 entries.*got 3"),
        ([], ValueError, r"ground_truth must have 2 entries.*got 0"),
        (np.array([[0], [1]]), ValueError, r"ground_truth must be 1-D.*\(2, 1\)"),
        ([[0], [1]], TypeError, r"ground_truth\[0\] must be an integer index, got \[0\] \(list\)"),
        ([0, 2], ValueError, r"ground_truth\[1\] = 2 is out of range \[0, 2\)"),
        ([-1, 0], ValueError, r"ground_truth\[0\] = -1 is out of range"),
        (np.array([0, 5], dtype=np.uint8), ValueError, r"ground_truth\[1\] = 5 is out of range"),
        ([0, 1.0], TypeError, r"ground_truth\[1\] must be an integer index, got 1\.0 \(float\)"),
        ([True, 0], TypeError, r"ground_truth\[0\] must be an integer index, got True \(bool\)"),
        ([0, np.bool_(True)], TypeError, r"ground_truth\[1\] must be an integer index"),
        (np.array([0.0, 1.0]), TypeError, r"ground_truth must hold integer indices, got dtype float64"),
        (np.array([True, False]), TypeError, r"ground_truth must hold integer indices, got dtype bool"),
        (np.array([0, "1"], dtype=object), TypeError, r"ground_truth\[1\] must be an integer index, got '1'"),
        (["0", "1"], TypeError, r"ground_truth\[0\] must be an integer index, got '0' \(str\)"),
    ],
)
def test_bad_ground_truth(truth: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        recall_at_k(GOOD, truth, [1])


@needs_torch
def test_a_float_tensor_is_not_ground_truth() -> None:
    with pytest.raises(TypeError, match=r"ground_truth must hold integer indices, got dtype float32"):
        recall_at_k(GOOD, torch.tensor([0.0, 1.0]), [1])


@pytest.mark.parametrize(
    ("ks", "error", "match"),
    [
        ([], ValueError, r"ks must not be empty"),
        ([1, 0], ValueError, r"ks\[1\] must be a positive integer, got 0"),
        ([-3], ValueError, r"ks\[0\] must be a positive integer, got -3"),
        ([1.0], TypeError, r"ks\[0\] must be a positive integer, got 1\.0 \(float\)"),
        ([True], TypeError, r"ks\[0\] must be a positive integer, got True \(bool\)"),
        ([1, np.float64(5)], TypeError, r"ks\[1\] must be a positive integer"),
        (["1"], TypeError, r"ks\[0\] must be a positive integer, got '1'"),
        (5, TypeError, r"ks must be a sequence of positive integers, got 5 \(int\)"),
        ("15", TypeError, r"ks must be a sequence of positive integers"),
        (None, TypeError, r"ks must be a sequence of positive integers, got None"),
        (np.array([[1, 5]]), ValueError, r"ks must be 1-D"),
    ],
)
def test_bad_ks(ks: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        recall_at_k(GOOD, [0, 1], ks)
