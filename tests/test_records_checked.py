"""Records and numbers that cannot steer results (issue 25, §4 and the smaller items): settings
records, cost bounds, forged stored records and overflowing vectors are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from galleria.rerank.registry import check_method_params
from galleria.tune.provenance import check_tuned_split, path_hashes, split_record


def record(**split: object) -> dict[str, object]:
    made = split_record(
        seed=0, split_option={"query_fraction": 0.1}, test_paths=["q"], tuned_paths=["a", "b"]
    )
    made["test_split"].update(split)  # type: ignore[union-attr]
    return made


def test_a_query_fraction_that_is_an_object_names_the_file_and_the_key() -> None:
    with pytest.raises(ValueError, match=r"settings file 's\.json': tuned_on\.test_split\.query_fraction"):
        check_tuned_split(
            record(query_fraction={"x": 1}),
            seed=0,
            split_option={"query_fraction": 0.1},
            test_paths=["q"],
            gallery_paths=["a", "b"],
            where="settings file 's.json'",
        )


@pytest.mark.parametrize(
    ("field", "value"),
    [("seed", "0"), ("seed", True), ("n_queries", 0), ("query_fraction", 1.5), ("digest", 3)],
)
def test_every_split_field_is_typed(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"'s\.json'.*tuned_on\.test_split\.{field}"):
        check_tuned_split(
            record(**{field: value}),
            seed=0,
            split_option={"query_fraction": 0.1},
            test_paths=["q"],
            gallery_paths=["a", "b"],
            where="'s.json'",
        )


@pytest.mark.parametrize("hashes", ["", path_hashes(["a"])])
def test_path_hashes_cannot_turn_the_leak_check_off(hashes: str) -> None:
    forged = record()
    forged["gallery"]["path_hashes"] = hashes  # type: ignore[index]
    with pytest.raises(ValueError, match=r"'s\.json'.*tuned_on\.gallery\.(path_hashes|n_images)"):
        check_tuned_split(
            forged,
            seed=0,
            split_option={"query_fraction": 0.1},
            test_paths=["q"],
            gallery_paths=["a", "b", "q"],
            where="'s.json'",
        )


def test_an_honest_record_still_passes() -> None:
    check_tuned_split(
        record(),
        seed=0,
        split_option={"query_fraction": 0.1},
        test_paths=["q"],
        gallery_paths=["a", "b", "q"],
        where="f",
    )


def test_diffusion_iterations_are_bounded_at_validation(tmp_path: Path) -> None:
    from galleria.tune.settings import read_settings

    params = {"tol": 0.0, "maxiter": 2**63 - 1}
    with pytest.raises(ValueError, match=r"maxiter must be at most"):
        check_method_params("diffusion", params)
    settings = tmp_path / "tuned.json"
    document = {"rerank": True, "rerank_method": "diffusion", **params}
    settings.write_text(
        json.dumps({"format": "galleria-settings", "format_version": 1, "settings": document})
    )
    with pytest.raises(ValueError, match=r"tuned\.json.*maxiter must be at most"):
        read_settings(settings)
