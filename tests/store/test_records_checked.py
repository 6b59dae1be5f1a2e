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
    with pytest.raises(ValueError, match=r"maxiter must lie in \[1, 10000\]"):
        check_method_params("diffusion", params)
    settings = tmp_path / "tuned.json"
    document = {"rerank": True, "rerank_method": "diffusion", **params}
    settings.write_text(
        json.dumps({"format": "galleria-settings", "format_version": 1, "settings": document})
    )
    with pytest.raises(ValueError, match=r"tuned\.json.*maxiter must lie in \[1, 10000\]"):
        read_settings(settings)


# ---------------------------------------------------------------------------- numbers that overflow


def test_vectors_that_would_overflow_are_refused_naming_the_row() -> None:
    import numpy as np

    from galleria import InMemoryImageEmbeddingStore

    for dtype in (np.float32, np.float64):
        huge = np.array([[1.0, 0.0], [0.0, 1.0], [3e30, 1.0]], dtype=dtype)
        for space in ("ip", "l2"):  # cosine normalises first: any finite size is fine there
            with pytest.raises(ValueError, match=r"embeddings row 2 .*overflow"):
                InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c"], huge, space=space)
    store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2), space="ip")
    with pytest.raises(ValueError, match=r"row 0 .*overflow"):
        store.retrieve_by_vector([1e30, 1e30], k=2)


def test_a_filled_index_with_overflowing_rows_is_refused() -> None:
    import numpy as np

    from galleria import InMemoryImageEmbeddingStore
    from galleria.index import ExactIndex

    index = ExactIndex("l2")
    index._dim, index._size = 2, 2  # a filled index made elsewhere: rows set behind add's back
    index._buffer = np.array([[1.0, 0.0], [2e30, 0.0]], dtype=np.float32)
    with pytest.raises(ValueError, match=r"search_index row 1"):
        InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], None, search_index=index)


def test_a_saved_exact_index_with_overflowing_rows_is_refused_at_load() -> None:
    import numpy as np

    from galleria.index import ExactIndex, _serial

    vectors = np.array([[1, 0, 0], [0, 4e19, 0], [0, 0, 1]], np.float32)
    forged = _serial.pack_parts("exact", {"space": "l2", "dim": 3}, {"vectors": vectors}).to_bytes()
    with pytest.raises(ValueError, match=r"row 1 .*overflow"):
        ExactIndex.from_bytes(forged)


def test_ivfpq_centroids_that_would_overflow_are_refused() -> None:
    import faiss
    import numpy as np

    from galleria.index._faiss_check import check_faiss_bytes

    rng = np.random.default_rng(0)
    train = rng.normal(size=(512, 8)).astype(np.float32)
    quantizer = faiss.IndexFlatL2(8)
    index = faiss.IndexIVFPQ(quantizer, 8, 4, 2, 4)
    index.train(train)
    index.add(train[:32])
    data = bytes(faiss.serialize_index(index))
    assert check_faiss_bytes(data, "honest") == "IndexIVFPQ"
    centroids = quantizer.reconstruct_n(0, 4).astype("<f4").tobytes()
    assert data.count(centroids) == 1
    forged = data.replace(centroids, np.full(32, 3e38, dtype="<f4").tobytes())
    with pytest.raises(ValueError, match=r"magnitude 3e\+38.*overflow"):
        check_faiss_bytes(forged, "forged")


