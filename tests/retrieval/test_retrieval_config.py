"""RetrievalConfig: a method by name with its parameters; old keywords, old files and old imports."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from galleria.retrieval import RetrievalConfig, Searcher, standard_configs
from galleria.store import InMemoryImageEmbeddingStore


def _store() -> InMemoryImageEmbeddingStore:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(8, 16))
    vectors = np.repeat(centres, 30, axis=0) + 0.3 * rng.normal(size=(240, 16))
    return InMemoryImageEmbeddingStore.from_embeddings([f"i{n:03d}" for n in range(240)], vectors)


def test_old_names_still_work() -> None:
    import galleria.evaluation as evaluation
    from galleria.evaluation import configs

    assert evaluation.RetrievalConfig is RetrievalConfig and configs.standard_configs is standard_configs
    with pytest.warns(DeprecationWarning, match="k1"):
        old = RetrievalConfig("r", rerank=True, k1=9, k2=3, lambda_value=0.5)
    assert old == RetrievalConfig("r", rerank=True, rerank_params={"k1": 9, "k2": 3, "lambda_value": 0.5})
    assert (old.k1, old.k2, old.lambda_value) == (9, 3, 0.5)
    with pytest.warns(DeprecationWarning):
        configs_old = standard_configs(k1=9, k2=3, lambda_value=0.5)
    assert configs_old[-1].rerank_params == {"k1": 9, "k2": 3, "lambda_value": 0.5}
    with pytest.raises(TypeError, match="unexpected"):
        RetrievalConfig("r", k3=1)  # type: ignore[call-arg]


def test_a_settings_file_keeps_its_meaning() -> None:
    """A mapping without rerank_preset (every file galleria 0.1 wrote) means the paper's values."""
    old = RetrievalConfig.from_settings({"query_expansion": True, "rerank": True, "k1": 9, "pool": 50})
    assert (old.expansion_alpha, old.expansion_neighbors) == (3.0, 50)
    assert old.rerank_params == {"k1": 9, "k2": 6, "lambda_value": 0.3} and not old.adaptive
    new = RetrievalConfig("n", query_expansion=True, rerank=True, rerank_method="gnn")
    settings = new.settings()
    assert settings["rerank_preset"] == "adaptive" and "expansion_neighbors" not in settings
    assert RetrievalConfig.from_settings(settings, name="n") == new
    with pytest.raises(ValueError, match="unknown key"):
        RetrievalConfig.from_settings({"rerank": True, "rerank_method": "gnn", "query_k": 3})


def test_defaults_are_the_adaptive_rules_and_paper_is_by_name() -> None:
    from galleria.rerank.adaptive import default_rerank_params

    store = _store()
    adaptive = Searcher(store, RetrievalConfig("a", query_expansion=True, rerank=True)).config
    rule = default_rerank_params(store, "aqe", reranked=True)  # αQE before a re-ranker
    assert (adaptive.expansion_alpha, adaptive.expansion_neighbors) == tuple(rule.values())
    alone = Searcher(store, RetrievalConfig("e", query_expansion=True)).config
    assert (alone.expansion_alpha, alone.expansion_neighbors) == tuple(
        default_rerank_params(store, "aqe").values()
    )
    assert adaptive.rerank_params == default_rerank_params(store)
    paper = RetrievalConfig("p", query_expansion=True, rerank=True, rerank_preset="paper")
    assert (paper.expansion_alpha, paper.expansion_neighbors) == (3.0, 50)
    # the store's own αQE default is the same rule, explicit values as given
    queries = store.embeddings[:5]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        by_default = store.retrieve_by_vector(queries, 10, query_expansion=True)
    explicit = store.retrieve_by_vector(
        queries, 10, query_expansion=True, **default_rerank_params(store, "aqe")
    )
    assert [[c.path for c in found] for found in by_default] == [
        [c.path for c in found] for found in explicit
    ]
    paper_lists = store.retrieve_by_vector(queries, 10, query_expansion=True, expansion_neighbors=50)
    assert [[c.path for c in f] for f in paper_lists] != [[c.path for c in f] for f in by_default]


def test_small_galleries_read_their_neighbourhoods_within_a_tenth() -> None:
    from galleria.rerank.adaptive import GalleryStatistics, params_from_statistics

    small = GalleryStatistics(120, 120, (5, 10, 20), (0.51, 0.59, 0.70), (3.0, 6.5, 16.0))
    params = params_from_statistics(small)
    assert params["k-reciprocal"] == {"k1": 12, "k2": 2, "lambda_value": 0.62}
    assert params["diffusion"]["k"] == 12 and params["gnn"]["k1"] == 12
    large = GalleryStatistics(1200, 200, (5, 10, 20), (0.51, 0.59, 0.70), (3.0, 6.5, 16.0))
    assert params_from_statistics(large)["k-reciprocal"]["k1"] == 20  # read at k = 20, as before