def test_non_finite_index_results_are_never_returned_as_scores() -> None:
    import numpy as np

    from galleria import InMemoryImageEmbeddingStore

    store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b", "c"], np.eye(3))
    real = store._index.search

    def broken(queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        ids, scores = real(queries, k)
        scores = scores.copy()
        scores[:, 1] = np.nan
        scores[:, 2] = -np.inf
        return ids, scores

    store._index.search = broken  # type: ignore[method-assign]
    results = store.retrieve_by_vector([1.0, 0.0, 0.0], k=3)[0]
    assert [c.path for c in results] == ["a"]
    assert all(np.isfinite(c.score) for c in results)


# ---------------------------------------------------------------------------- forged offline tables


def _resealed(source: Path, target: Path, edit: object, old: bool = False) -> Path:
    """A tamperer with galleria's own writer: tensors edited, every digest computed afresh; ``old``:
    laid out as files were before the extension slot."""
    from _support.store_files import old_layout, read_parts
    from galleria.store.persistence import write_store

    header, tensors = read_parts(source)
    edit(tensors)  # type: ignore[operator]
    if old:
        header, tensors = old_layout(header, tensors)
    write_store(str(target), tensors, header)
    return target


POSITIONS, VALUES = "ext/offline_diffusion/positions", "ext/offline_diffusion/values"


@pytest.fixture
def with_offline(tmp_path: Path) -> Path:
    import numpy as np

    from galleria import InMemoryImageEmbeddingStore
    from galleria.rerank.decoupled import prepare_offline_diffusion

    rng = np.random.default_rng(5)
    centres = rng.normal(size=(6, 16))
    vectors = np.repeat(centres, 8, axis=0) + 0.3 * rng.normal(size=(48, 16))
    store = InMemoryImageEmbeddingStore.from_embeddings([f"p{i}" for i in range(48)], vectors)
    prepare_offline_diffusion(store, k=5, truncation=12)
    file = tmp_path / "offline.safetensors"
    store.save_to_disk(file)
    return file


def _negated(tensors: dict[str, object]) -> None:
    tensors[VALUES] = -tensors[VALUES]  # type: ignore[operator]


def _shuffled(tensors: dict[str, object]) -> None:
    import numpy as np

    positions = np.array(tensors[POSITIONS])
    rng = np.random.default_rng(0)
    for row in range(positions.shape[0]):  # still valid: the item first, distinct rows in range
        others = rng.permutation(np.setdiff1d(np.arange(positions.shape[0]), [row]))[: positions.shape[1] - 1]
        positions[row, 1:] = others
    tensors[POSITIONS] = positions.astype(np.int32)


def _scaled(tensors: dict[str, object]) -> None:
    import numpy as np

    values = np.array(tensors[VALUES])
    values[:, 1:] *= 3.0  # the item's own value kept: only the recomputation can tell
    tensors[VALUES] = values


@pytest.mark.parametrize("edit", [_negated, _shuffled, _scaled], ids=["negated", "shuffled", "scaled"])
@pytest.mark.parametrize("recompute", [True, False], ids=["recomputed", "bounded"])
@pytest.mark.parametrize("old", [False, True], ids=["slot", "old-layout"])
def test_a_forged_offline_table_is_refused_on_first_use(
    with_offline: Path,
    tmp_path: Path,
    edit: object,
    recompute: bool,
    old: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from galleria import InMemoryImageEmbeddingStore
    from galleria.rerank import witness
    from galleria.rerank.decoupled import DecoupledDiffusionReranker

    def first_use(file: Path) -> None:
        store = InMemoryImageEmbeddingStore.load_from_disk(file)
        pool = store.retrieve_by_vector(store.embeddings[3], k=10)[0]
        DecoupledDiffusionReranker(store, k=5, truncation=12).rerank(pool, top_k=5)

    first_use(with_offline)  # the honest file loads and is used
    if not recompute:  # a gallery too large to recompute: the sampled lists and bounds must catch it
        monkeypatch.setattr(witness, "_WITNESS_FULL", 0)
        if edit is _scaled:
            pytest.skip("only the recomputation sees values scaled away from the item itself")
    forged = _resealed(with_offline, tmp_path / "forged.safetensors", edit, old)
    where = (
        r"header key 'offline_diffusion' \(tensors 'diffusion_positions', 'diffusion_values'\)"
        if old
        else r"header key 'extensions\.offline_diffusion' \(tensors 'ext/offline_diffusion/positions', "
        r"'ext/offline_diffusion/values'\)"
    )
    with pytest.raises(ValueError, match=rf"forged\.safetensors': {where} does not match"):
        first_use(forged)
